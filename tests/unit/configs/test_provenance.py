"""Reference configs: their provenance tables say what the configs set.

A reference config reproduces a published recipe. docs/provenance/ holds one
file per source, with a section per config that follows it (`## configs/
NAME.py`) and in it a table of every hyperparameter, one row each, three
columns split by `|`, in a ```text block:

    Hyperparameter  | Source (file:line)             | This config (field=value)
    --------------- | ------------------------------ | -------------------------
    batch           | 1024 (configs/tpu.py:25)       | batch_size=1024
    weight decay    | 1e-4 x 0.5 x sum(w**2) in the  | optimizer='sgd',
                    | loss (train.py:123-129)        | weight_decay=1e-4; a note

The header row's last cell starts with 'This config', a row of dashes
follows, and the table ends at the first line without `|`. A line whose first
cell is blank continues the row above (cells are joined with a space). The
last cell is '—' (nothing to set) or comma-separated `field=value` pairs,
where `field` is a dotted path into get_config() (`model_kwargs.pool`,
`mesh.fsdp`) and `value` a Python literal or arithmetic on literals
(`0.1*1024/256`); after the first `;` comes free text (e.g. 'DIFFERS: ...').

A config whose table is mostly another's gives only the rows that differ,
after the line 'The rows of `configs/BASE.py`, with these instead:'.

The tests check every pair against get_config(), and that every field the
config changes from the defaults appears in its table, so neither the table
nor the config can drift without failing here.
"""

import ast
import importlib
import math
import operator
import os
import pathlib
import re
import types

import ml_collections
import pytest

from recipes.config import defaults
from tests.helpers import ROOT

REFERENCE_CONFIGS = ('imagenet_resnet50_tpu', 'imagenet_resnet50_gpu',
                     'imagenet_vit_s16', 'imagenet_vit_b16_pod',
                     'imagenet_vit_b16_finetune', 'cifar10_vit_b16_finetune')
PROVENANCE = pathlib.Path(ROOT, 'docs', 'provenance')

# Cells the check reads, and fields a table need not mention.
_NOTHING = ('—', '-', '')
_UNDOCUMENTED_OK = frozenset({'log_every_steps', 'eval_every_steps',
                              'checkpoint_every_steps', 'keep_checkpoints'})


class TableError(ValueError):
  pass


def _split_top_level(text: str, separator: str, maxsplit: int = -1):
  """Splits on `separator` outside quotes and brackets."""
  parts, depth, quote, start = [], 0, None, 0
  for i, char in enumerate(text):
    if quote:
      if char == quote and text[i - 1] != '\\':
        quote = None
    elif char in '\'"':
      quote = char
    elif char in '([{':
      depth += 1
    elif char in ')]}':
      depth -= 1
    elif char == separator and depth == 0 and maxsplit != len(parts):
      parts.append(text[start:i])
      start = i + 1
  parts.append(text[start:])
  return parts


def table_rows(docstring: str) -> list[tuple[str, str, str]]:
  """(hyperparameter, source, this config) for each row of the table."""
  lines = docstring.splitlines()
  starts = [i for i, line in enumerate(lines)
            if line.count('|') == 2
            and line.split('|')[2].strip().startswith('This config')]
  if len(starts) != 1:
    raise TableError(f'expected one table header, found {len(starts)}')
  start = starts[0]
  if set(lines[start + 1].strip()) - set('-| '):
    raise TableError(f'no row of dashes under the header: {lines[start + 1]!r}')
  rows = []
  for line in lines[start + 2:]:
    if '|' not in line:
      break
    cells = [cell.strip() for cell in line.split('|')]
    if len(cells) != 3:
      raise TableError(f'expected 3 cells, got {len(cells)}: {line!r}')
    if cells[0]:
      rows.append(cells)
    elif not rows:
      raise TableError(f'continuation line before any row: {line!r}')
    else:
      rows[-1] = [' '.join(filter(None, (old, new)))
                  for old, new in zip(rows[-1], cells)]
  if not rows:
    raise TableError('the table has no rows')
  return [tuple(row) for row in rows]


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub,
              ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow,
              ast.USub: operator.neg, ast.UAdd: operator.pos}


def _evaluate(node):
  """A literal, or arithmetic on literals; nothing else."""
  if isinstance(node, ast.Expression):
    return _evaluate(node.body)
  if isinstance(node, ast.Constant):
    return node.value
  if isinstance(node, (ast.Tuple, ast.List)):
    return tuple(_evaluate(element) for element in node.elts)
  if isinstance(node, ast.Dict):
    return {_evaluate(k): _evaluate(v) for k, v in zip(node.keys, node.values)}
  if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
    return _OPERATORS[type(node.op)](_evaluate(node.left),
                                     _evaluate(node.right))
  if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
    return _OPERATORS[type(node.op)](_evaluate(node.operand))
  raise TableError(f'not a literal: {ast.unparse(node)!r}')


def config_pairs(cell: str) -> dict[str, object]:
  """{field: value} from a 'This config' cell (before any `;` note)."""
  pairs_text = _split_top_level(cell, ';', maxsplit=1)[0].strip()
  if pairs_text in _NOTHING:
    return {}
  pairs = {}
  for pair in _split_top_level(pairs_text, ','):
    field, equals, value = pair.strip().partition('=')
    field = field.strip()
    if not equals or not field.replace('.', '').replace('_', '').isalnum():
      raise TableError(f'not field=value: {pair.strip()!r} in {cell!r}')
    try:
      tree = ast.parse(value.strip(), mode='eval')
    except SyntaxError as e:
      raise TableError(f'bad value {value.strip()!r} in {cell!r}') from e
    if field in pairs:
      raise TableError(f'{field} appears twice in {cell!r}')
    pairs[field] = _evaluate(tree)
  return pairs


def documented_values(rows) -> dict[str, object]:
  """Every field=value in the rows; a field may appear in one row only."""
  values = {}
  for name, _, cell in rows:
    for field, value in config_pairs(cell).items():
      if field in values:
        raise TableError(f'{field} appears twice (again in row {name!r})')
      values[field] = value
  return values


def _lookup(config, field: str):
  value = config
  for key in field.split('.'):
    try:
      value = value[key]
    except (KeyError, TypeError):
      raise KeyError(field) from None
  return value


def _same(documented, actual) -> bool:
  if isinstance(documented, bool) or isinstance(actual, bool):
    return documented is actual
  if isinstance(documented, (int, float)) and isinstance(actual, (int, float)):
    return math.isclose(documented, actual, rel_tol=1e-9, abs_tol=0.0)
  if isinstance(documented, tuple) and isinstance(actual, (tuple, list)):
    return (len(documented) == len(actual)
            and all(map(_same, documented, actual)))
  return documented == actual


def _flatten(config, prefix=''):
  out = {}
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict):
      # ConfigDicts (model_kwargs, mesh, extra_eval_splits): one entry per key,
      # and an empty one as itself so it compares with the default.
      nested = _flatten(value, f'{prefix}{key}.')
      out.update(nested or {f'{prefix}{key}': value.to_dict()})
    else:
      out[f'{prefix}{key}'] = value
  return out


def mismatches(rows, config) -> list[str]:
  """What the table says and the config does not: empty when they agree."""
  problems = []
  documented = documented_values(rows)
  for field, value in documented.items():
    try:
      actual = _lookup(config, field)
    except KeyError:
      problems.append(f'{field}: in the table, not in the config')
      continue
    if not _same(value, actual):
      problems.append(f'{field}: table says {value!r}, config has {actual!r}')
  base = _flatten(defaults.get_config())
  for field, value in _flatten(config).items():
    if field in _UNDOCUMENTED_OK or field in documented:
      continue
    if field not in base or not _same(base[field], value):
      problems.append(f'{field}={value!r} changed from the default but '
                      f'not in the table')
  return problems


def _sections(text: str) -> dict[str, str]:
  """{config name: its section's text} of one provenance file."""
  sections = {}
  for section in re.split(r'(?m)^## ', text)[1:]:
    heading, body = section.split('\n', 1)
    match = re.fullmatch(r'configs/(\w+)\.py', heading.strip())
    if not match:
      raise TableError(f'a section heading that names no config: {heading!r}')
    sections[match[1]] = body
  return sections


def provenance_sections() -> dict[str, str]:
  """{config name: its section} over every file of docs/provenance/."""
  sections = {}
  for path in sorted(PROVENANCE.glob('*.md')):
    for name, body in _sections(path.read_text()).items():
      if name in sections:
        raise TableError(f'configs/{name}.py has two provenance tables')
      sections[name] = body
  return sections


def config_rows(name: str, sections: dict[str, str]):
  """The rows of config `name`'s table; those of the config it is based on,
  where its section gives only the rows that differ."""
  body = sections[name]
  table = re.search(r'```text\n(.*?)```', body, re.DOTALL)
  if not table:
    raise TableError(f'configs/{name}.py: no ```text table')
  rows = table_rows(table[1])
  base = re.search(r'The rows of `configs/(\w+)\.py`, with these instead',
                   body)
  if not base:
    return rows
  merged = {row[0]: row for row in config_rows(base[1], sections)}
  for row in rows:
    if row[0] not in merged:
      raise TableError(f'configs/{name}.py: row {row[0]!r} is not in the '
                       f'table of configs/{base[1]}.py')
    merged[row[0]] = row
  return list(merged.values())


def _module(name):
  return importlib.import_module(f'configs.{name}')


def test_every_reference_config_has_one_table_and_names_it():
  sections = provenance_sections()
  assert set(sections) == set(REFERENCE_CONFIGS)
  for path in PROVENANCE.glob('*.md'):
    for name in _sections(path.read_text()):
      assert f'docs/provenance/{path.name}' in _module(name).__doc__, name


@pytest.mark.parametrize('name', REFERENCE_CONFIGS)
def test_table_matches_config(name):
  rows = config_rows(name, provenance_sections())
  assert mismatches(rows, _module(name).get_config()) == []


@pytest.mark.parametrize('name', REFERENCE_CONFIGS)
def test_table_has_the_core_hyperparameters(name):
  documented = documented_values(config_rows(name, provenance_sections()))
  for field in ('model', 'dataset', 'batch_size', 'num_epochs', 'optimizer',
                'learning_rate', 'lr_schedule', 'warmup_epochs',
                'weight_decay', 'label_smoothing', 'augment', 'normalize',
                'half_precision'):
    assert field in documented, f'{name}: no row sets {field}'
  rows = config_rows(name, provenance_sections())
  assert len(rows) >= 20, [row[0] for row in rows]
  for row_name, source, cell in rows:
    # Each row cites its source with a file:line reference.
    assert any(char.isdigit() for char in source), (name, row_name, source)
    assert cell, (name, row_name)


def _altered(name, old: str, new: str) -> types.ModuleType:
  """The config file with `old` replaced once by `new`, as a fresh module."""
  path = os.path.join(ROOT, 'configs', f'{name}.py')
  with open(path) as f:
    source = f.read()
  assert source.count(old) >= 1, (name, old)
  module = types.ModuleType(f'altered_{name}')
  module.__file__ = path
  exec(compile(source.replace(old, new, 1), path, 'exec'),  # pylint: disable=exec-used
       module.__dict__)
  return module


def _altered_rows(name, old: str, new: str):
  """Config `name`'s rows from its provenance file with `old` replaced once
  by `new`."""
  sections = provenance_sections()
  assert sections[name].count(old) >= 1, (name, old)
  sections[name] = sections[name].replace(old, new, 1)
  return config_rows(name, sections)


def test_an_altered_table_value_fails():
  rows = _altered_rows('imagenet_resnet50_tpu', 'batch_size=1024',
                       'batch_size=1000')
  assert mismatches(rows, _module('imagenet_resnet50_tpu').get_config()) == [
      'batch_size: table says 1000, config has 1024']


def test_a_table_of_differences_takes_the_other_rows_from_its_base():
  # The GPU table gives its batch; the TPU table's Nesterov row holds for it.
  rows = dict((row[0], row[2]) for row in config_rows(
      'imagenet_resnet50_gpu', provenance_sections()))
  assert rows['batch'] == 'batch_size=512'
  assert rows['Nesterov'].startswith('nesterov=True')
  # So a change to the TPU table's row shows in the GPU config's check.
  sections = provenance_sections()
  sections['imagenet_resnet50_tpu'] = sections[
      'imagenet_resnet50_tpu'].replace('| nesterov=True;', '| nesterov=False;')
  rows = config_rows('imagenet_resnet50_gpu', sections)
  assert mismatches(rows, _module('imagenet_resnet50_gpu').get_config()) == [
      'nesterov: table says False, config has True']
  with pytest.raises(TableError, match="row 'batchsize' is not in the table"):
    _altered_rows('imagenet_resnet50_gpu', '\nbatch  ', '\nbatchsize')


def test_an_altered_config_value_fails():
  module = _altered('imagenet_vit_s16', 'config.mixup_alpha = 0.2',
                    'config.mixup_alpha = 0.8')
  assert mismatches(config_rows('imagenet_vit_s16', provenance_sections()),
                    module.get_config()) == [
      'mixup_alpha: table says 0.2, config has 0.8']


def test_an_undocumented_change_fails():
  module = _altered('imagenet_resnet50_tpu', 'return config',
                    'config.ema_decay = 0.9999\n  return config')
  assert mismatches(
      config_rows('imagenet_resnet50_tpu', provenance_sections()),
      module.get_config()) == [
          'ema_decay=0.9999 changed from the default but not in the table']


def test_a_missing_field_fails():
  rows = _altered_rows('imagenet_resnet50_gpu', 'half_precision=False',
                       'half_precisoin=False')
  problems = mismatches(rows, _module('imagenet_resnet50_gpu').get_config())
  assert 'half_precisoin: in the table, not in the config' in problems


def test_parser():
  doc = """Title.

  Name  | Source (x.py:1)  | This config (field=value)
  ----- | ---------------- | -------------------------
  a     | one (x.py:2)     | batch_size=2*8, optimizer='sgd';
        | and more         | note, with = and , signs
  b     | two (x.py:3)     | —; nothing to set
  c     | three (x.py:4)   | extra_eval_splits.minival='train[99%:]',
        |                  | model_kwargs.size=(1, 2)

  After the table | with a bar.
  """
  assert table_rows(doc)[0] == ('a', 'one (x.py:2) and more',
                                "batch_size=2*8, optimizer='sgd'; note, with "
                                '= and , signs')
  assert documented_values(table_rows(doc)) == {
      'batch_size': 16, 'optimizer': 'sgd',
      'extra_eval_splits.minival': 'train[99%:]', 'model_kwargs.size': (1, 2)}
  with pytest.raises(TableError, match='not field=value'):
    config_pairs('batch_size 16')
  with pytest.raises(TableError, match='not a literal'):
    config_pairs('batch_size=__import__("os")')
  with pytest.raises(TableError, match='batch_size appears twice in'):
    documented_values(table_rows(doc.replace("optimizer='sgd'",
                                             'batch_size=3')))
  with pytest.raises(TableError, match=r'batch_size appears twice \(again'):
    documented_values(table_rows(doc.replace('model_kwargs.size',
                                             'batch_size')))
  with pytest.raises(TableError, match='expected 3 cells'):
    table_rows(doc.replace('and more ', 'and | more '))
  with pytest.raises(TableError, match='one table header, found 0'):
    table_rows(doc.replace('This config', 'Ours'))

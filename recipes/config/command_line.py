"""The command line of the commands that run a config (recipes/train.py,
recipes/evaluate.py): the --config, --workdir and --distributed flags, the
loading of a config file, --help listing every config field by section, and
each mistake in the flags reported in one line saying what to do.
"""

import difflib
import importlib.machinery
import importlib.util
import os
import re
import sys
import textwrap
from typing import Callable

import ml_collections
from absl import flags, logging
from ml_collections import config_flags

from recipes.config import defaults, fields
from recipes.config.fields import SECTIONS
from recipes.runtime import errors
from recipes.runtime.errors import UserError

CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'The config file, e.g. configs/fashion_mnist_pmap.py.',
    lock_config=True)
WORKDIR = flags.DEFINE_string(
    'workdir', None, 'Directory (or gs:// path) for checkpoints, summaries '
    'and the final config; a run resumes from it. recipes.train without it: '
    'a new runs/DATE-TIME_CONFIG in the current directory.')
DISTRIBUTED = flags.DEFINE_bool(
    'distributed', False, 'Initialize jax.distributed with auto-detection '
    '(TPU pods, SLURM); local multi-process runs are set up by launch/local.sh '
    'through environment variables instead.')


class ConfigFileParser(flags.ArgumentParser):
  """Loads --config=FILE[:ARGUMENT]: FILE's get_config(ARGUMENT), locked.

  Replaces config_flags' own parser, which splits at the first ':' (so a
  directory with one in its name cannot be used), defers a missing file's
  error to the first use of the config and puts tracebacks into flag errors:
  here each failure is one UserError. Keeps the loaded config to explain bad
  overrides of it.
  """

  def __init__(self):
    self.config = None
    self.path = None  # The file, for the commands' reports.

  def parse(self, argument):
    path, args = split_config_argument(argument)
    # A config may import its neighbours as a package ('from configs import
    # default'): the directory above the config's is importable while it
    # loads, from whatever directory the command runs.
    above = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    sys.path.insert(0, above)
    try:
      loader = importlib.machinery.SourceFileLoader('config_file', path)
      module = importlib.util.module_from_spec(
          importlib.util.spec_from_loader(loader.name, loader))
      loader.exec_module(module)
      config = module.get_config(*args)
    except SyntaxError as e:
      raise UserError(f'config file {path!r} has a syntax error in line '
                      f'{e.lineno}: {e.msg}; fix the file.') from e
    except Exception as e:  # pylint: disable=broad-except
      raise UserError(f'config file {path!r} failed to load '
                      f'({type(e).__name__}: {one_line(e)}); fix the '
                      'file.') from e
    except SystemExit as e:  # Else the command would end there, maybe with 0.
      raise UserError(f'config file {path!r} ended the program while it '
                      f'loaded (SystemExit: {e.code!r}); a config file must '
                      'not call sys.exit(): return the config from '
                      'get_config().') from e
    finally:
      sys.path.remove(above)
    if not isinstance(config, ml_collections.ConfigDict):
      raise UserError(f'get_config() in {path!r} returned a '
                      f'{type(config).__name__}, not an ml_collections.'
                      'ConfigDict; start from recipes/config/defaults.py '
                      'get_config() and return that.')
    config.lock()  # Overrides may change fields, not add them.
    self.config, self.path = config, path
    return config

  def flag_type(self):
    return 'config object'


def split_config_argument(argument: str) -> tuple[str, tuple[str, ...]]:
  """(file, get_config's arguments) of FILE[:ARGUMENT]; FILE may hold ':'."""
  if os.path.isfile(argument):
    return argument, ()
  colons = [i for i, c in enumerate(argument) if c == ':']
  for i in reversed(colons):
    if os.path.isfile(argument[:i]):
      return argument[:i], (argument[i + 1:],)
  given = ' (FILE:ARGUMENT passes ARGUMENT to get_config)' if colons else ''
  raise UserError(f'config file {argument!r} not found{given}; give the '
                  'path of a config, e.g. '
                  '--config=configs/fashion_mnist_pmap.py.')


CONFIG_FILE = ConfigFileParser()
flags.FLAGS[CONFIG.name].parser = CONFIG_FILE


def one_line(error: BaseException) -> str:
  """The message of `error` on one line."""
  # config_flags wraps some messages in quotes with escaped newlines.
  text = str(error.args[0] if error.args else error)
  text = text.replace("\\'", "'").replace('\\n', ' ')
  if len(text) > 1 and text[0] == text[-1] == "'":
    text = text[1:-1]
  return ' '.join(text.split())


def _fields(config, prefix: str = ''):
  """(name, value) of every field, nested ones as 'mesh' and 'mesh.data'."""
  for key, value in config.items():
    yield prefix + key, value
    if isinstance(value, ml_collections.ConfigDict):
      yield from _fields(value, f'{prefix}{key}.')


def _field_names(config) -> list[str]:
  return [name for name, _ in _fields(config)]


def _unknown_field(config, argv) -> str | None:
  """'unknown config field ...' with the close names, for an override."""
  names = _field_names(config)
  for arg in argv:
    match = re.match(r'--?(?:no)?config\.([^=]+)', arg)
    if match and match[1] not in names:
      field = match[1]
      others = [n for n in names if not field.startswith(n + '.')]
      close = [f"'{n}'" for n in difflib.get_close_matches(field, others)]
      if not close:
        return (f"unknown config field '{field}'; --help lists all "
                'fields.')
      if len(close) > 1:
        close = [', '.join(close[:-1]), close[-1]]
      return (f"unknown config field '{field}'; did you mean "
              f"{' or '.join(close)}? --help lists all fields.")
  return None


def _wrong_type(config, error: flags.IllegalFlagValueError) -> str | None:
  """'config field x must be an int, not ...' for a value it cannot parse."""
  # absl's text is f'flag --{name}={value}: {error of the parser}'.
  text = str(error).removesuffix(f': {error.__context__}')
  match = re.fullmatch(r'flag --config\.([\w.]+)=(.*)', text, re.DOTALL)
  if not match or match[1] not in _field_names(config):
    return None
  field, value = match.groups()
  current = fields.value(config, field)
  if isinstance(current, ml_collections.ConfigDict):
    current = current.to_dict()
  kind = {bool: 'true or false', int: 'an int', float: 'a float'}.get(
      type(current), f'a {type(current).__name__}')
  example = str(current).lower() if isinstance(current, bool) else current
  return (f'config field {field} must be {kind}, not {value!r}; e.g. '
          f'--config.{field}={example}.')


def _missing_flags(command: str, required) -> str:
  missing = [f'--{holder.name}' for holder in (CONFIG, WORKDIR)
             if holder.name in required
             and flags.FLAGS[holder.name].value is None]
  return (f'{" and ".join(missing)} {"is" if len(missing) == 1 else "are"} '
          f'missing; e.g. python -m {command} '
          '--config=configs/fashion_mnist_pmap.py --workdir=/tmp/fashion_mnist '
          '(--help lists the flags and config fields).')


def _flag_error(error: Exception, argv, command: str, required) -> str:
  """One line for a flag parsing error, naming the flag and how to fix it."""
  message = None
  if isinstance(error, UserError):
    message = str(error)
  elif 'must have a value other than None' in str(error):
    message = _missing_flags(command, required)
  elif CONFIG_FILE.config is not None:
    if isinstance(error, (AttributeError, KeyError)):  # From overrides.
      message = _unknown_field(CONFIG_FILE.config, argv)
    elif isinstance(error, flags.IllegalFlagValueError):
      message = _wrong_type(CONFIG_FILE.config, error)
  return message or one_line(error)


_HELP_FLAGS = ('-h', '-?', '-help', '--help', '--helpshort', '--helpfull')


def _config_argument(argv) -> str | None:
  for i, arg in enumerate(argv):
    if arg in ('-config', '--config') and i + 1 < len(argv):
      return argv[i + 1]
    if arg.startswith(('-config=', '--config=')):
      return arg.split('=', 1)[1]
  return None


def _help(argv, doc: str, command_flags) -> str:
  """The command's flags, and the config's fields by section with their
  values and what each does.

  (absl's own help would list the flags of every library loaded, TensorFlow's
  and absltest's among them, and not the config fields.)
  """
  path = _config_argument(argv)
  config = CONFIG_FILE.parse(path) if path else defaults.get_config()
  lines = [doc.strip(), '', 'Flags:']
  for holder in command_flags:
    flag = flags.FLAGS[holder.name]
    name = f'--[no]{flag.name}' if flag.boolean else f'--{flag.name}'
    lines.append(textwrap.fill(f'{name}: {flag.help}', 79,
                               initial_indent='  ', subsequent_indent='    '))
  lines.append('  --verbosity=1: the log at debug level, with the details of '
               'errors.')
  values = (f'as {split_config_argument(path)[0]} sets them' if path else
            'at their defaults')
  lines += ['', textwrap.fill(
      f'Config fields {values}; override any with --config.FIELD=VALUE '
      '(docs/config.md has them as a table):', 79)]
  shown = set()
  for section, section_fields in SECTIONS.items():
    lines += ['', f'{section}:']
    for field in section_fields:
      lines += _field_help(field.name, fields.value(config, field.name),
                           field.help)
      shown.add(field.name)
  others = [(name, value) for name, value in _fields(config)
            if name not in shown and not any(
                n.startswith(name + '.') or name.startswith(n + '.')
                for n in shown)
            and (not isinstance(value, ml_collections.ConfigDict) or not value)]
  if others:
    lines += ['', 'the config file\'s own:']
    for name, value in others:
      lines += _field_help(name, value, '')
  if '--helpfull' in argv:
    lines += [flags.FLAGS.module_help(module) for module in ('absl.logging',
                                                             'absl.app')]
  return '\n'.join(lines)


def _field_help(name: str, value, text: str) -> list[str]:
  if isinstance(value, ml_collections.ConfigDict):
    value = value.to_dict()  # Its repr is YAML.
  lines = [f'  {name} = {value!r}']
  if text:
    lines.append(textwrap.fill(text, 79, initial_indent='      ',
                               subsequent_indent='      '))
  return lines


def parser(command: str, doc: str, command_flags=(CONFIG, WORKDIR, DISTRIBUTED),
           required=('config', 'workdir')
           ) -> Callable[[list[str]], list[str]]:
  """The flags parser of a command, for `app.run(main, flags_parser=...)`.

  Args:
    command: the module run, e.g. 'recipes.train', for the examples.
    doc: what the command does, the first part of its --help.
    command_flags: the command's own flags (holders), listed by --help.
    required: the names of the flags it cannot run without.

  Returns:
    absl's flag parsing, with --help listing this command's flags and the
    config's fields, and mistakes in the flags reported in one line.
  """
  flags.mark_flags_as_required(list(required))

  def parse(argv):
    try:
      if any(arg in _HELP_FLAGS for arg in argv[1:]):
        print(_help(argv, doc, command_flags))
        sys.exit(0)
      return flags.FLAGS(argv)
    except Exception as e:  # pylint: disable=broad-except
      logging.debug('Flag parsing failed:', exc_info=True)
      sys.exit(f'error: '
               f'{errors.shorten(_flag_error(e, argv, command, required))}')

  return parse



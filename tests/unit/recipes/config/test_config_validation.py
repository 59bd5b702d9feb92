"""Every config field is checked before anything is loaded or written; data
and checkpoints that do not fit the config are one-line errors too. In
process, through `loop.train_and_evaluate` (the command calls the same check
first; tests/integration/test_bad_input.py runs a few of these through the
command itself)."""

import gzip
import math
import pathlib
import re

import ml_collections
import numpy as np
import pytest

from recipes import checkpoint, loop
from recipes.config import defaults as default
from recipes.config import command_line, fields, validation
from recipes.runtime.errors import UserError
from tests.helpers import ROOT, tiny_config
from tests.idx_files import write_fashion_mnist, write_idx


def _config(data_dir, **overrides):
  return tiny_config(**{
      'dataset': 'fashion_mnist_idx', 'data_dir': data_dir, 'model': 'mlp',
      'model_kwargs': {'hidden_sizes': (8,)}, **overrides})


# Fields whose value is a whole dict, checked as one.
DICT_FIELDS = ('model_kwargs', 'extra_eval_splits')


def _leaf_names(config, prefix=''):
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict) and key not in DICT_FIELDS:
      yield from _leaf_names(value, f'{prefix}{key}.')
    else:
      yield prefix + key


def test_every_field_has_a_rule():
  names = set(_leaf_names(default.get_config()))
  assert names == set(validation.RULES) | set(validation.CHECKED_ELSEWHERE)


def test_every_field_says_what_it_does_and_allows():
  for name, field in fields.FIELDS.items():
    assert field.help.strip() and field.help.endswith('.'), name
    assert field.rule or field.checked_by, name


def test_the_docs_table_is_the_one_the_fields_give():
  """docs/config.md holds the table `python -m recipes.config.fields`
  prints: after a change to a field, run it and paste the table."""
  text = pathlib.Path(ROOT, 'docs', 'config.md').read_text()
  table = text.split('python -m recipes.config.fields -->\n', 1)[1]
  table = table.split('<!-- end of the generated table -->', 1)[0]
  assert table == fields.markdown_table()


def test_the_defaults_pass():
  validation.check(default.get_config())


BAD_VALUES = [
    # (field, value, what the error must say is allowed)
    ('log_every_steps', 0, 'an int >= 1'),
    ('seed', 2**70, 'an int from 0 to 2147483647'),
    ('seed', -1, 'an int from 0 to 2147483647'),
    ('keep_checkpoints', -1, 'an int >= 0 (0 = keep all)'),
    ('checkpoint_every_steps', -5,
     'an int >= -1 (0 = only at the end, -1 = never)'),
    ('warmup_epochs', -1.0, 'a finite number >= 0'),
    ('eval_every_steps', -1, 'an int >= 0 (0 = once per epoch)'),
    ('learning_rate', -0.1, 'a finite number >= 0'),
    ('learning_rate', math.nan, 'a finite number >= 0'),
    ('learning_rate', math.inf, 'a finite number >= 0'),
    ('batch_size', -8, 'an int >= 1'),
    ('batch_size', 0, 'an int >= 1'),
    ('eval_batch_size', -16, 'an int >= 0 (0 = batch_size)'),
    ('num_epochs', -2.0, 'a finite number >= 0'),
    ('num_train_steps', -3, 'an int >= 0 (0 = from num_epochs)'),
    ('momentum', 1.5, 'a finite number >= 0 and < 1'),
    ('b2', 1.0, 'a finite number >= 0 and < 1'),
    ('weight_decay', math.nan, 'a finite number >= 0'),
    ('decay_rate', 0.0, 'a finite number > 0'),
    ('decay_steps', 0, 'an int >= 1'),
    ('stall_timeout_seconds', -1.0, 'a finite number >= 0'),
    ('image_size', 0, 'an int >= 1'),
    ('strategy', 'pjit', "one of 'pmap', 'sharded', 'shard_map'"),
    ('data_source', 'disk', "one of 'auto', 'memory', 'stream'"),
    ('mode', 'test', "one of 'train', 'eval'"),
    ('optimizer', 'lamb', "one of 'sgd', 'adam', 'adamw'"),
    ('half_precision_dtype', 'float8', "one of 'bfloat16', 'float16'"),
    ('normalize', 'mnist', "one of '', 'cifar10', 'imagenet', 'minus_one_to_one'"),
    ('model', '', 'a non-empty string'),
    ('mesh.fsdp', 0, 'an int >= 1, or -1 for the devices left over'),
]


@pytest.mark.parametrize('field, value, allowed', BAD_VALUES,
                         ids=[f'{f}={v}' for f, v, _ in BAD_VALUES])
def test_a_bad_value_is_one_line_naming_field_value_and_what_is_allowed(
    data_dir, tmp_path, field, value, allowed):
  config = _config(data_dir)
  section, _, name = field.rpartition('.')
  (config[section] if section else config)[name] = value
  with pytest.raises(UserError) as error:
    loop.train_and_evaluate(config, str(tmp_path / 'work'))
  assert str(error.value) == (f'config field {field} is {value!r}; it must be '
                              f'{allowed}.')
  assert not (tmp_path / 'work').exists()  # Nothing loaded or written.


def test_a_plain_dict_is_not_a_config(tmp_path):
  with pytest.raises(UserError, match='is a dict, not an ml_collections'):
    loop.train_and_evaluate(dict(default.get_config()), str(tmp_path))


@pytest.mark.parametrize('code', [0, 3])
def test_a_config_file_that_exits_while_loading_is_one_line(tmp_path, code):
  path = tmp_path / 'exiting.py'
  path.write_text(f'import sys\nsys.exit({code})\n')
  with pytest.raises(UserError, match=(
      rf"config file '{re.escape(str(path))}' ended the program while it "
      rf'loaded \(SystemExit: {code}\)')):
    command_line.ConfigFileParser().parse(str(path))


@pytest.mark.slow
def test_fewer_steps_than_the_workdirs_checkpoint_is_an_error(
    data_dir, tmp_path):
  loop.train_and_evaluate(_config(data_dir, num_train_steps=6), str(tmp_path))
  with pytest.raises(UserError) as error:
    loop.train_and_evaluate(_config(data_dir, num_train_steps=4),
                            str(tmp_path))
  assert 'is of step 6, past the last step of this run (4)' in str(
      error.value)
  with checkpoint.manager(str(tmp_path)) as mngr:
    assert mngr.all_steps() == [6]  # Kept, and nothing new written.


def test_init_from_on_a_workdir_with_checkpoints_says_it_is_not_read(
    data_dir, tmp_path, caplog):
  source = str(tmp_path / 'source')
  loop.train_and_evaluate(_config(data_dir), source)
  work = str(tmp_path / 'work')
  loop.train_and_evaluate(_config(data_dir, num_train_steps=2), work)
  with caplog.at_level('WARNING'):
    loop.train_and_evaluate(_config(data_dir, init_from=source), work)
  said = [r.getMessage() for r in caplog.records
          if 'init_from' in r.getMessage()]
  assert said == [f'Not reading --config.init_from={source}: resuming from '
                  "this workdir's own checkpoint of step 2."]


def test_labels_outside_the_classes_are_an_error_not_a_nan_loss(tmp_path):
  write_fashion_mnist(str(tmp_path), num_train=64, num_test=16)
  labels = np.zeros(64, np.uint8)
  labels[5] = 10  # Fashion-MNIST has classes 0 to 9.
  write_idx(str(tmp_path / 'train-labels-idx1-ubyte.gz'), labels)
  with pytest.raises(UserError) as error:
    loop.train_and_evaluate(_config(str(tmp_path)), str(tmp_path / 'work'))
  assert str(error.value).startswith(
      'the training split has labels from 0 to 10, but the dataset has 10 '
      'classes (labels 0 to 9)')


@pytest.mark.parametrize('damage', ['not gzip', 'gzip cut short'])
def test_damaged_idx_files_are_one_line(tmp_path, damage):
  write_fashion_mnist(str(tmp_path), num_train=64, num_test=16)
  path = tmp_path / 't10k-images-idx3-ubyte.gz'
  data = path.read_bytes()
  path.write_bytes(gzip.decompress(data) if damage == 'not gzip'
                   else data[:len(data) // 2])
  with pytest.raises(UserError) as error:
    loop.train_and_evaluate(_config(str(tmp_path)), str(tmp_path / 'work'))
  assert str(error.value).startswith(f'{path} is not a complete gzip file')


@pytest.mark.parametrize('field, value, message', [
    ('extra_eval_splits', {'mini val': 'train[99%:]'}, 'a dict of {name'),
    ('extra_eval_splits', {'minival': ''}, 'a dict of {name'),
    # Their summaries would be those of the EMA (eval_ema/, eval_val_ema/).
    ('extra_eval_splits', {'ema': 'test'}, "neither 'ema' nor ending in"),
    ('extra_eval_splits', {'val': 'test', 'val_ema': 'train[99%:]'},
     "neither 'ema' nor ending in"),
    ('label_smoothing', 1.0, 'a finite number >= 0 and < 1'),
    ('mixup_alpha', -0.1, 'a finite number >= 0'),
    ('mix_prob', float('nan'), 'a finite number >= 0 and <= 1'),
    ('grad_accum_steps', 0, 'an int >= 1'),
    ('ema_decay', 1.0, 'a finite number >= 0 and < 1'),
    ('grad_clip_norm', float('inf'), 'a finite number >= 0'),
    ('weight_decay_scale', 'lr', "one of 'learning_rate', 'schedule'"),
    ('adam_mu_dtype', 'int8', "one of '', 'bfloat16'"),
    ('randaugment_magnitude', 11, 'an int from 0 to 10'),
    ('profile_steps', -1, 'an int >= 0'),
])
def test_toolkit_fields_are_checked(field, value, message):
  config = default.get_config()
  config[field] = value
  with pytest.raises(UserError, match=re.escape(f'config field {field} is')
                     ) as error:
    validation.check(config)
  assert message in str(error.value)
  assert '\n' not in str(error.value)  # A dict is shown as one, on one line.


def test_accumulation_with_float16_loss_scaling_is_refused():
  config = default.get_config()
  config.update(grad_accum_steps=2, half_precision=True,
                half_precision_dtype='float16')
  with pytest.raises(UserError, match='grad_accum_steps > 1 does not work'):
    validation.check(config)


def test_accumulation_that_does_not_divide_the_batch_names_batch_size(
    data_dir, tmp_path):
  # 8 devices x 3 micro-batches: 64 examples per step cannot be split so.
  with pytest.raises(UserError) as error:
    loop.train_and_evaluate(_config(data_dir, batch_size=64,
                                    grad_accum_steps=3), str(tmp_path))
  assert str(error.value) == (
      'batch_size 64 is not divisible by the 24 (= 8 devices x '
      'grad_accum_steps=3); use a multiple of 24, e.g. 48 or 72.')
  assert not (tmp_path / 'checkpoints').exists()


def test_pretrained_weights_are_named_once_and_by_a_known_tag(data_dir,
                                                             tmp_path):
  with pytest.raises(UserError, match='pretrained and init_from both name '
                     'weights to start from; set one of them'):
    validation.check(tiny_config(pretrained='tv_in1k', init_from='/x'))
  for model, tag, said in [
      ('resnet50', 'nope', "model 'resnet50' has no weights 'nope'; its "
       'tags: tv_in1k, tv2_in1k'),
      ('mlp', 'any', "model 'mlp' has no published weights; these have: ")]:
    with pytest.raises(UserError, match=re.escape(said)):
      loop.train_and_evaluate(_config(data_dir, model=model, pretrained=tag),
                              str(tmp_path / model))
    assert not (tmp_path / model).exists()  # Nothing written.

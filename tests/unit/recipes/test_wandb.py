"""Weights & Biases beside TensorBoard (recipes/runtime/wandb_writer.py): a
real run logged offline, read back from W&B's own files; the one-line errors
without the package or an account."""

import json
import pathlib
import struct
import sys
import zlib

import numpy as np
import pytest

from recipes import train
from recipes.config import validation
from recipes.runtime import summaries, wandb_writer
from recipes.runtime.errors import UserError
from tests.helpers import (ROOT, config_from_command_line, read_scalars,
                           tiny_config)

_INSTALL = "pip install -e '.[wandb]' (or pip install wandb)"
pytestmark = pytest.mark.usefixtures('fast_compiles')  # Tiny models.


def _config(data_dir, num_steps, **overrides):
  return tiny_config(**{
      'dataset': 'fashion_mnist_idx', 'data_dir': data_dir,
      'num_train_steps': num_steps, 'strategy': 'pmap',
      'wandb_project': 'zoo-tests', **overrides})


@pytest.fixture
def wandb_env(monkeypatch, tmp_path):
  """W&B's settings and caches under tmp_path, and no account; W&B reads
  them once per process, so its session is ended after the test."""
  wandb = pytest.importorskip('wandb')
  for name in ('WANDB_CONFIG_DIR', 'WANDB_CACHE_DIR', 'WANDB_DATA_DIR',
               'WANDB_ARTIFACT_DIR'):
    monkeypatch.setenv(name, str(tmp_path / name.lower()))
  monkeypatch.setenv('NETRC', str(tmp_path / 'no-netrc'))
  for name in ('WANDB_API_KEY', 'WANDB_MODE', 'WANDB_DIR', 'WANDB_SILENT'):
    monkeypatch.delenv(name, raising=False)
  yield monkeypatch
  wandb.teardown()


# W&B's .wandb file: LevelDB's log format, records of wandb_internal_pb2.Record.
_BLOCK, _HEADER = 32768, 7
_FULL, _LAST = 1, 4  # The kinds of chunk that end a record.


def _records(path):
  """The records of a .wandb file, each checked against its checksum."""
  from wandb.proto import \
      wandb_internal_pb2  # pylint: disable=g-import-not-at-top
  data = pathlib.Path(path).read_bytes()
  assert data[:_HEADER] == b':W&B' + struct.pack('<HB', 0xBEE1, 0)
  pos, parts = _HEADER, b''
  while pos + _HEADER <= len(data):
    left = _BLOCK - pos % _BLOCK
    checksum, length, kind = struct.unpack('<IHB', data[pos:pos + _HEADER])
    if left < _HEADER or (kind, length) == (0, 0):  # A block's padding.
      pos += left
      continue
    chunk = data[pos + _HEADER:pos + _HEADER + length]
    assert checksum == zlib.crc32(chunk, zlib.crc32(bytes([kind]))), path
    pos += _HEADER + length
    parts += chunk
    if kind in (_FULL, _LAST):
      record = wandb_internal_pb2.Record()
      record.ParseFromString(parts)
      parts = b''
      yield record
  assert pos == len(data) and not parts, f'{path} ends in a partial record'


def _name(item):
  return item.key or '.'.join(item.nested_key)


def _offline_runs(workdir):
  """Per .wandb file under WORKDIR/wandb, in the order the processes ran:
  {'run': its run record, 'config': {...}, 'scalars': {tag: {step: value}},
  'finished': whether it ends with the run's exit}."""
  runs = []
  for path in pathlib.Path(workdir, 'wandb').glob('offline-run-*/*.wandb'):
    run = {'config': {}, 'scalars': {}, 'finished': False}
    for record in _records(path):
      kind = record.WhichOneof('record_type')
      if kind == 'run':
        run['run'] = record.run
      elif kind == 'config':
        run['config'].update({_name(item): json.loads(item.value_json)
                              for item in record.config.update})
      elif kind == 'history':
        row = {_name(item): json.loads(item.value_json)
               for item in record.history.item}
        for tag, value in row.items():
          if tag != wandb_writer.STEP and not tag.startswith('_'):
            run['scalars'].setdefault(tag, {})[row[wandb_writer.STEP]] = value
      elif kind == 'exit':
        run['finished'] = record.exit.exit_code == 0
    assert 'run' in run, f'{path} holds no run: was it finished?'
    runs.append(run)
  return sorted(runs, key=lambda run: run['run'].start_time.ToNanoseconds())


def _flat(nested, prefix=''):
  flat = {}
  for key, value in nested.items():
    if isinstance(value, dict):
      flat.update(_flat(value, f'{prefix}{key}.'))
    else:
      flat[prefix + key] = value
  return flat


@pytest.mark.slow  # W&B logs through a process of its own.
def test_an_offline_run_gets_the_scalars_and_config_and_a_resume_continues_it(
    wandb_env, data_dir, tmp_path, capfd):
  wandb_env.setenv('WANDB_MODE', 'offline')
  workdir = tmp_path / 'work'
  first = _config(data_dir, 4, wandb_tags='baseline, cnn')
  train.run(first, str(workdir))
  train.run(_config(data_dir, 6, wandb_tags='baseline, cnn'), str(workdir))

  runs = _offline_runs(workdir)
  run_id = (workdir / wandb_writer.RUN_ID_FILE).read_text()
  assert [run['run'].run_id for run in runs] == [run_id, run_id]
  assert all(run['finished'] for run in runs)
  for run in runs:
    assert run['run'].project == 'zoo-tests'
    assert run['run'].display_name == 'work'  # The workdir's name.
    assert list(run['run'].tags) == ['baseline', 'cnn']
  # The config of the run's start, nested as the run's config is, with the
  # values the run used: the data's image size, the batch size for eval.
  assert _flat(runs[0]['config']) == {
      **summaries.hparams(first), 'image_size': 28,
      'eval_batch_size': first.batch_size}
  assert runs[0]['config']['mesh']['data'] == -1
  assert not runs[1]['config']  # Resumed: W&B keeps the first one.
  # The scalars TensorBoard got, steps 1-4 from the first, 5-6 the resumed.
  tensorboard = read_scalars(str(workdir))
  logged = {}
  for run in runs:
    for tag, values in run['scalars'].items():
      logged.setdefault(tag, {}).update(values)
  assert sorted(runs[1]['scalars']['train/loss']) == [6]
  assert set(logged) == set(tensorboard)
  for tag, values in tensorboard.items():
    assert sorted(logged[tag]) == sorted(values), tag
    np.testing.assert_array_equal(  # TensorBoard keeps float32.
        np.float32([logged[tag][s] for s in sorted(values)]),
        np.float32([values[s] for s in sorted(values)]), err_msg=tag)
  out, err = capfd.readouterr()
  assert 'wandb:' not in out + err  # No banners, no summaries.


@pytest.mark.slow  # W&B starts a process of its own.
def test_no_account_is_one_line_before_training(wandb_env, data_dir, tmp_path):
  workdir = tmp_path / 'work'
  with pytest.raises(SystemExit) as stop:
    train.run(_config(data_dir, 2), str(workdir))
  run_id = (workdir / wandb_writer.RUN_ID_FILE).read_text()
  assert stop.value.code == (
      f"error: W&B could not start run {run_id} of project 'zoo-tests' "
      '(UsageError: No API key configured. Use `wandb login` to log in.); '
      'do what it says, or set WANDB_MODE=offline to log without an '
      'account, or leave --config.wandb_project empty.')
  assert not any((workdir / 'checkpoints').iterdir())  # Nothing trained.


def test_without_the_package_the_config_is_one_line_and_nothing_is_written(
    monkeypatch, data_dir, tmp_path):
  monkeypatch.setitem(sys.modules, 'wandb', None)  # `import wandb` fails.
  workdir = tmp_path / 'work'
  with pytest.raises(SystemExit) as stop:
    train.run(_config(data_dir, 2), str(workdir))
  assert stop.value.code == (
      "error: config field wandb_project is 'zoo-tests'; it must be '' (off), "
      'or a W&B project name once the wandb package is installed: '
      f'{_INSTALL}.')
  assert not workdir.exists()
  validation.check(_config(data_dir, 2, wandb_project=''))  # Off: not needed.


def test_a_package_that_does_not_import_is_one_line(monkeypatch, tmp_path):
  monkeypatch.setitem(sys.modules, 'wandb', None)
  with pytest.raises(UserError) as error:
    wandb_writer.create(_config('', 2), str(tmp_path))
  assert str(error.value) == (
      '--config.wandb_project needs the wandb package, which cannot be '
      'imported (ModuleNotFoundError: import of wandb halted; None in '
      'sys.modules): '
      f'{_INSTALL}; or leave wandb_project empty.')
  assert not list(tmp_path.iterdir())


def test_tags_come_comma_separated_from_the_command_line():
  argv = ['train', f'--config={ROOT}/configs/fashion_mnist_pmap.py',
          '--config.wandb_tags=baseline, lr 0.1,,cnn']
  config = config_from_command_line(argv)
  validation.check(config)
  assert wandb_writer.tags(config.wandb_tags) == ['baseline', 'lr 0.1', 'cnn']
  config.wandb_tags = 'ok,' + 'x' * 65
  with pytest.raises(UserError, match=(
      "config field wandb_tags is 'ok,x{65}'; it must be comma-separated "
      'tags of at most 64 characters each.')):
    validation.check(config)


@pytest.mark.parametrize('content, reason', [
    (b'\x89PNG\r\n\x1a\n\xff\xfe\x00', 'not text'),
    (b'{"run": 1}\n', '\'{"run": 1}\' is not a W&B run id'),
], ids=['binary', 'garbled'])
def test_a_damaged_run_id_file_is_one_line_and_kept(wandb_env, tmp_path,
                                                    content, reason):
  path = tmp_path / wandb_writer.RUN_ID_FILE
  path.write_bytes(content)
  with pytest.raises(UserError) as error:
    wandb_writer.create(_config('', 2), str(tmp_path))
  assert str(error.value) == (
      f"{path} is damaged ({reason}); it holds the id of the workdir's W&B "
      "run: write that id into it (the end of the run's URL, or of its "
      "folder's name under wandb/) to go on logging to that run, or delete "
      'it to log to a new W&B run.')
  assert path.read_bytes() == content


def test_an_empty_run_id_file_gets_a_new_id(wandb_env, tmp_path, caplog):
  # Left by a start stopped while writing it: W&B never had that id.
  import wandb  # pylint: disable=import-outside-toplevel
  started = []

  def init(id, **kwargs):  # pylint: disable=redefined-builtin
    started.append(id)
    raise wandb.Error('stopped here')

  wandb_env.setattr(wandb, 'init', init)
  path = tmp_path / wandb_writer.RUN_ID_FILE
  path.write_text('')
  with pytest.raises(UserError, match='W&B could not start run'):
    wandb_writer.create(_config('', 2), str(tmp_path))
  assert len(started[0]) == 8 and path.read_text() == started[0]
  assert f'{path} is empty; a new W&B run is started.' in caplog.text

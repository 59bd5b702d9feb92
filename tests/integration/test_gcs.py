"""A gs:// workdir for real: the README's command against a local Cloud
Storage server (tests/gcs_emulator.py), everything read back from the bucket."""

import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from recipes.data.sources import idx
from recipes.runtime import storage, summaries
from tests.convert_helpers import (torchvision_resnet18_state_dict,
                                   write_safetensors)
from tests.gcs_emulator import Emulator
from tests.helpers import ROOT, read_scalars, write_png_folder
from tests.idx_files import write_fashion_mnist

BUCKET = 'test-bucket'


@pytest.fixture
def emulator(tmp_path):
  """A server of the test's own, which it may stop."""
  server = Emulator(BUCKET, str(tmp_path / 'emulator.log'))
  yield server
  server.stop()


@pytest.fixture(scope='module')
def shared_emulator(tmp_path_factory):
  """One server for the tests that leave it running, each in its own part
  of the bucket."""
  server = Emulator(BUCKET,
                    str(tmp_path_factory.mktemp('emulator') / 'emulator.log'))
  yield server
  server.stop()


def test_urls_stay_urls_and_local_paths_become_absolute(tmp_path,
                                                         monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert str(storage.path('gs://bucket/run') / 'checkpoints') == (
      'gs://bucket/run/checkpoints')
  assert str(summaries.directory('gs://bucket/run')) == (
      'gs://bucket/run/summaries')
  assert str(storage.path('run')) == str(tmp_path / 'run')
  assert str(storage.path('~/run')) == os.path.expanduser('~/run')


def _upload_fashion_mnist(emulator, tmp_path) -> str:
  """The real IDX files (generated ones without Debian's package) in the
  bucket; returns their gs:// folder."""
  local = idx.FASHION_MNIST_DIR
  if not os.path.isdir(local):
    local = str(tmp_path / 'generated')
    os.mkdir(local)
    write_fashion_mnist(local, num_train=64, num_test=20)
  for name in os.listdir(local):
    with open(os.path.join(local, name), 'rb') as f:
      emulator.write(f'fashion_mnist/{name}', f.read())
  return f'gs://{BUCKET}/fashion_mnist'


def _upload_image_folder(emulator, tmp_path) -> str:
  """PNG images of the CNN's input size in 10 classes (50 to train, 10 to
  test) as FOLDER/SPLIT/CLASS/*.png in the bucket; returns its gs:// URL."""
  local = write_png_folder(str(tmp_path / 'png'), {
      'train': (np.random.default_rng(0).integers(0, 256, (50, 28, 28, 1),
                                                  dtype=np.uint8),
                np.arange(50) % 10),
      'test': (np.zeros((10, 28, 28, 1), np.uint8), np.arange(10))})
  for root, _, files in os.walk(local):
    for name in files:
      path = os.path.join(root, name)
      with open(path, 'rb') as f:
        emulator.write(f'pets/{os.path.relpath(path, local)}', f.read())
  return f'gs://{BUCKET}/pets'


def _train(emulator, cwd, workdir, *overrides) -> str:
  """Runs the README's command in `cwd`; returns its log."""
  result = subprocess.run(
      [sys.executable, '-m', 'recipes.train',
       f'--config={os.path.join(ROOT, "configs", "fashion_mnist_pmap.py")}',
       f'--workdir={workdir}', '--config.batch_size=16',
       '--config.log_every_steps=2', *overrides],
      cwd=cwd, capture_output=True, text=True, timeout=300,
      env={**os.environ, 'STORAGE_EMULATOR_HOST': emulator.url,
           'JAX_NUM_CPU_DEVICES': '2', 'PYTHONPATH': ROOT})
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stderr


def _final_eval(log: str) -> str:
  return re.findall(r'step \d+: eval loss .*', log)[-1]


def _scalars_in_bucket(emulator, workdir: str, copy) -> dict:
  """The scalars of the event files in the bucket, copied to `copy`."""
  directory = summaries.directory(copy)
  directory.mkdir(parents=True)
  prefix = f'{workdir}/{summaries.DIRECTORY}/'
  for name in emulator.names(prefix):
    (directory / name.removeprefix(prefix)).write_bytes(emulator.read(name))
  return read_scalars(copy)


@pytest.mark.slow
def test_a_gs_workdir_trains_resumes_fine_tunes_and_evaluates_in_the_bucket(
    shared_emulator, tmp_path):
  emulator = shared_emulator
  data_dir = _upload_fashion_mnist(emulator, tmp_path)
  cwd = tmp_path / 'cwd'
  cwd.mkdir()
  run = lambda workdir, *overrides: _train(
      emulator, cwd, f'gs://{BUCKET}/{workdir}', *overrides)
  fashion_mnist = f'--config.data_dir={data_dir}'

  run('run', fashion_mnist, '--config.num_train_steps=4')
  names = emulator.names('run/')
  config = json.loads(emulator.read('run/config.json'))
  assert config['num_train_steps'] == 4 and config['data_dir'] == data_dir
  assert 'run/checkpoints/4/_CHECKPOINT_METADATA' in names
  scalars = _scalars_in_bucket(emulator, 'run', tmp_path / 'copy_1')
  assert sorted(scalars['train/loss']) == [2, 4]
  assert sorted(scalars['eval/accuracy']) == [4]
  assert not [n for n in names if '.write-test-' in n]  # Removed again.

  resumed = run('run', fashion_mnist, '--config.num_train_steps=6')
  assert ('Resuming from the checkpoint of step 4 in '
          f'gs://{BUCKET}/run/checkpoints.') in resumed
  assert 'run/checkpoints/6/_CHECKPOINT_METADATA' in emulator.names('run/')
  scalars = _scalars_in_bucket(emulator, 'run', tmp_path / 'copy_2')
  assert sorted(scalars['train/loss']) == [2, 4, 6]

  # Fine-tuned on an image folder in the bucket (`--config.dataset=
  # folder:gs://...`): listed and read through epath, streamed by index,
  # its class names recorded in the gs:// workdir.
  pets = _upload_image_folder(emulator, tmp_path)
  log = run('fine_tuned', '--config.num_train_steps=2',
            f'--config.init_from=gs://{BUCKET}/run',
            f'--config.dataset=folder:{pets}', '--config.data_source=stream')
  assert f'Initialized 8 parameter arrays from gs://{BUCKET}/run.' in log
  assert 'streamed: 50 training images' in log, log[-3000:]
  assert json.loads(emulator.read('fine_tuned/class_names.json')) == [
      str(label) for label in range(10)]
  assert 'step 2: eval loss' in log
  assert ('fine_tuned/checkpoints/2/_CHECKPOINT_METADATA'
          in emulator.names('fine_tuned/'))

  # The checkpoint of step 6, read back from the bucket, evaluates as it did
  # at the end of its training.
  events = emulator.names(f'run/{summaries.DIRECTORY}/')
  evaluated = run('run', fashion_mnist, '--config.num_train_steps=6',
                  '--config.mode=eval')
  assert _final_eval(evaluated) == _final_eval(resumed)
  assert _final_eval(evaluated).startswith('step 6: eval loss')
  new_events = set(emulator.names(f'run/{summaries.DIRECTORY}/')) - set(events)
  assert len(new_events) == 1  # Its eval/ summaries.

  # Nothing went to the local disk instead of the bucket.
  assert os.listdir(cwd) == []
  assert not [p for p in tmp_path.rglob('*') if 'gs:' in p.name]
  assert not os.path.exists(os.path.join(ROOT, 'gs:'))


@pytest.mark.slow
def test_a_pretrained_file_in_the_bucket_converts_into_the_bucket(
    shared_emulator, tmp_path):
  emulator = shared_emulator
  write_safetensors(tmp_path / 'resnet18.safetensors',
                    torchvision_resnet18_state_dict())
  emulator.write('weights/resnet18.safetensors',
                 (tmp_path / 'resnet18.safetensors').read_bytes())
  result = subprocess.run(
      [sys.executable, '-m', 'recipes.convert', '--source=torchvision',
       f'gs://{BUCKET}/weights/resnet18.safetensors',
       f'gs://{BUCKET}/resnet18'],
      cwd=tmp_path, capture_output=True, text=True, timeout=300,
      env={**os.environ, 'STORAGE_EMULATOR_HOST': emulator.url,
           'PYTHONPATH': ROOT})
  assert result.returncode == 0, result.stderr[-3000:]
  assert f'--config.init_from=gs://{BUCKET}/resnet18' in result.stdout
  names = emulator.names('resnet18/')
  # The layout of the recipes' checkpoints, which a gs:// init_from reads
  # (the test above).
  assert 'resnet18/0/_CHECKPOINT_METADATA' in names
  assert 'resnet18/0/default/_METADATA' in names
  record = json.loads(emulator.read('resnet18/model.json'))
  assert record['model'] == 'resnet18'
  assert record['file'] == f'gs://{BUCKET}/weights/resnet18.safetensors'
  # Nothing local.
  assert os.listdir(tmp_path) == ['resnet18.safetensors']


@pytest.mark.slow
def test_storage_that_goes_away_ends_the_run_in_one_line_in_bounded_time(
    emulator, tmp_path):
  """The bucket becomes unreachable mid-run (the server stops): the run ends
  within the stall timeout and a little more, with one error line and no
  traceback."""
  data = tmp_path / 'data'
  data.mkdir()
  write_fashion_mnist(str(data), num_train=256, num_test=16)
  process = subprocess.Popen(
      [sys.executable, '-m', 'recipes.train',
       '--config=configs/fashion_mnist_pmap.py',
       f'--workdir=gs://{BUCKET}/run', f'--config.data_dir={data}',
       '--config.batch_size=16', '--config.num_train_steps=100000',
       '--config.log_every_steps=10', '--config.checkpoint_every_steps=20',
       '--config.stall_timeout_seconds=10'],
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      env={**os.environ, 'STORAGE_EMULATOR_HOST': emulator.url,
           'JAX_NUM_CPU_DEVICES': '2', 'PYTHONPATH': ROOT,
           'TMPDIR': str(tmp_path)})
  try:
    deadline = time.monotonic() + 240
    while not any(name.endswith('_CHECKPOINT_METADATA')
                  for name in emulator.names('run/checkpoints/')):
      assert process.poll() is None and time.monotonic() < deadline
      time.sleep(0.5)
    emulator.stop()
    stopped = time.monotonic()
    output, _ = process.communicate(timeout=300)
  finally:
    process.kill()
  ended = time.monotonic() - stopped
  print(f'ended {ended:.0f} s after the storage went away')
  assert process.returncode != 0 and ended < 120
  assert 'Traceback' not in output, output[-5000:]
  last = output.strip().splitlines()[-1]
  assert last.startswith('error: ') and 'storage' in last, last
  assert 'run the same command' in last.lower(), last
  # A stall in a save names the file its threads' stacks went to.
  stacks = re.search(r"every thread's stack: (\S+)\)", last)
  if stacks:
    assert stacks[1].startswith(str(tmp_path)), last
    with open(stacks[1], encoding='utf-8') as f:
      assert 'most recent call first' in f.read()


# Weights by name from a bucket: a tag of the table, pointed at the
# emulator's bucket, loaded in two processes. With a SHA-256 as a second
# argument, that published SHA-256 (one the file does not have) is tried
# first.
_LOAD_TAG = '''
import sys
import numpy as np
import zoo
from zoo import weights


def load(sha256):
  weights.TAGS['resnet18']['bucket'] = weights.Weights(
      'resnet18', 'bucket', sys.argv[1], sha256=sha256)
  module, variables = zoo.create('resnet18', pretrained='bucket').unbind()
  print('sum', float(np.sum(variables['params']['Conv_0']['kernel'])))


if len(sys.argv) > 2:
  try:
    load(sys.argv[2])
  except zoo.download.DownloadError as e:
    print(f'DownloadError: {e}')
load(None)
'''


@pytest.mark.slow
def test_weights_by_name_from_a_bucket_download_once(emulator, tmp_path):
  state = torchvision_resnet18_state_dict()
  write_safetensors(tmp_path / 'resnet18.safetensors', state)
  data = (tmp_path / 'resnet18.safetensors').read_bytes()
  emulator.write('weights/resnet18.safetensors', data)
  url = f'gs://{BUCKET}/weights/resnet18.safetensors'
  # The zoo alone, without the recipes' storage module, which routes epath
  # to the emulator: as recipes/runtime/storage.py does.
  env = {**os.environ, 'STORAGE_EMULATOR_HOST': emulator.url,
         'EPATH_USE_TF': 'false', 'GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT': 'false',
         'PYTHONPATH': ROOT, 'JAX_MODEL_ZOO_WEIGHTS': str(tmp_path / 'zoo'),
         'JAX_PLATFORMS': 'cpu'}

  def load(*wrong_sha256):
    return subprocess.run([sys.executable, '-c', _LOAD_TAG, url,
                           *wrong_sha256], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=env)

  first = load('0' * 64)
  assert first.returncode == 0, first.stderr[-3000:]
  wrong, *loaded = first.stdout.splitlines()
  assert wrong.startswith('DownloadError: '), first.stdout
  assert 'damaged both times (SHA-256' in wrong
  expected = float(np.sum(state['conv1.weight']))
  assert abs(float(loaded[-1].split()[-1]) - expected) < 1e-3
  assert os.listdir(tmp_path / 'zoo' / 'downloads') == [
      'resnet18.safetensors']
  emulator.stop()  # No network from now on.
  second = load()
  assert second.returncode == 0, second.stderr[-3000:]
  assert second.stdout.splitlines() == loaded

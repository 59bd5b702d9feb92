"""The user's own images at real size: Fashion-MNIST's 70,000 images as a
PNG folder, and the same prepared into ArrayRecord and streamed, through the
training command as users run it."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from recipes import train
from recipes.checkpoint import class_names
from recipes.data import datasets, prepare
from recipes.data.sources import idx
from tests.helpers import (LOCAL_LAUNCHER, ROOT, command_env, saved_params,
                           sigkill_after_first_checkpoint, tiny_config,
                           write_fashion_mnist_folder, write_png_folder)

pytestmark = pytest.mark.slow  # Commands as processes, 70,000 images.

# Killed after step 10, resumed for 20 steps.
NUM_STEPS = 30
# Random augmentation on, so that the per-example seeds are exercised too.
OVERRIDES = dict(batch_size=32, num_train_steps=NUM_STEPS,
                 checkpoint_every_steps=10, log_every_steps=10,
                 eval_every_steps=NUM_STEPS, augment='cifar',
                 randaugment_layers=1, data_source='stream')


@pytest.fixture(scope='module')
def fashion_mnist_png(tmp_path_factory):
  if not os.path.isdir(idx.FASHION_MNIST_DIR):
    pytest.skip(f'needs Debian\'s dataset-fashion-mnist in '
                f'{idx.FASHION_MNIST_DIR}')
  return write_fashion_mnist_folder(
      idx.FASHION_MNIST_DIR, str(tmp_path_factory.mktemp('fm') / 'png'))


@pytest.fixture(scope='module')
def fashion_mnist_records(fashion_mnist_png, tmp_path_factory):
  """The PNG folder prepared into ArrayRecord shards, in this process (the
  command's own tests are in tests/integration/test_prepare_command.py)."""
  records = str(tmp_path_factory.mktemp('fm_records') / 'records')
  written = prepare.prepare(f'folder:{fashion_mnist_png}', records)
  assert written.examples_written == 70_000
  return records


def test_the_png_folder_holds_exactly_the_idx_examples(fashion_mnist_png):
  """In memory, all 70,000: the same pixels and labels as the IDX files, in
  the folder's order (by class, then file)."""
  folder = datasets.load(f'folder:{fashion_mnist_png}', None, 'train',
                         ['test'])
  assert type(folder).__name__ == 'InMemoryDataset'
  reference = idx.load_splits(None, ['train', 'test'])
  for loaded, arrays in zip((folder.train, folder.eval), reference):
    order = np.argsort(arrays['label'], kind='stable')
    np.testing.assert_array_equal(loaded['label'], arrays['label'][order])
    np.testing.assert_array_equal(loaded['image'], arrays['image'][order])


def _command(dataset, workdir):
  return [sys.executable, '-m', 'recipes.train',
          '--config=configs/fashion_mnist_pmap.py', f'--workdir={workdir}',
          f'--config.dataset={dataset}',
          *(f'--config.{k}={v}' for k, v in OVERRIDES.items())]


def _run(command, devices_per_process=2, timeout=600):
  result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=command_env(
                              JAX_NUM_CPU_DEVICES=str(devices_per_process)))
  assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
  return result.stdout + result.stderr


def _assert_bitwise_equal(a, b):
  assert a[0] == b[0] == NUM_STEPS
  for x, y in zip(jax.tree.leaves(a[1]), jax.tree.leaves(b[1])):
    np.testing.assert_array_equal(x, y)


def test_a_sigkill_mid_run_resumes_bitwise_and_two_processes_stream_the_same(
    fashion_mnist_records, tmp_path):
  """1 process x 2 devices, streamed from the records, killed by SIGKILL
  after its first checkpoint and run again: it ends bitwise where a launch
  of 2 processes x 1 device, uninterrupted, does (the same batches
  streamed, the per-example seeds restored)."""
  command = _command(f'records:{fashion_mnist_records}', tmp_path / 'killed')
  sigkill_after_first_checkpoint(command, tmp_path / 'killed',
                                 JAX_NUM_CPU_DEVICES='2')
  log = _run(command)
  assert 'Resuming from the checkpoint of step' in log
  assert 'streamed: 60000 training images' in log
  assert 'over 10000 examples of test' in log
  _run([LOCAL_LAUNCHER, '--num_processes=2', '--devices_per_process=1', '--',
        *_command(f'records:{fashion_mnist_records}', tmp_path / 'two')],
       devices_per_process=1)
  _assert_bitwise_equal(saved_params(tmp_path / 'two'),
                        saved_params(tmp_path / 'killed'))
  assert json.loads((tmp_path / 'two' / class_names.FILE).read_text())[0] == (
      '0_T-shirt_top')


def test_resuming_on_other_classes_is_one_line_and_changes_nothing(
    tmp_path, fast_compiles):
  """In this process: the check is the loop's, and the one line a
  SystemExit('error: ...') becomes is every command's
  (tests/integration/test_bad_input.py)."""
  del fast_compiles
  rng = np.random.default_rng(0)
  folders = {}
  for name, classes in (('pets', ('cat', 'dog')), ('birds', ('jay', 'owl'))):
    folders[name] = write_png_folder(str(tmp_path / name), {
        split: (rng.integers(0, 256, (16, 8, 8, 1), np.uint8),
                np.arange(16) % 2) for split in ('train', 'test')}, classes)
  workdir = tmp_path / 'run'
  short = dict(num_train_steps=2, batch_size=8, checkpoint_every_steps=2,
               eval_every_steps=2)
  train.run(tiny_config(dataset=f'folder:{folders["pets"]}', **short),
            str(workdir))
  before = {p: p.read_bytes() for p in workdir.rglob('*') if p.is_file()
            and 'summaries' not in p.parts and p.name != 'run.lease'}
  with pytest.raises(SystemExit) as e:
    train.run(tiny_config(dataset=f'folder:{folders["birds"]}', **short),
              str(workdir))
  error = str(e.value.code)
  assert error.startswith('error: ') and '\n' not in error, error
  assert "label 0 was '0_cat', is '0_jay'" in error, error
  after = {p: p.read_bytes() for p in before}
  assert after == before

"""Checkpoints are never lost and never silently wrong: how many are kept,
resuming whatever the save cadence, checksums against damage, and a save that
fails (a full disk, a directory the user cannot write) stopping the run at
once with one line."""

import logging
import os
import shutil
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from etils import epath

from recipes import checkpoint, loop
from recipes.checkpoint import checksums
from recipes.runtime.errors import UserError
from tests.helpers import (ROOT, command_env, saved_params, small_disk,
                           tiny_config, slow_after)


def _run(data_dir, workdir, num_steps, **overrides):
  config = tiny_config(**{
      'dataset': 'fashion_mnist_idx', 'data_dir': data_dir, 'model': 'mlp',
      'model_kwargs': {'hidden_sizes': (32,)}, 'num_train_steps': num_steps,
      'checkpoint_every_steps': 2, 'eval_every_steps': num_steps,
      **overrides})
  return loop.train_and_evaluate(config, str(workdir))


def _steps(workdir):
  with checkpoint.manager(str(workdir)) as mngr:
    return mngr.all_steps()


def _largest_file(directory):
  files = [p for p in directory.rglob('*') if p.is_file()]
  return max(files, key=lambda p: p.stat().st_size)


@pytest.fixture(scope='module', name='straight')
def _straight(data_dir, tmp_path_factory):
  """A 6-step run never damaged: checkpoints 2, 4 and 6. Tests damage a
  copy of it (the run they would make again) and compare the resumed run's
  parameters with its own."""
  workdir = tmp_path_factory.mktemp('straight')
  _run(data_dir, workdir, 6)
  assert _steps(workdir) == [2, 4, 6]
  return workdir


def _copy(straight, workdir):
  """`workdir`, a copy of the straight run's."""
  shutil.copytree(straight, workdir)
  return workdir


def _assert_resumed_as_straight(straight, workdir):
  _, expected = saved_params(straight)
  _, resumed = saved_params(workdir)
  for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(a, b)  # As if nothing had happened.


@pytest.mark.slow
def test_keep_checkpoints_zero_keeps_them_all(data_dir, tmp_path):
  _run(data_dir, tmp_path, 10, keep_checkpoints=0)
  assert _steps(tmp_path) == [2, 4, 6, 8, 10]


@pytest.mark.slow
def test_no_new_checkpoints_still_resumes_from_the_old_ones(
    data_dir, tmp_path, caplog):
  _run(data_dir, tmp_path, 4)
  with caplog.at_level(logging.INFO):
    _run(data_dir, tmp_path, 6, checkpoint_every_steps=-1)
  assert 'Resuming from the checkpoint of step 4' in caplog.text
  assert _steps(tmp_path) == [2, 4]  # Nothing saved, nothing deleted.


@pytest.mark.slow  # sha256sum is a process.
def test_every_checkpoint_carries_the_checksums_of_its_files(straight):
  item = straight / 'checkpoints' / '6' / 'default'
  listed = (item / checksums.FILE_NAME).read_text().splitlines()
  files = {str(p.relative_to(item)) for p in item.rglob('*') if p.is_file()}
  # Every file orbax wrote, and orbax's own commit marker written after.
  assert {line.split('  ')[1] for line in listed} == files - {
      checksums.FILE_NAME, 'commit_success.txt'}
  assert checksums.problem(epath.Path(item)) is None
  # The same format `sha256sum -c` reads.
  result = subprocess.run(['sha256sum', '--check', '--quiet',
                           checksums.FILE_NAME], cwd=item, capture_output=True)
  assert result.returncode == 0, result.stdout


@pytest.mark.slow
def test_flipped_bytes_are_found_and_the_checkpoint_before_is_used(
    data_dir, straight, tmp_path, caplog):
  _copy(straight, tmp_path / 'flipped')
  latest = tmp_path / 'flipped' / 'checkpoints' / '6'
  damaged = _largest_file(latest)
  data = bytearray(damaged.read_bytes())
  data[len(data) // 2] ^= 0xFF  # Same size, one byte different.
  damaged.write_bytes(bytes(data))
  with caplog.at_level(logging.INFO):
    _run(data_dir, tmp_path / 'flipped', 6)
  assert (f'Checkpoint {latest} is damaged: {damaged} does not match its '
          'checksum.') in caplog.text
  assert 'Resuming from the checkpoint of step 4' in caplog.text
  assert (latest.parent / '6.unreadable').is_dir()  # Kept, set aside.
  _assert_resumed_as_straight(straight, tmp_path / 'flipped')


@pytest.mark.slow
@pytest.mark.parametrize('garble', [
    lambda path: path.write_bytes(os.urandom(4096)),  # Not even text.
    lambda path: path.write_text('not a checksum\n'),
    lambda path: path.write_text(''),
    lambda path: path.chmod(0),  # Unreadable (where the user is not root).
], ids=['binary', 'text', 'empty', 'unreadable'])
def test_a_garbled_checksum_file_is_damage_and_the_one_before_is_used(
    data_dir, straight, tmp_path, caplog, garble):
  _copy(straight, tmp_path / 'garbled')
  latest = tmp_path / 'garbled' / 'checkpoints' / '6'
  listing = latest / 'default' / checksums.FILE_NAME
  garble(listing)
  if os.access(listing, os.R_OK) and listing.stat().st_mode & 0o777 == 0:
    pytest.skip('root reads any file')
  with caplog.at_level(logging.INFO):
    _run(data_dir, tmp_path / 'garbled', 6)
  assert f'Checkpoint {latest} is damaged: {listing} ' in caplog.text
  assert 'Resuming from the checkpoint of step 4' in caplog.text
  assert (latest.parent / '6.unreadable').is_dir()  # Kept, set aside.
  _assert_resumed_as_straight(straight, tmp_path / 'garbled')


@pytest.mark.parametrize('with_checksums', slow_after(1, [True, False]))
def test_deleted_metadata_is_damage_not_another_model(
    data_dir, straight, tmp_path, caplog, with_checksums):
  workdir = _copy(straight, tmp_path / 'work')
  latest = workdir / 'checkpoints' / '6'
  (latest / 'default' / '_METADATA').unlink()
  (latest / '_CHECKPOINT_METADATA').unlink()
  if not with_checksums:  # As written before checksums were kept.
    (latest / 'default' / checksums.FILE_NAME).unlink()
  with caplog.at_level(logging.INFO):
    _run(data_dir, workdir, 6)
  assert f'Checkpoint {latest} is damaged: ' in caplog.text
  assert 'Resuming from the checkpoint of step 4' in caplog.text


def test_a_truncated_file_without_checksums_is_handled_without_tracebacks(
    data_dir, straight, tmp_path, caplog, capfd):
  workdir = _copy(straight, tmp_path / 'work')
  latest = workdir / 'checkpoints' / '6'
  (latest / 'default' / checksums.FILE_NAME).unlink()
  for path in (latest / 'default').rglob('*'):
    if path.is_file() and path.stat().st_size > 1000:  # The array data.
      path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])
  capfd.readouterr()
  with caplog.at_level(logging.INFO):
    _run(data_dir, workdir, 6)
  assert f'Checkpoint {latest} is damaged: ' in caplog.text
  assert 'Resuming from the checkpoint of step 4' in caplog.text
  stderr = capfd.readouterr().err
  assert 'Traceback' not in stderr and 'Exception ignored' not in stderr


def test_when_every_checkpoint_is_damaged_the_run_stops_and_renames_nothing(
    data_dir, straight, tmp_path):
  workdir = _copy(straight, tmp_path / 'work')
  for step in (2, 4, 6):
    path = _largest_file(workdir / 'checkpoints' / str(step))
    path.write_bytes(b'\0' * path.stat().st_size)
  for _ in range(2):  # The same answer every time: nothing was moved.
    with pytest.raises(UserError) as error:
      _run(data_dir, workdir, 8)
    assert str(error.value) == (
        f'no usable checkpoint in {workdir}/checkpoints: 6, 4, 2 are damaged '
        '(see the warnings above). To start afresh, move that directory away '
        'or use another --workdir.')
    assert sorted(os.listdir(workdir / 'checkpoints')) == ['2', '4', '6']


def test_checkpoints_set_aside_before_do_not_mean_a_fresh_start(
    data_dir, tmp_path):
  _run(data_dir, tmp_path, 2)
  os.rename(tmp_path / 'checkpoints' / '2',
            tmp_path / 'checkpoints' / '2.unreadable')
  with pytest.raises(UserError, match='2.unreadable is damaged'):
    _run(data_dir, tmp_path, 4)


def _train_command(workdir, data_dir, steps=40, as_user=(), **env):
  """The real command, 1 device, saving every 10 steps; (result, seconds)."""
  start = time.monotonic()
  result = subprocess.run(
      [*as_user, sys.executable, '-m', 'recipes.train',
       '--config=configs/fashion_mnist_pmap.py', f'--workdir={workdir}',
       f'--config.data_dir={data_dir}', '--config.batch_size=16',
       f'--config.num_train_steps={steps}', '--config.eval_every_steps=40',
       '--config.checkpoint_every_steps=10'],
      cwd=ROOT, env=command_env(JAX_NUM_CPU_DEVICES='1', **env),
      capture_output=True, text=True, timeout=240)
  return result, time.monotonic() - start


def _assert_stopped_at_once_in_one_line(result, took, reason):
  assert result.returncode == 1, result.stderr[-3000:]
  assert took < 120  # Not waiting minutes for abandoned writes.
  for noise in ('Traceback', 'Exception ignored', 'never awaited'):
    assert noise not in result.stderr, result.stderr[-3000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith('error: saving the checkpoint of step 20 in ')
  assert reason in last and 'the last complete one is of step 10' in last, last


@pytest.mark.slow
def test_a_full_disk_stops_the_run_at_the_first_failed_save(data_dir,
                                                            tmp_path):
  # One checkpoint of the 3.3 MB CNN and its momentum fits, not two.
  with small_disk(tmp_path / 'disk', '9m') as disk:
    result, took = _train_command(disk / 'run', data_dir)
    _assert_stopped_at_once_in_one_line(result, took,
                                        'No space left on device')
    item = epath.Path(disk / 'run' / 'checkpoints' / '10' / 'default')
    assert checksums.problem(item) is None  # The earlier one is intact.


@pytest.mark.slow
def test_a_checkpoint_directory_the_user_cannot_write(data_dir, tmp_path):
  """As an unprivileged user (uid 65534) who may read everything (so that
  the interpreter is reachable) but writes only where permissions allow."""
  unprivileged = ['setpriv', '--reuid=65534', '--regid=65534',
                  '--clear-groups', '--inh-caps=+dac_read_search',
                  '--ambient-caps=+dac_read_search']
  if os.getuid() != 0 or not shutil.which('setpriv') or subprocess.run(
      [*unprivileged, 'true'], capture_output=True).returncode:
    pytest.skip('needs root and setpriv to run as another user')
  workdir = tmp_path / 'run'
  result, _ = _train_command(workdir, data_dir, steps=10)
  assert result.returncode == 0, result.stderr[-3000:]
  # The user owns the workdir, but its checkpoints directory is root's.
  for path in [workdir, *workdir.iterdir()]:
    if path.name != 'checkpoints':
      os.chown(path, 65534, 65534)
  result, took = _train_command(workdir, data_dir, as_user=unprivileged,
                                HOME=str(tmp_path))
  _assert_stopped_at_once_in_one_line(result, took, 'Permission denied')
  assert _steps(workdir) == [10]

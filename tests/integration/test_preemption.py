"""Real processes stopped by real signals: SIGKILL loses only the steps since
the last checkpoint and the restart ends bitwise where an uninterrupted run
does; SIGTERM stops cleanly (exit 0) at a step all processes agree on."""

import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from configs import fashion_mnist_pmap
from recipes import checkpoint, loop
from tests.helpers import (LOCAL_LAUNCHER, ROOT, command_env, read_scalars,
                           saved_params, write_fashion_mnist)

# Each test runs the command (or real processes): the slow tier.
pytestmark = pytest.mark.slow

NUM_STEPS = 120
OVERRIDES = dict(batch_size=64, num_train_steps=NUM_STEPS,
                 checkpoint_every_steps=20, log_every_steps=40,
                 eval_every_steps=NUM_STEPS)


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  path = tmp_path_factory.mktemp('data')
  write_fashion_mnist(str(path), num_train=256, num_test=16)
  return str(path)


@pytest.fixture(scope='module')
def uninterrupted(data_dir, tmp_path_factory):
  """The final parameters of a run nothing stopped (in this process)."""
  config = fashion_mnist_pmap.get_config()
  config.update(dict(data_dir=data_dir, **OVERRIDES))
  workdir = tmp_path_factory.mktemp('uninterrupted')
  loop.train_and_evaluate(config, str(workdir))
  return saved_params(workdir)


def _command(data_dir, workdir):
  return [sys.executable, '-m', 'recipes.train',
          '--config=configs/fashion_mnist_pmap.py', f'--workdir={workdir}',
          f'--config.data_dir={data_dir}',
          *(f'--config.{k}={v}' for k, v in OVERRIDES.items())]


def _start(command, **kwargs):
  return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, **kwargs)


def _wait_for_a_checkpoint(process, workdir, timeout=240):
  """Returns once the run has saved a checkpoint and is still training."""
  directory = os.path.join(workdir, 'checkpoints')
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    assert process.poll() is None, process.stdout.read()[-3000:]
    if os.path.isdir(directory) and any(
        name.isdigit() for name in os.listdir(directory)):
      return
    time.sleep(0.05)
  process.kill()
  pytest.fail('no checkpoint appeared')


def _restart(command, workdir, from_step):
  """Runs `command` again; returns the final step and parameters."""
  result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert f'Resuming from the checkpoint of step {from_step} ' in (
      result.stderr + result.stdout)
  return saved_params(workdir)


def _assert_bitwise_equal(final, uninterrupted):
  assert final[0] == uninterrupted[0] == NUM_STEPS
  for a, b in zip(jax.tree.leaves(uninterrupted[1]), jax.tree.leaves(final[1])):
    np.testing.assert_array_equal(a, b)


def test_sigkill_then_restart_ends_bitwise_equal(data_dir, tmp_path,
                                                 uninterrupted):
  command = _command(data_dir, tmp_path)
  process = _start(command)
  _wait_for_a_checkpoint(process, str(tmp_path))
  process.kill()
  process.communicate(timeout=60)
  assert process.returncode == -signal.SIGKILL
  with checkpoint.manager(str(tmp_path)) as mngr:
    latest = mngr.latest_step()
  assert latest < NUM_STEPS  # Killed in the middle.
  _assert_bitwise_equal(_restart(command, tmp_path, latest), uninterrupted)


def test_after_sigkill_every_step_up_to_the_checkpoint_is_in_tensorboard(
    data_dir, tmp_path):
  """The summaries are written out with each checkpoint: what a kill loses
  is only what the resumed run trains again (and writes again)."""
  command = _command(data_dir, tmp_path) + ['--config.log_every_steps=5']
  process = _start(command)
  _wait_for_a_checkpoint(process, str(tmp_path))
  process.kill()
  process.communicate(timeout=60)
  with checkpoint.manager(str(tmp_path)) as mngr:
    latest = mngr.latest_step()
  assert latest < NUM_STEPS
  logged = set(read_scalars(tmp_path)['train/loss'])
  assert set(range(5, latest + 1, 5)) <= logged, (latest, sorted(logged))
  _restart(command, tmp_path, latest)
  assert set(read_scalars(tmp_path)['train/loss']) == set(
      range(5, NUM_STEPS + 1, 5))


# Every random part of the update on at once: dropout, mixup or cutmix,
# RandAugment, with label smoothing, accumulation and the moving average.
TOOLKIT = dict(model='tests.helpers:DropoutNet', mixup_alpha=0.2,
               cutmix_alpha=1.0, label_smoothing=0.1, randaugment_layers=2,
               randaugment_magnitude=9, grad_accum_steps=2, ema_decay=0.9)


def test_sigkill_with_the_random_toolkit_on_resumes_bitwise(data_dir,
                                                             tmp_path):
  config = fashion_mnist_pmap.get_config()
  config.update(dict(data_dir=data_dir, **OVERRIDES, **TOOLKIT))
  loop.train_and_evaluate(config, str(tmp_path / 'straight'))
  command = _command(data_dir, tmp_path / 'killed') + [
      f'--config.{k}={v}' for k, v in TOOLKIT.items()]
  process = _start(command)
  _wait_for_a_checkpoint(process, str(tmp_path / 'killed'))
  process.kill()
  process.communicate(timeout=60)
  with checkpoint.manager(str(tmp_path / 'killed')) as mngr:
    latest = mngr.latest_step()
  assert latest < NUM_STEPS
  final = _restart(command, tmp_path / 'killed', latest)
  _assert_bitwise_equal(final, saved_params(tmp_path / 'straight'))
  _assert_bitwise_equal(
      saved_params(tmp_path / 'killed', item='ema_params'),
      saved_params(tmp_path / 'straight', item='ema_params'))


def test_sigterm_stops_cleanly_with_a_checkpoint(data_dir, tmp_path,
                                                uninterrupted):
  # (SIGINT takes the same path; tests/unit/recipes/test_reliability.py
  # sends one.)
  signum = signal.SIGTERM
  command = _command(data_dir, tmp_path)
  process = _start(command)
  _wait_for_a_checkpoint(process, str(tmp_path))
  process.send_signal(signum)
  output, _ = process.communicate(timeout=120)
  assert process.returncode == 0, output[-3000:]
  line = next(l for l in output.splitlines() if 'Stopped by' in l)
  step = int(line.split(' after step ')[1].split()[0])
  assert f'Stopped by {signal.Signals(signum).name} after step {step} of ' \
         f'{NUM_STEPS}' in line and 'Run the same command again' in line
  assert step < NUM_STEPS
  with checkpoint.manager(str(tmp_path)) as mngr:
    assert mngr.latest_step() == step
  _assert_bitwise_equal(_restart(command, tmp_path, step), uninterrupted)


def _children(pid: int) -> dict[int, int]:
  """{JAX process id: OS pid} of the launcher's child processes."""
  found = {}
  for name in filter(str.isdigit, os.listdir('/proc')):
    try:
      with open(f'/proc/{name}/stat') as f:
        parent = int(f.read().rsplit(')', 1)[1].split()[1])
      with open(f'/proc/{name}/environ', 'rb') as f:
        env = dict(item.split(b'=', 1) for item in f.read().split(b'\0')
                   if b'=' in item)
    except (OSError, ValueError):
      continue
    if parent == pid and b'JAX_PROCESS_ID' in env:
      found[int(env[b'JAX_PROCESS_ID'])] = int(name)
  return found


def test_sigterm_to_one_of_two_processes_stops_both_then_resumes_bitwise(
    data_dir, tmp_path):
  """Both stop after the same step, and the resumed run, every random part
  of the toolkit on, ends bitwise where an uninterrupted two-process run
  does."""
  launch = [LOCAL_LAUNCHER, '--num_processes=2', '--devices_per_process=4',
            '--']
  toolkit = [f'--config.{k}={v}' for k, v in TOOLKIT.items()]
  straight = tmp_path / 'straight'
  done = subprocess.run(launch + _command(data_dir, straight) + toolkit,
                        cwd=ROOT, env=command_env(), capture_output=True,
                        text=True, timeout=600, check=False)
  assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
  workdir = tmp_path / 'stopped'
  command = launch + _command(data_dir, workdir) + toolkit
  process = _start(command, env=command_env())
  _wait_for_a_checkpoint(process, str(workdir))
  # A preemption notice reaches one host only; the other must stop too.
  os.kill(_children(process.pid)[1], signal.SIGTERM)
  output, _ = process.communicate(timeout=120)
  assert process.returncode == 0, output[-3000:]
  stops = [l for l in output.splitlines() if 'Stopped by SIGTERM' in l]
  assert len(stops) == 2, output[-3000:]
  steps = {int(l.split(' after step ')[1].split()[0]) for l in stops}
  assert len(steps) == 1
  step = steps.pop()
  assert step < NUM_STEPS
  # (Two processes of four devices match one of eight only to rounding,
  # which grows over 120 steps: tests/integration/test_launch.py compares them.)
  _assert_bitwise_equal(_restart(command, workdir, step),
                        saved_params(straight))
  _assert_bitwise_equal(saved_params(workdir, item='ema_params'),
                        saved_params(straight, item='ema_params'))

"""Real processes stopped by real signals: SIGKILL loses only the steps since
the last checkpoint and the restart ends bitwise where an uninterrupted run
does; SIGTERM stops cleanly (exit 0) at a step all processes agree on.

Every random part of the update is on in these runs (see TOOLKIT), so that
a resume must restore every random stream exactly. Every run has two devices:
one process of two, or two processes of one each, which end bitwise alike
(a sum of two numbers is the same in either order), so that one
uninterrupted run is the reference of them all."""

import os
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from recipes import checkpoint
from recipes.parallel import distributed
from recipes.runtime import preemption
from tests.helpers import (LOCAL_LAUNCHER, ROOT, command_env, read_scalars,
                           saved_params)
from tests.idx_files import write_fashion_mnist

# Each test runs the command (or real processes): the slow tier.
pytestmark = pytest.mark.slow

NUM_STEPS = 100
LOG_EVERY = 5
# A checkpoint every 10 steps: each signal comes right after one, with most
# of the run still ahead. An evaluation with each: its batches are step
# boundaries too, where a signal may be agreed on.
OVERRIDES = dict(batch_size=64, num_train_steps=NUM_STEPS,
                 checkpoint_every_steps=10, log_every_steps=LOG_EVERY,
                 eval_every_steps=10)
# Every random part of the update on at once: dropout, mixup or cutmix,
# RandAugment, with label smoothing, accumulation and the moving average.
TOOLKIT = dict(model='tests.helpers:DropoutNet', mixup_alpha=0.2,
               cutmix_alpha=1.0, label_smoothing=0.1, randaugment_layers=2,
               randaugment_magnitude=9, grad_accum_steps=2, ema_decay=0.9)


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  path = tmp_path_factory.mktemp('data')
  write_fashion_mnist(str(path), num_train=256, num_test=16)
  return str(path)


# One process of two devices; the launcher's processes get one each.
ONE_PROCESS = command_env(JAX_NUM_CPU_DEVICES='2')
TWO_PROCESSES = command_env(JAX_NUM_CPU_DEVICES='1')
LAUNCH_TWO = [LOCAL_LAUNCHER, '--num_processes=2', '--devices_per_process=1',
              '--']


def _command(data_dir, workdir):
  settings = {**OVERRIDES, **TOOLKIT}
  return [sys.executable, '-m', 'recipes.train',
          '--config=configs/fashion_mnist_pmap.py', f'--workdir={workdir}',
          f'--config.data_dir={data_dir}',
          *(f'--config.{k}={v}' for k, v in settings.items())]


@pytest.fixture(scope='module')
def uninterrupted(data_dir, tmp_path_factory):
  """The workdir of a run nothing stopped: one process of two devices."""
  workdir = tmp_path_factory.mktemp('uninterrupted')
  done = subprocess.run(_command(data_dir, workdir), cwd=ROOT,
                        env=ONE_PROCESS, capture_output=True, text=True,
                        timeout=300, check=False)
  assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
  return workdir


def _start(command, env):
  return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env)


def _latest_step(workdir):
  with checkpoint.manager(str(workdir)) as mngr:
    return mngr.latest_step()


def _wait_for_a_checkpoint(process, workdir, after=-1, timeout=240):
  """Returns once the run has saved a checkpoint of a step past `after` and
  is still training."""
  directory = os.path.join(workdir, 'checkpoints')
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    assert process.poll() is None, process.stdout.read()[-3000:]
    if os.path.isdir(directory) and any(
        name.isdigit() and int(name) > after for name in os.listdir(directory)):
      return
    time.sleep(0.05)
  process.kill()
  pytest.fail('no checkpoint appeared')


def _stopped_by(output):
  """The steps after which the 'Stopped by SIGTERM' lines of `output` say
  the run stopped, each line checked whole."""
  steps = []
  for line in output.splitlines():
    if 'Stopped by' in line:
      step = int(line.split(' after step ')[1].split()[0])
      assert f'Stopped by SIGTERM after step {step} of {NUM_STEPS}' in line
      assert 'Run the same command again' in line
      steps.append(step)
  return steps


def _restart(command, from_step, env):
  """Runs `command` again to its end."""
  result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)
  assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
  assert f'Resuming from the checkpoint of step {from_step} ' in (
      result.stderr + result.stdout)


def _assert_bitwise_equal(workdir, reference):
  """The final parameters and their moving average are the reference's."""
  for item in ('params', 'ema_params'):
    final, expected = (saved_params(w, item=item) for w in (workdir, reference))
    assert final[0] == expected[0] == NUM_STEPS
    for a, b in zip(jax.tree.leaves(expected[1]), jax.tree.leaves(final[1])):
      np.testing.assert_array_equal(a, b)


def test_sigterm_then_sigkill_then_restart_ends_bitwise_equal(
    data_dir, tmp_path, uninterrupted):
  """One process stopped by SIGTERM (a clean stop with a checkpoint),
  restarted, killed by SIGKILL, restarted again: it ends bitwise where the
  uninterrupted run does. The summaries are written out with each
  checkpoint: what the kill loses is only what the resumed run trains again
  (and writes again)."""
  # (SIGINT takes the SIGTERM path; tests/unit/recipes/test_reliability.py
  # sends one.)
  command = _command(data_dir, tmp_path)
  process = _start(command, ONE_PROCESS)
  _wait_for_a_checkpoint(process, str(tmp_path))
  process.send_signal(signal.SIGTERM)
  output, _ = process.communicate(timeout=120)
  assert process.returncode == 0, output[-3000:]
  [stopped] = _stopped_by(output)
  assert stopped < NUM_STEPS
  assert _latest_step(tmp_path) == stopped

  process = _start(command, ONE_PROCESS)
  _wait_for_a_checkpoint(process, str(tmp_path), after=stopped)
  process.kill()
  output, _ = process.communicate(timeout=60)
  assert process.returncode == -signal.SIGKILL
  assert f'Resuming from the checkpoint of step {stopped} ' in output
  killed = _latest_step(tmp_path)
  assert stopped < killed < NUM_STEPS  # Killed in the middle.
  logged = set(read_scalars(tmp_path)['train/loss'])
  assert set(range(LOG_EVERY, killed + 1, LOG_EVERY)) <= logged, (
      killed, sorted(logged))

  _restart(command, killed, ONE_PROCESS)
  _assert_bitwise_equal(tmp_path, uninterrupted)
  assert set(read_scalars(tmp_path)['train/loss']) == set(
      range(LOG_EVERY, NUM_STEPS + 1, LOG_EVERY))


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
    data_dir, tmp_path, uninterrupted):
  """Both stop after the same step, and the resumed run ends bitwise where
  the uninterrupted run does (one process of two devices: the same sums as
  two processes of one)."""
  command = LAUNCH_TWO + _command(data_dir, tmp_path)
  process = _start(command, TWO_PROCESSES)
  _wait_for_a_checkpoint(process, str(tmp_path))
  # A preemption notice reaches one host only; the other must stop too.
  os.kill(_children(process.pid)[1], signal.SIGTERM)
  output, _ = process.communicate(timeout=120)
  assert process.returncode == 0, output[-3000:]
  # Steps read from the cache hang two CPU processes (jax 0.12): the restart
  # below would read those of this run.
  assert 'The compilation cache is off' in output
  stops = _stopped_by(output)
  assert len(stops) == 2, output[-3000:]
  assert len(set(stops)) == 1
  step = stops[0]
  assert step < NUM_STEPS
  assert _latest_step(tmp_path) == step
  _restart(command, step, TWO_PROCESSES)
  _assert_bitwise_equal(tmp_path, uninterrupted)


def agree_on_a_stop(workdir: str):
  """One process of the test below: it passes 11 step boundaries (process 0)
  or 10 (process 1), saves a checkpoint of step 3 with the run's manager,
  then process 1 gets SIGTERM; each prints the boundary it stops at."""
  distributed.initialize(False)
  mesh = Mesh(np.array(jax.devices()), ('data',))
  state = {'w': jax.make_array_from_callback(
      (4,), NamedSharding(mesh, PartitionSpec()), lambda i: np.ones(4)[i])}
  passed = 11 if jax.process_index() == 0 else 10
  with preemption.StopRequest() as stop, checkpoint.opened(workdir) as mngr:
    assert not any(stop.should_stop() for _ in range(passed))
    checkpoint.save(mngr, 3, state)
    mngr.wait_until_finished()  # Its background thread is done too.
    if jax.process_index() == 1:
      os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(3)  # The processes agree on a boundary meanwhile.
    for boundary in range(passed + 1, passed + 60):
      if stop.should_stop():
        print(f'stops at boundary {boundary}', flush=True)
        return
      time.sleep(0.5)  # A machine too busy to agree in 3 s agrees later.
  print('never stops', flush=True)


def test_a_save_between_boundaries_leaves_the_stop_agreed(tmp_path):
  """The two processes stop at the same boundary, the first neither has
  passed (12) unless they took over 3 s to agree, though each saved a
  checkpoint of an earlier step since its last one: the checkpoint manager
  does not move the counter JAX agrees on (it did, and one process trained
  on while the other saved alone, or neither stopped)."""
  job = (f'from tests.integration.test_preemption import agree_on_a_stop; '
         f'agree_on_a_stop({str(tmp_path)!r})')
  done = subprocess.run(LAUNCH_TWO + [sys.executable, '-c', job], cwd=ROOT,
                        env=TWO_PROCESSES, capture_output=True, text=True,
                        timeout=120, check=False)
  output = done.stdout + done.stderr
  assert done.returncode == 0, output[-3000:]
  stops = dict(re.findall(r'^\[(\d)\] (stops at boundary \d+|never stops)$',
                          output, re.MULTILINE))
  assert stops.keys() == {'0', '1'}, output[-3000:]
  assert stops['0'] == stops['1'] != 'never stops', output[-3000:]
  assert int(stops['0'].split()[-1]) >= 12

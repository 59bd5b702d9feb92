"""Real multi-process runs on localhost (launch/pod.sh: test_pod.py)."""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests.helpers import LOCAL_LAUNCHER, ROOT, command_env, read_scalars
from tests.idx_files import write_fashion_mnist


def _launch(num_processes, devices, command, timeout=300):
  return subprocess.run(
      [LOCAL_LAUNCHER, f'--num_processes={num_processes}',
       f'--devices_per_process={devices}', '--', *command],
      cwd=ROOT, capture_output=True, text=True, timeout=timeout,
      env=command_env())


# The name a run without --workdir gets, on its first line.
NAME = re.compile(r'Workdir: (runs/\d{8}-\d{6}_fashion_mnist_pmap(_\d+)?) ')


@pytest.mark.slow
def test_two_processes_equal_one_process(tmp_path):
  """1 process of 8 devices, then 2 of 4 launched, both without --workdir
  in one directory: the same metrics; each run in a new
  runs/DATE-TIME_CONFIG/ named on its first line (the second does not resume
  the first), the launch's processes all in process 0's."""
  data = tmp_path / 'data'
  data.mkdir()
  write_fashion_mnist(str(data), num_train=64, num_test=20)
  command = [
      sys.executable, '-m', 'recipes.train',
      f'--config={os.path.join(ROOT, "configs", "fashion_mnist_pmap.py")}',
      f'--config.data_dir={data}', '--config.batch_size=16',
      '--config.eval_batch_size=16', '--config.num_train_steps=24',
      '--config.log_every_steps=4', '--config.eval_every_steps=12']
  runs, names = {}, []
  for processes, devices in ((1, 8), (2, 4)):
    launch = [LOCAL_LAUNCHER, f'--num_processes={processes}',
              f'--devices_per_process={devices}', '--'] * (processes > 1)
    result = subprocess.run(
        launch + command, cwd=tmp_path, capture_output=True, text=True,
        timeout=300, env=command_env(JAX_NUM_CPU_DEVICES=str(devices)))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    lines = result.stdout.splitlines()
    prefix = '[0] ' if processes > 1 else ''
    # (A launch's first line may be another process's.)
    [line] = [l for l in lines if 'Workdir: ' in l]
    assert line.startswith(f'{prefix}Workdir: ') and (
        processes > 1 or line == lines[0]), line
    names.append(NAME.search(line)[1])
    assert f'--workdir={names[-1]} resumes it' in line
    for index in range(1, processes):
      assert f'[{index}] ' in result.stdout
    # Process 0 alone logs the metrics: one line for each of the 6 train
    # logs and 2 evaluations (which count all 20 test images, whatever the
    # number of hosts).
    # (A single process logs to stderr; the launcher passes it on.)
    logged = (result.stdout + result.stderr).splitlines()
    assert [l[:len(prefix)] for l in logged if 'train/loss=' in l] == [
        prefix] * 6
    assert [l[:len(prefix)] for l in logged if 'over 20 examples' in l] == [
        prefix] * 2
    # Every process took part in writing the final checkpoint, there.
    assert os.listdir(tmp_path / names[-1] / 'checkpoints') == ['24']
    runs[processes] = read_scalars(str(tmp_path / names[-1]))
  assert names[0] != names[1]  # The second run does not resume the first.
  assert sorted(os.listdir(tmp_path / 'runs')) == sorted(
      os.path.basename(n) for n in names)
  assert sorted(runs[2]['train/loss']) == [4, 8, 12, 16, 20, 24]
  for tag in ('train/loss', 'train/accuracy', 'eval/loss', 'eval/accuracy'):
    two, one = runs[2][tag], runs[1][tag]
    assert sorted(two) == sorted(one)
    np.testing.assert_allclose([two[s] for s in sorted(two)],
                               [one[s] for s in sorted(one)], rtol=1e-4)


@pytest.mark.slow
def test_a_failing_process_stops_the_launch_within_seconds():
  script = ('import os, sys, time\n'
            'print("ready", flush=True)\n'
            'if os.environ["JAX_PROCESS_ID"] == "1":\n'
            '  time.sleep(2)\n'
            '  sys.exit(3)\n'
            'time.sleep(120)\n')
  start = time.monotonic()
  result = _launch(3, 1, [sys.executable, '-c', script], timeout=60)
  assert result.returncode == 3
  assert time.monotonic() - start < 20
  assert 'process 1 exited with status 3' in result.stderr
  assert {'[0] ready', '[1] ready', '[2] ready'} <= set(
      result.stdout.splitlines())


@pytest.mark.slow
def test_a_process_that_ends_alone_stops_the_launch_within_seconds():
  """One process exits 0 at once (as a command that never joins the job
  would) while the others wait for it: the launcher stops them, saying so,
  rather than leaving them to JAX's minutes-long timeout."""
  script = ('import os, sys, time\n'
            'if os.environ["JAX_PROCESS_ID"] == "1":\n'
            '  sys.exit(0)\n'
            'time.sleep(120)\n')
  start = time.monotonic()
  result = _launch(3, 1, [sys.executable, '-c', script], timeout=60)
  assert result.returncode == 1
  assert time.monotonic() - start < 20
  assert result.stderr.splitlines()[-1] == (
      '[launcher] process 1 exited with status 0, but processes 0, 2 still '
      'run 10 s later; stopping them.')



def _gone(pid: int) -> bool:
  """Ended: no such process, or a zombie nobody has reaped yet."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[0] == 'Z'
  except FileNotFoundError:
    return True


@pytest.mark.slow
def test_killing_the_launcher_kills_every_process(tmp_path):
  """SIGKILL to local.sh (the OOM killer, `kill -9`): its processes end with
  it rather than train on unseen. (A killed run resumes: test_preemption.py.)"""
  write_fashion_mnist(str(tmp_path), num_train=256, num_test=16)
  launcher = subprocess.Popen([
      LOCAL_LAUNCHER, '--num_processes=2', '--devices_per_process=1', '--',
      sys.executable, '-m', 'recipes.train',
      '--config=configs/fashion_mnist_pmap.py',
      f'--workdir={tmp_path / "work"}', f'--config.data_dir={tmp_path}',
      '--config.batch_size=16', '--config.num_train_steps=100000',
      '--config.log_every_steps=5'], cwd=ROOT, env=command_env(),
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  workers, output = [], []
  hung = threading.Timer(240, launcher.kill)  # Ends the wait for steps.
  hung.start()
  try:
    for line in launcher.stdout:
      output.append(line)
      if 'train/loss=' in line:  # Steps are running.
        break
    hung.cancel()
    with open(f'/proc/{launcher.pid}/task/{launcher.pid}/children') as f:
      workers = [int(pid) for pid in f.read().split()]
    launcher.kill()
    launcher.wait(timeout=10)
    deadline = time.monotonic() + 10
    while not all(map(_gone, workers)) and time.monotonic() < deadline:
      time.sleep(0.1)
    alive = [pid for pid in workers if not _gone(pid)]
  finally:
    for pid in workers:
      if not _gone(pid):
        os.kill(pid, signal.SIGKILL)
    launcher.stdout.close()
  assert len(workers) == 2, ''.join(output)[-3000:]
  assert not alive, f'processes {alive} outlived their launcher'

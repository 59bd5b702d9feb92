"""The stall watchdog: a run that stops making progress ends, saying where."""

import os
import signal
import subprocess
import sys
import time

import pytest

from recipes.runtime import watchdog
from tests.helpers import LOCAL_LAUNCHER, ROOT, command_env
from tests.idx_files import write_fashion_mnist


def _python(code: str, timeout: float = 60):
  return subprocess.run([sys.executable, '-c', code], cwd=ROOT, text=True,
                        capture_output=True, timeout=timeout)


@pytest.mark.slow
def test_no_beat_for_the_timeout_dumps_every_stack_and_exits():
  start = time.monotonic()
  result = _python(
      'import threading, time\n'
      'from recipes.runtime.watchdog import Watchdog\n'
      'def waiting_in_another_thread(): time.sleep(60)\n'
      'threading.Thread(target=waiting_in_another_thread, daemon=True).start()\n'
      'with Watchdog(0.5) as dog:\n'
      '  dog.beat("training step 3 of 9")\n'
      '  time.sleep(60)\n')
  assert time.monotonic() - start < 30
  assert result.returncode == watchdog.EXIT_STATUS
  lines = result.stderr.strip().splitlines()
  assert lines[-1].startswith('error: stalled in training step 3 of 9: no '
                              'progress for ')
  assert 'stall_timeout_seconds=0.5' in lines[-1]
  # Both threads' stacks, the main one where it waits.
  assert 'waiting_in_another_thread' in result.stderr
  assert 'File "<string>", line 7 in <module>' in result.stderr


@pytest.mark.slow
def test_beats_keep_a_run_alive_zero_turns_it_off_and_suspended_is_no_stall():
  """Beats more often than the timeout keep a run alive; 0 turns the watchdog
  off; then SIGSTOP for three times the timeout, and SIGCONT (Ctrl-Z and fg,
  or a scheduler's suspend): the run goes on and finishes."""
  process = subprocess.Popen(
      [sys.executable, '-c',
       'import time\n'
       'from recipes.runtime.watchdog import Watchdog\n'
       'with Watchdog(0.5) as dog:\n'
       '  for step in range(40):\n'
       '    dog.beat(f"step {step}")\n'
       '    time.sleep(0.05)\n'
       'with Watchdog(0):\n'
       '  time.sleep(1.5)\n'
       'with Watchdog(2) as dog:\n'
       '  for step in range(40):\n'
       '    dog.beat(f"step {step}")\n'
       '    if step == 0:\n'
       '      print("suspend me", flush=True)\n'
       '    time.sleep(0.1)\n'
       'print("finished")\n'], cwd=ROOT, text=True,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  try:
    # The last loop is running: the first two passed.
    assert process.stdout.readline() == 'suspend me\n', process.stderr.read()
    process.send_signal(signal.SIGSTOP)
    time.sleep(6)
    process.send_signal(signal.SIGCONT)
    stdout, stderr = process.communicate(timeout=60)
  finally:
    process.kill()
  assert process.returncode == 0, stderr
  assert stdout == 'finished\n'


def _where_it_ended(output: str) -> str:
  """The start of a crash report (faulthandler's 'Fatal Python error'), or
  else the output's end."""
  start = output.find('Fatal Python error')
  return output[start:start + 3000] if start >= 0 else output[-3000:]


def _child_with_process_id(parent: int, process_id: int) -> int | None:
  for pid in open(f'/proc/{parent}/task/{parent}/children').read().split():
    try:
      with open(f'/proc/{pid}/environ', 'rb') as f:
        environ = f.read().split(b'\0')
    except OSError:  # It has just exited.
      continue
    if f'JAX_PROCESS_ID={process_id}'.encode() in environ:
      return int(pid)
  return None


@pytest.mark.slow
def test_a_hung_process_ends_the_whole_job_with_the_step_and_stacks(tmp_path):
  """Process 1 of 2 is frozen (SIGSTOP) mid-training: process 0 waits in the
  step's collective; its watchdog must end it, and the launcher the rest."""
  write_fashion_mnist(str(tmp_path), num_train=256, num_test=16)
  launcher = subprocess.Popen(
      [LOCAL_LAUNCHER, '--num_processes=2', '--devices_per_process=1', '--',
       sys.executable, '-m', 'recipes.train',
       '--config=configs/fashion_mnist_pmap.py',
       f'--workdir={tmp_path / "work"}', f'--config.data_dir={tmp_path}',
       '--config.batch_size=16', '--config.num_train_steps=100000',
       '--config.log_every_steps=10', '--config.stall_timeout_seconds=10'],
      cwd=ROOT, env=command_env(), stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True, start_new_session=True)
  try:
    output = []
    for line in launcher.stdout:
      output.append(line)
      if 'train/loss=' in line:  # Steps are running.
        break
    frozen = _child_with_process_id(launcher.pid, 1)
    if frozen is None:  # Show why: the job's own output says.
      rest, _ = launcher.communicate(timeout=60)
      raise AssertionError('process 1 is not running:\n'
                           + _where_it_ended(''.join(output) + rest))
    os.kill(frozen, signal.SIGSTOP)
    frozen_at = time.monotonic()
    rest, _ = launcher.communicate(timeout=120)
    took = time.monotonic() - frozen_at
  finally:
    if launcher.poll() is None:
      os.killpg(launcher.pid, signal.SIGKILL)
  output = ''.join(output) + rest
  assert launcher.returncode == watchdog.EXIT_STATUS, output[-3000:]
  assert 10 <= took < 60
  assert '[0] error: stalled in training step ' in output
  assert '(--config.stall_timeout_seconds=10)' in output
  assert 'Current thread' in output or 'Thread 0x' in output
  assert 'recipes/loop.py' in output  # Where the main thread waited.

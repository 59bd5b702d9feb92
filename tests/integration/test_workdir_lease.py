"""One training run per workdir: a second run of the same workdir stops at
once naming the first, and touches nothing; a killed run's lease does not
keep the workdir locked."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from configs import fashion_mnist_pmap
from recipes import train
from recipes.runtime import lease
from tests.helpers import ROOT, command_env
from tests.idx_files import write_fashion_mnist

pytestmark = pytest.mark.slow  # Real commands.


def _command(data, workdir, *flags):
  return [sys.executable, '-m', 'recipes.train',
          '--config=configs/fashion_mnist_pmap.py', f'--workdir={workdir}',
          f'--config.data_dir={data}', '--config.batch_size=16',
          '--config.num_train_steps=100000', '--config.log_every_steps=50',
          '--config.checkpoint_every_steps=20', *flags]


def _wait_for(path, process, timeout=240):
  deadline = time.monotonic() + timeout
  while not os.path.exists(path):
    assert process.poll() is None, process.stdout.read()[-3000:]
    assert time.monotonic() < deadline, f'{path} did not appear'
    time.sleep(0.1)


def test_a_second_run_stops_and_a_killed_runs_lease_is_taken_over(tmp_path):
  data, workdir = tmp_path / 'data', tmp_path / 'work'
  data.mkdir()
  write_fashion_mnist(str(data), num_train=256, num_test=16)
  first = subprocess.Popen(_command(data, workdir), cwd=ROOT,
                           env=command_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
  try:
    _wait_for(workdir / 'checkpoints' / '20', first)
    written = (workdir / 'config.json').read_text()

    # The job submitted again, with a changed flag (in this process: the
    # refusal is the run's; the one line a SystemExit('error: ...') becomes
    # is every command's, tests/integration/test_bad_input.py).
    config = fashion_mnist_pmap.get_config()
    config.update(data_dir=str(data), batch_size=16, num_train_steps=100000,
                  log_every_steps=50, checkpoint_every_steps=20,
                  learning_rate=0.01)
    with pytest.raises(SystemExit) as second:
      train.run(config, str(workdir))
    line = str(second.value.code)
    assert '\n' not in line, line
    assert line.startswith(f'error: another run holds the workdir: process '
                           f'{first.pid} on host '), line
    assert f'({workdir}/run.lease)' in line and 'another --workdir' in line
    assert (workdir / 'config.json').read_text() == written  # Untouched.
    assert first.poll() is None  # The first run trains on.
  finally:
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)

  # Killed: its lease stays behind, but its process is gone.
  held = json.loads((workdir / lease.FILE_NAME).read_text())
  assert held['pid'] == first.pid
  latest = max(int(n) for n in os.listdir(workdir / 'checkpoints')
               if n.isdigit())
  third = subprocess.run(
      _command(data, workdir, f'--config.num_train_steps={latest + 20}'),
      cwd=ROOT,
      env=command_env(), capture_output=True, text=True, timeout=300)
  assert third.returncode == 0, third.stderr[-3000:]
  assert 'Taking over the lease of a run that ended' in third.stderr
  assert 'Resuming from the checkpoint of step' in third.stderr
  assert not (workdir / lease.FILE_NAME).exists()  # Released at the end.


def test_a_lease_of_another_host_is_respected_until_it_goes_stale():
  now = time.time()
  other = dict(run='x', host='another-host', pid=1, started=now - 60)
  assert lease.held_by_another({**other, 'renewed': now - 5}, now)
  assert not lease.held_by_another(
      {**other, 'renewed': now - lease.STALE_SECONDS - 1}, now)
  assert not lease.held_by_another(None, now)

"""Real multi-process runs on localhost, and the pod script's gcloud commands."""

import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from tests.helpers import (LOCAL_LAUNCHER, ROOT, command_env, read_scalars,
                           write_fashion_mnist)

POD = os.path.join(ROOT, 'launch', 'pod.sh')


def _launch(num_processes, devices, command, timeout=300):
  return subprocess.run(
      [LOCAL_LAUNCHER, f'--num_processes={num_processes}',
       f'--devices_per_process={devices}', '--', *command],
      cwd=ROOT, capture_output=True, text=True, timeout=timeout,
      env=command_env())


@pytest.mark.slow
def test_two_processes_equal_one_process(tmp_path):
  data = tmp_path / 'data'
  data.mkdir()
  write_fashion_mnist(str(data), num_train=64, num_test=20)
  runs = {}
  for processes, devices in ((2, 4), (1, 8)):
    workdir = tmp_path / f'{processes}x{devices}'
    result = _launch(processes, devices, [
        sys.executable, '-m', 'recipes.train',
        '--config=configs/fashion_mnist_pmap.py', f'--workdir={workdir}',
        f'--config.data_dir={data}', '--config.batch_size=16',
        '--config.eval_batch_size=16', '--config.num_train_steps=24',
        '--config.log_every_steps=4', '--config.eval_every_steps=12'])
    assert result.returncode == 0, result.stdout[-3000:]
    for index in range(processes):
      assert f'[{index}] ' in result.stdout
    # Process 0 alone logs the metrics: one line for each of the 6 train
    # logs and 2 evaluations (which count all 20 test images, whatever the
    # number of hosts).
    lines = result.stdout.splitlines()
    assert [line[:4] for line in lines if 'train/loss=' in line] == [
        '[0] '] * 6
    assert [line[:4] for line in lines if 'over 20 examples' in line] == [
        '[0] '] * 2
    # Every process took part in writing the final checkpoint.
    assert os.listdir(workdir / 'checkpoints') == ['24']
    runs[processes] = read_scalars(str(workdir))
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


def _pod(*args, **env):
  """Runs pod.sh from a copy in an empty tree, which it must leave as it was
  (no logs/NAME/ from a dry run)."""
  with tempfile.TemporaryDirectory() as root:
    os.mkdir(os.path.join(root, 'launch'))
    pod = shutil.copy(POD, os.path.join(root, 'launch'))
    result = subprocess.run(['bash', pod, *args], capture_output=True,
                            text=True, timeout=30, cwd=root, env=command_env(**env))
    assert [(d, sorted(f)) for d, _, f in os.walk(root)] == [
        (root, []), (os.path.dirname(pod), ['pod.sh'])]
  return result


SETTINGS = ('--dry-run', '--tpu_name=zoo', '--project=proj',
            '--zone=us-central2-b')


@pytest.mark.slow
@pytest.mark.parametrize('subcommand, expected', [
    ('create', 'gcloud compute tpus tpu-vm create zoo --project=proj '
     '--zone=us-central2-b --accelerator-type=v4-32 '
     '--version=tpu-ubuntu2204-base --spot'),
    ('queued', 'gcloud compute tpus queued-resources create zoo --project=proj'
     ' --zone=us-central2-b --node-id=zoo --accelerator-type=v4-32 '
     '--runtime-version=tpu-ubuntu2204-base --spot'),
    ('copy', 'gcloud compute tpus tpu-vm scp /tmp/jax-model-zoo-zoo.tar.gz '
     'zoo:jax-model-zoo.tar.gz --project=proj --zone=us-central2-b '
     '--worker=all'),
    ('install', "pip install -q -e '.[tpu]'"),
    ('stop', '/tmp/libtpu_lockfile'),
    ('delete', 'gcloud compute tpus tpu-vm delete zoo --project=proj '
     '--zone=us-central2-b --quiet'),
])
def test_pod_dry_run_prints_the_gcloud_commands(subcommand, expected):
  result = _pod(*SETTINGS, '--accelerator_type=v4-32',
                '--version=tpu-ubuntu2204-base', '--spot', subcommand)
  assert result.returncode == 0, result.stderr
  printed = result.stdout.replace('\\', '')
  assert expected in printed
  if subcommand in ('copy', 'install', 'stop'):
    assert 'tpu-vm ssh zoo' in printed and '--worker=all' in printed


@pytest.mark.slow
def test_pod_run_starts_the_command_on_every_worker():
  result = _pod(*SETTINGS, '--workers=4', 'run', '--', 'python', '-m',
                'recipes.train', '--config=configs/mnist_pmap.py',
                '--workdir=gs://bucket/run')
  assert result.returncode == 0, result.stderr
  lines = [l.replace('\\', '') for l in result.stdout.splitlines()]
  assert [f'--worker={i}' in l for i, l in enumerate(lines)] == [True] * 4
  assert all('RECIPES_DISTRIBUTED=1' in l and
             'python -m recipes.train --config=configs/mnist_pmap.py' in l
             for l in lines)


@pytest.mark.slow
def test_pod_help_prints_the_usage_only():
  result = _pod('--help')
  assert result.returncode == 0 and result.stderr == ''
  with open(POD, encoding='utf-8') as f:
    header = f.read().split('\nset -')[0].splitlines()[1:]
  assert all(line.startswith('#') for line in header)  # The comment block.
  assert result.stdout.splitlines() == [
      line.removeprefix('#').removeprefix(' ') for line in header]
  assert result.stdout.startswith('TPU VM pods: create, copy the code')


@pytest.mark.slow
@pytest.mark.parametrize('args, env, message', [
    (('--dry-run', 'create'), {}, 'no TPU name: pass --tpu_name'),
    (('--dry-run', '--tpu_name=zoo', 'create'), {'GCLOUD': '/nonexistent'},
     'no project: pass --project'),
    (SETTINGS + ('create',), {}, '--accelerator_type needed'),
    (('--tpu_name=zoo', 'create'), {'GCLOUD': '/nonexistent'},
     'gcloud not found'),
    (SETTINGS + ('launch',), {}, 'unknown subcommand launch'),
])
def test_pod_missing_settings_are_clear_errors(args, env, message):
  result = _pod(*args, **env)
  assert result.returncode == 2
  assert message in result.stderr

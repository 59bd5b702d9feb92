"""`python -m recipes.train` without --workdir: a new runs/DATE-TIME_CONFIG/
in the current directory, named on the command's first line, the same one
for every process of a multi-process run."""

import os
import re
import subprocess
import sys

import pytest

from tests.helpers import LOCAL_LAUNCHER, ROOT, command_env, write_fashion_mnist

pytestmark = pytest.mark.slow

CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_pmap.py')
NAME = re.compile(r'Workdir: (runs/\d{8}-\d{6}_fashion_mnist_pmap(_\d+)?) ')


def _train(cwd, data, *launch):
  return subprocess.run(
      [*launch, sys.executable, '-m', 'recipes.train', f'--config={CONFIG}',
       f'--config.data_dir={data}', '--config.batch_size=16',
       '--config.num_train_steps=4', '--config.eval_every_steps=0'],
      cwd=cwd, capture_output=True, text=True, timeout=300,
      env=command_env())


@pytest.fixture(name='data')
def _data(tmp_path):
  data = tmp_path / 'data'
  data.mkdir()
  write_fashion_mnist(str(data), num_train=64, num_test=16)
  return data


def test_a_run_without_workdir_goes_to_a_new_directory_named_first(tmp_path,
                                                                   data):
  names = []
  for _ in range(2):
    result = _train(tmp_path, data)
    assert result.returncode == 0, result.stderr[-3000:]
    first = result.stdout.splitlines()[0]
    names.append(NAME.match(first)[1])
    assert f'--workdir={names[-1]} resumes it' in first
    assert os.listdir(tmp_path / names[-1] / 'checkpoints') == ['4']
  assert names[0] != names[1]  # The second run does not resume the first.
  assert sorted(os.listdir(tmp_path / 'runs')) == sorted(
      os.path.basename(n) for n in names)


def test_every_process_of_a_launch_takes_process_0s_directory(tmp_path,
                                                              data):
  result = _train(tmp_path, data, LOCAL_LAUNCHER, '--num_processes=2',
                  '--devices_per_process=4', '--')
  assert result.returncode == 0, result.stdout[-3000:]
  [line] = [l for l in result.stdout.splitlines() if 'Workdir: ' in l]
  name = NAME.search(line)[1]
  assert os.listdir(tmp_path / 'runs') == [os.path.basename(name)]
  # Both processes wrote their part of the checkpoint there.
  assert os.listdir(tmp_path / name / 'checkpoints') == ['4']


def test_evaluate_without_workdir_is_one_line(tmp_path):
  result = subprocess.run(
      [sys.executable, '-m', 'recipes.evaluate', f'--config={CONFIG}'],
      cwd=tmp_path, capture_output=True, text=True, timeout=120,
      env=command_env())
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1].startswith(
      'error: --workdir is missing; e.g. python -m recipes.evaluate ')
  assert not os.path.exists(tmp_path / 'runs')

"""`python -m recipes.train` without --workdir: a new runs/DATE-TIME_CONFIG/
in the current directory, named on the command's first line, the same one
for every process of a multi-process run (checked by the runs of
tests/integration/test_launch.py::test_two_processes_equal_one_process,
which go without --workdir); `recipes.evaluate` needs one."""

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, command_env

pytestmark = pytest.mark.slow

CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_pmap.py')


def test_evaluate_without_workdir_is_one_line(tmp_path):
  result = subprocess.run(
      [sys.executable, '-m', 'recipes.evaluate', f'--config={CONFIG}'],
      cwd=tmp_path, capture_output=True, text=True, timeout=120,
      env=command_env())
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1].startswith(
      'error: --workdir is missing; e.g. python -m recipes.evaluate ')
  assert not os.path.exists(tmp_path / 'runs')

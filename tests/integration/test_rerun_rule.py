"""The suite's rerun rule (pyproject.toml's addopts): a test runs once more
only after a native crash, of its pytest worker or of a process it started;
an ordinary failure is never run again."""

import os
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT

# Each case fails its first time only (a file marks the first run), then
# passes: a rerun turns it into a pass, no rerun leaves it failed.
CASES = '''
import os

def _first_time(name):
  marker = os.path.join(os.environ['MARKERS'], name)
  first = not os.path.exists(marker)
  open(marker, 'a').close()
  return first

def test_worker_dies():
  if _first_time('worker'):
    os.abort()

def test_a_started_process_crashed():
  if _first_time('report_head'):
    raise AssertionError('process 1 ended:\\nFatal Python error: '
                         'Segmentation fault\\n\\nThread 0x1 ...')

def test_the_end_of_a_crash_report():
  if _first_time('report_end'):
    raise AssertionError('[1] Extension modules: numpy._core, jaxlib '
                         '(total: 2)')

def test_an_ordinary_failure():
  if _first_time('ordinary'):
    assert 2 + 2 == 5, 'the total: 5 is wrong'
'''


@pytest.mark.slow  # Runs pytest in a process.
def test_only_native_crashes_run_again(tmp_path):
  (tmp_path / 'test_cases.py').write_text(CASES)
  markers = tmp_path / 'markers'
  markers.mkdir()
  result = subprocess.run(
      [sys.executable, '-m', 'pytest', '-c', os.path.join(ROOT,
                                                         'pyproject.toml'),
       f'--rootdir={tmp_path}', '-p', 'no:cacheprovider', '-n', '1', '-rA',
       str(tmp_path / 'test_cases.py')],
      cwd=tmp_path, env={**os.environ, 'MARKERS': str(markers)},
      capture_output=True, text=True, timeout=300, check=False)
  output = result.stdout  # (stderr has the aborted worker's stacks.)
  summary = output.strip().splitlines()[-1]
  assert re.search(r'1 failed, 3 passed, 3 rerun', summary), output[-3000:]
  assert re.search(r'FAILED .*test_an_ordinary_failure', output), output
  assert sorted(os.listdir(markers)) == [
      'ordinary', 'report_end', 'report_head', 'worker']

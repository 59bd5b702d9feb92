"""`python -m recipes.compile` as a user runs it: the report, --json, and
one line for each mistake."""

import json
import subprocess
import sys

import pytest

from recipes import compile as aot_compile
from recipes import experiment
from recipes.aot import chips, topology
from recipes.config import defaults
from tests.helpers import ROOT, command_env

pytestmark = pytest.mark.slow  # Processes and compiles.

needs_libtpu = pytest.mark.skipif(
    not topology.have_libtpu(),
    reason="compiling for TPUs needs libtpu: pip install -e '.[tpu]'")


def _compile(*flags):
  return subprocess.run(
      [sys.executable, '-m', 'recipes.compile',
       '--config=configs/fashion_mnist_sharded.py', *flags],
      cwd=ROOT, capture_output=True, text=True, timeout=600,
      env=command_env())


def _one_error_line(result) -> str:
  assert result.returncode == 1, result.stderr[-2000:]
  assert 'Traceback' not in result.stderr, result.stderr[-3000:]
  return result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize('flags, says', [
    (['--topology=v9:2x2'], "error: unknown TPU 'v9' in --topology='v9:2x2'"),
    (['--topology=v4:2x2'], 'error: bad --topology='),
    (['--topology='], "error: unknown TPU ''"),
    (['--topology=v5e:2x2', '--json=/proc/no/report.json'],
     "error: cannot write --json='/proc/no/report.json'"),
])
def test_bad_flags_are_one_line_before_anything_compiles(flags, says):
  assert _one_error_line(_compile(*flags)).startswith(says)


@needs_libtpu
def test_the_report_and_its_json(tmp_path):
  result = _compile('--topology=v5e:2x2', '--config.batch_size=64',
                    f'--json={tmp_path / "report.json"}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert '| train | 64 |' in result.stdout
  assert 'zoo TFLOPs/chip' in result.stdout
  assert 'Estimate (a roofline' in result.stdout
  assert 'could not determine TPU' not in result.stderr
  report = json.loads((tmp_path / 'report.json').read_text())
  assert (report['topology'], report['num_chips']) == ('v5e:2x2', 4)
  train, evaluation = report['steps']
  assert train['memory']['fits'] and train['cost']['flops'] > 0
  # XLA counts about what the zoo counts (3x the forward pass: the first
  # layer needs no gradient for its input; the optimizer adds a little).
  assert 0.8 < train['cost']['flops'] / train['model_flops_per_chip'] < 1.5
  assert evaluation['step'] == 'eval'
  assert any(c['kind'] == 'all-reduce' for c in train['collectives'])


@needs_libtpu
def test_a_config_that_does_not_fit_says_by_how_much_and_what_helps():
  # Over by a little: XLA plans it, the margin refuses it.
  line = _one_error_line(_compile('--topology=v5e:2x2',
                                  '--config.batch_size=540672'))
  assert line.startswith('error: the train step needs '), line
  assert 'GiB more than the 16.00 GiB of a v5e chip' in line
  assert '--find_max_batch' in line
  # Over by far: XLA refuses to plan it, saying how much it needs.
  line = _one_error_line(_compile('--topology=v5e:2x2',
                                  f'--config.batch_size={1 << 22}'))
  assert line.startswith('error: the train step at batch 4194304 does not '
                         'fit (Ran out of memory on HBM'), line
  assert '--config.mesh.fsdp=-1' in line and '--find_max_batch' in line


@needs_libtpu
@pytest.mark.parametrize('flag, says', [
    ('--num_slices=0', 'error: --num_slices=0: give 1 or more.'),
    ('--topology=v5e:3x3', 'error: libtpu does not offer --topology=v5e:3x3'),
])
def test_a_slice_libtpu_cannot_give_is_one_line(flag, says):
  line = _one_error_line(_compile('--topology=v5e:2x2', flag))
  assert line.startswith(says), line


@needs_libtpu
def test_a_mesh_that_does_not_match_the_slice_is_one_line():
  line = _one_error_line(_compile('--topology=v5e:2x2',
                                  '--config.mesh.data=3'))
  assert 'has 3 devices but there are 4' in line


@needs_libtpu
def test_find_max_batch_finds_the_edge():
  config = defaults.get_config()
  config.update(strategy='sharded')
  devices = topology.devices(chips.parse('v5e:2x2'))
  strategy = experiment.training(config, 10, (28, 28, 1), 10, 10,
                                 devices).strategy
  chip = chips.CHIPS['v5e']
  # Coarse, for few compiles (about 15 GiB is reached at 4 units).
  unit, tried = 1 << 17, {}
  largest = aot_compile.find_max_batch(strategy, unit, unit, (28, 28, 1),
                                       chip, tried)
  # The edge was compiled on both sides: one more unit does not fit.
  assert largest % unit == 0 and largest > 0, tried
  assert tried[largest // unit] and tried[largest // unit + 1] is False
  assert len(tried) <= 5, tried

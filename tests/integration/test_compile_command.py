"""`python -m recipes.compile` as a user runs it: the report, --json, and
one line for each mistake.

Two runs are processes (the report; a mistake's exit status and stderr);
the other mistakes go through the command's `main` in this process, where
each ends in the same SystemExit('error: ...') line."""

import json
import re
import subprocess
import sys

import pytest
from absl import flags
from absl import logging as absl_logging
from absl.testing import flagsaver

import zoo
from configs import text_llama3_8b_pod
from recipes import compile as aot_compile
from recipes import experiment
from recipes.aot import analysis, chips, topology
from recipes.config import command_line, defaults
from tests.helpers import ROOT, command_env

needs_libtpu = pytest.mark.skipif(
    not topology.have_libtpu(),
    reason="compiling for TPUs needs libtpu: pip install -e '.[tpu]'")

CONFIG = f'--config={ROOT}/configs/fashion_mnist_sharded.py'


def _compile(*args):
  return subprocess.run(
      [sys.executable, '-m', 'recipes.compile', CONFIG, *args],
      cwd=ROOT, capture_output=True, text=True, timeout=600,
      env=command_env())


def _one_error_line(result) -> str:
  assert result.returncode == 1, result.stderr[-2000:]
  assert 'Traceback' not in result.stderr, result.stderr[-3000:]
  return result.stderr.strip().splitlines()[-1]


@pytest.fixture(name='error_of')
def _error_of(monkeypatch):
  """The line `python -m recipes.compile --config=... ARGS` ends with, from
  its main in this process; any other exception fails the test."""
  # main adds its log filter and unraisable hook: this process gets its own
  # back afterwards.
  handler = absl_logging.get_absl_handler()
  monkeypatch.setattr(handler, 'filters', list(handler.filters))
  monkeypatch.setattr(sys, 'unraisablehook', sys.unraisablehook)

  def error_of(*args, **fields) -> str:
    """`fields`: config fields set as --config.FIELD=VALUE would, a dot
    written '__' (in a process those flags come from sys.argv)."""
    with flagsaver.flagsaver():
      flags.FLAGS(['compile', CONFIG, *args])
      config = command_line.CONFIG.value
      for field, value in fields.items():
        *parents, key = field.split('__')
        for parent in parents:
          config = config[parent]
        config[key] = value
      with pytest.raises(SystemExit) as stop:
        aot_compile.main(['compile'])
    line = str(stop.value.code)
    assert '\n' not in line, line
    return line

  return error_of


@pytest.mark.slow  # A process.
def test_a_bad_flag_ends_the_process_with_one_line_and_status_1():
  line = _one_error_line(_compile('--topology=v9:2x2'))
  assert line.startswith("error: unknown TPU 'v9' in --topology='v9:2x2'")


@pytest.mark.parametrize('args, says', [
    (['--topology=v9:2x2'], "error: unknown TPU 'v9' in --topology='v9:2x2'"),
    (['--topology=v4:2x2'], 'error: bad --topology='),
    (['--topology='], "error: unknown TPU ''"),
    (['--topology=v5e:2x2', '--json=/proc/no/report.json'],
     "error: cannot write --json='/proc/no/report.json'"),
])
def test_bad_flags_are_one_line_before_anything_compiles(error_of, args,
                                                         says):
  assert error_of(*args).startswith(says)


LANGUAGE_MODEL = f'--config={ROOT}/configs/text_llama3_2_1b_pod.py'


@pytest.mark.parametrize('args, fields, says', [
    ([], dict(seq_len=16), 'error: seq_len is for token sequences, and '
     "dataset 'fashion_mnist_idx' holds images; set --config.seq_len=0."),
    ([LANGUAGE_MODEL], dict(seq_len=0), 'error: the sequence length of '
     'tokens:/data/llama3_tokens_2048 is not known before it is prepared: '
     'set --config.seq_len=N'),
    ([LANGUAGE_MODEL], dict(seq_len=200000), 'error: seq_len=200,000 is '
     'more than the 131,072 positions of llama3_2_1b; set --config.seq_len='
     '131072 or less'),
])
def test_a_bad_sequence_length_is_one_line_before_anything_compiles(
    error_of, args, fields, says):
  assert error_of('--topology=v5e:2x2', *args, **fields).startswith(says)


@pytest.mark.slow  # Two libtpu compiles.
@needs_libtpu
def test_a_language_model_compiles_at_test_size_without_its_data():
  """Two compiles of a test-size decoder (a few seconds): the token batch,
  MaxText's FLOPs per token and tokens/s; the data does not exist."""
  config = text_llama3_8b_pod.get_config()
  config.model_kwargs = {**config.model_kwargs.to_dict(),
                         **zoo.spec('llama3_8b').test_kwargs}
  config.update(batch_size=16, eval_batch_size=16, seq_len=16)
  result = aot_compile.compile_config(config, 'v5e:2x2', name='tiny')
  assert result['seq_len'] == 16
  assert result['mesh'] == {'data': 1, 'fsdp': 4, 'tensor': 1}
  assert all(s['memory']['fits'] for s in result['steps'])
  model = experiment.create_model(config, 0)
  assert result['train_gflops_per_token'] * 1e9 == pytest.approx(
      analysis.train_flops_per_token(model, 16))
  estimate = result['estimate']
  assert estimate['tokens_per_second'] == pytest.approx(
      16 * estimate['images_per_second'])
  assert estimate['tokens_per_second_per_chip'] == pytest.approx(
      estimate['tokens_per_second'] / 4)
  assert 0 < estimate['mfu'] < 1
  text = aot_compile.table(result)
  assert 'GFLOPs per token to train at 16 tokens a sequence' in text
  assert ' per chip), MFU ' in text


@pytest.mark.slow  # A process and two compiles.
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
  # layer needs no gradient for its input; the optimizer adds a little):
  # no windowed matmul loop leaves part of it out here.
  assert train['windowed_matmul_loops'] == 0
  assert 0.8 < train['cost']['flops'] / train['model_flops_per_chip'] < 1.5
  assert 'windowed matmul loop' not in result.stdout
  assert evaluation['step'] == 'eval'
  assert any(c['kind'] == 'all-reduce' for c in train['collectives'])


@pytest.mark.slow  # Three compiles.
@needs_libtpu
def test_a_config_that_does_not_fit_says_by_how_much_and_what_helps(
    error_of):
  # Over by a little: XLA plans it, the margin refuses it.
  line = error_of('--topology=v5e:2x2', batch_size=540672)
  assert line.startswith('error: the train step needs '), line
  assert 'GiB more than the 16.00 GiB of a v5e chip' in line
  assert '--find_max_batch' in line
  # Over by far: XLA refuses to plan it, saying how much it needs.
  line = error_of('--topology=v5e:2x2', batch_size=1 << 22)
  assert line.startswith('error: the train step at batch 4194304 does not '
                         'fit (Ran out of memory on HBM'), line
  assert '--config.mesh.fsdp=-1' in line and '--find_max_batch' in line


@pytest.mark.slow  # libtpu's devices.
@needs_libtpu
@pytest.mark.parametrize('args, fields, says', [
    (['--num_slices=0'], {}, r'error: --num_slices=0: give 1 or more\.'),
    (['--topology=v5e:3x3'], {},
     r'error: libtpu does not offer --topology=v5e:3x3'),
    ([], {'mesh__data': 3}, r'error: .*has 3 devices but there are 4'),
])
def test_a_slice_or_mesh_libtpu_cannot_give_is_one_line(error_of, args,
                                                        fields, says):
  line = error_of('--topology=v5e:2x2', *args, **fields)
  assert re.match(says, line), line


@pytest.mark.slow  # Three compiles.
@needs_libtpu
def test_find_max_batch_finds_the_edge():
  config = defaults.get_config()
  config.update(strategy='sharded')
  devices = topology.devices(chips.parse('v5e:2x2'))
  strategy = experiment.training(config, 10, (28, 28, 1), 10, 10,
                                 devices).strategy
  chip = chips.CHIPS['v5e']
  # Coarse, for few compiles (a unit is about 5.5 GiB of the chip's 16),
  # from 2 units: one doubling to 4, which does not fit, then bisection.
  unit, tried = 3 << 16, {}
  largest = aot_compile.find_max_batch(strategy, unit, 2 * unit, (28, 28, 1),
                                       chip, tried)
  # The edge was compiled on both sides: one more unit does not fit.
  assert largest % unit == 0 and largest > 0, tried
  assert tried[largest // unit] and tried[largest // unit + 1] is False
  assert len(tried) == 3, tried  # 2, 4, 3.

"""Each bad input ends the real command with one clear line, exit status 1
and no traceback: a mistake in the flags (found while they are parsed) and
one found by the run. Every other bad input is checked in process, through
`recipes.train.run`, which the command calls once its flags are parsed
(tests/unit/recipes/test_train_errors.py)."""

import subprocess
import sys

import pytest

from tests.helpers import ROOT, command_env

# Each test runs the command: the slow tier.
pytestmark = pytest.mark.slow


def _train(tmp_path, *flags, config='configs/fashion_mnist_pmap.py'):
  """The last line of a run that must fail cleanly, with status 1."""
  command = [sys.executable, '-m', 'recipes.train', f'--config={config}',
             f'--workdir={tmp_path / "work"}', '--config.num_train_steps=2',
             *flags]
  result = subprocess.run(
      command, cwd=ROOT, capture_output=True, text=True, timeout=300,
      env=command_env(JAX_NUM_CPU_DEVICES='8'))
  assert result.returncode == 1, result.stderr[-2000:]
  assert 'Traceback' not in result.stderr, result.stderr[-3000:]
  return result.stderr.strip().splitlines()[-1]


def test_a_mistake_found_by_the_run(tmp_path):
  """Past the flags: the run's own check, printed by the command."""
  line = _train(tmp_path, '--config.batch_size=100')
  assert line == ('error: batch_size 100 is not divisible by the 8 devices; '
                  'use a multiple of 8, e.g. 96 or 104.')


def test_unknown_config_field_is_rejected(tmp_path):
  line = _train(tmp_path, '--config.batchsize=64')
  assert line == ("error: unknown config field 'batchsize'; did you mean "
                  "'batch_size' or 'eval_batch_size'? --help lists all "
                  'fields.')
  assert not (tmp_path / 'work').exists()  # Flags come before anything.


def test_config_file_with_a_syntax_error(tmp_path):
  """The config file's loader is the command's own (a missing file, a file
  in a directory named with ':' and one returning a dict are one line
  there: test_train_errors.py)."""
  config = tmp_path / 'broken.py'
  config.write_text('def get_config():\n  return dict(model=\n')
  line = _train(tmp_path, config=str(config))
  assert line.startswith(f"error: config file '{config}' has a syntax error "
                         'in line 2: ')
  assert line.endswith('; fix the file.')
  assert not (tmp_path / 'work').exists()


@pytest.mark.parametrize('flag, expected', [
    ('--config.batch_size=abc', "config field batch_size must be an int, not "
     "'abc'; e.g. --config.batch_size=128."),
    ('--config.learning_rate=fast', "config field learning_rate must be a "
     "float, not 'fast'; e.g. --config.learning_rate=0.1."),
])
def test_config_value_of_the_wrong_type(tmp_path, flag, expected):
  assert _train(tmp_path, flag) == f'error: {expected}'
  assert not (tmp_path / 'work').exists()

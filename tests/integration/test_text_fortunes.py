"""configs/text_fortunes.py as users run it, on the real text of Debian's
fortunes package: one command prepares the text and trains; 1 process x 2
devices killed by SIGKILL and resumed ends bitwise where 2 processes x 1
device (preparing the text together) end; the last line gives tokens/s and
the perplexity, and the evaluation curve is in TensorBoard. (That
evaluating a workdir gives its run's last perplexity is
tests/unit/recipes/test_language_model.py's, and `recipes.evaluate` on this
text tests/unit/recipes/test_perplexity_transformers.py's.)"""

import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from recipes.data.sources import fortune_source
from tests.helpers import (LOCAL_LAUNCHER, ROOT, command_env, read_scalars,
                           saved_params, sigkill_after_first_checkpoint)

pytestmark = pytest.mark.slow  # Commands as processes, 2.4M tokens.

DEBIAN = '/usr/share/games/fortunes'
NUM_STEPS = 20  # Killed after its checkpoint of step 10, then resumed.
TIMEOUT = 600  # Seconds for each command; 20-40 on 2 cores.
EVAL = re.compile(r'step (\d+): eval loss ([\d.]+), perplexity ([\d.]+), '
                  r'token accuracy [\d.]+ over (\d+) tokens of validation')


def _flags(workdir, data_dir, eval_every=NUM_STEPS):
  return ['--config=configs/text_fortunes.py', f'--workdir={workdir}',
          f'--config.data_dir={data_dir}',
          f'--config.num_train_steps={NUM_STEPS}',
          '--config.batch_size=8', '--config.eval_batch_size=64',
          '--config.warmup_steps=5', '--config.checkpoint_every_steps=10',
          '--config.log_every_steps=10',
          f'--config.eval_every_steps={eval_every}']


def _run(command, devices_per_process):
  result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          timeout=TIMEOUT, env=command_env(
                              JAX_NUM_CPU_DEVICES=str(devices_per_process)))
  log = result.stdout + result.stderr
  assert result.returncode == 0, log[-3000:]
  assert 'Traceback' not in log, log[-3000:]
  return log


@pytest.mark.skipif(not os.path.isdir(DEBIAN),
                    reason=f"needs Debian's fortunes package in {DEBIAN}")
def test_fortunes_train_resume_bitwise_on_any_process_count(tmp_path):
  data_dir = tmp_path / 'tokens'
  train = [sys.executable, '-m', 'recipes.train']
  two = _run([LOCAL_LAUNCHER, '--num_processes=2', '--devices_per_process=1',
              '--', *train, *_flags(tmp_path / 'two', data_dir, 10)], 1)
  # Both processes found the text unprepared; one prepared it.
  assert two.count('Preparing fortune:') == 1, two[-3000:]

  command = [*train, *_flags(tmp_path / 'one', data_dir)]
  sigkill_after_first_checkpoint(command, tmp_path / 'one',
                                 JAX_NUM_CPU_DEVICES='2')
  log = _run(command, 2)
  assert 'Resuming from the checkpoint of step 10' in log, log[-3000:]
  assert re.search(r'Done: steps 11-20 of 20 .*tokens/s while training\); '
                   r'final accuracy [\d.]+ on validation \(loss [\d.]+, '
                   r'perplexity [\d.]+\)\.', log), log[-3000:]
  assert 'Preparing' not in log  # Read as the first run left it.

  (step, one), (_, other) = (saved_params(tmp_path / 'one'),
                             saved_params(tmp_path / 'two'))
  assert step == NUM_STEPS
  for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(other)):
    np.testing.assert_array_equal(a, b)

  # The whole validation split, every evaluation; the curve (of the run
  # not killed, which evaluates every 10 steps) falls.
  source = fortune_source.open(DEBIAN)
  documents = source.splits['validation'].read(
      range(len(source.splits['validation'])))
  # Each document's bytes and its end, all targets but its first byte.
  targets = sum(len(d.encode('utf-8')) for d in documents)
  evals = EVAL.findall(log)
  assert [int(e[0]) for e in evals] == [NUM_STEPS]  # After the resume.
  assert int(evals[0][3]) == targets
  curve = read_scalars(tmp_path / 'two')['eval/perplexity']  # Not killed.
  assert sorted(curve) == [10, 20]
  assert curve[20] < curve[10] < 257, curve  # 257: the uniform guess.
  np.testing.assert_allclose(curve[20], float(evals[-1][2]), rtol=1e-3)

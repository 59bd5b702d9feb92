"""configs/text_fortune_classes.py as users run it, on the real collections
of Debian's fortunes package: one command prepares the labelled text and
trains an encoder to a validation accuracy above always answering the
largest class; a run killed by SIGKILL after its first checkpoint and
resumed ends with bitwise the parameters of one never stopped; and
`recipes.evaluate` gives the run's last accuracy."""

import collections
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from configs import text_fortune_classes
from recipes.data.sources import fortune_source, labelled_texts
from tests.helpers import (ROOT, command_env, read_scalars, saved_params,
                           sigkill_after_first_checkpoint)

pytestmark = pytest.mark.slow  # Commands as processes, 3,749 texts.

DEBIAN = '/usr/share/games/fortunes'
NUM_STEPS = 80  # Killed after its checkpoint of step 40, then resumed.
TIMEOUT = 600  # Seconds for each command; 20-40 on 2 cores.
EVAL = re.compile(r'step (\d+): eval loss ([\d.]+), accuracy ([\d.]+), '
                  r'top-5 [\d.]+ over (\d+) examples of validation')


def _flags(workdir, data_dir):
  return ['--config=configs/text_fortune_classes.py', f'--workdir={workdir}',
          f'--config.data_dir={data_dir}',
          f'--config.num_train_steps={NUM_STEPS}', '--config.warmup_steps=20',
          '--config.checkpoint_every_steps=40',
          '--config.eval_every_steps=40', '--config.log_every_steps=40']


def _run(command):
  result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          timeout=TIMEOUT, env=command_env(
                              JAX_NUM_CPU_DEVICES='2'))
  log = result.stdout + result.stderr
  assert result.returncode == 0, log[-3000:]
  assert 'Traceback' not in log, log[-3000:]
  return log


def _majority() -> float:
  """The validation accuracy of always answering the largest class."""
  text = labelled_texts.labelled(
      fortune_source.open(DEBIAN, '', 'collection'),
      text_fortune_classes.CLASSES)
  counts = collections.Counter(text.labels['validation'].tolist())
  return max(counts.values()) / len(text.labels['validation'])


@pytest.mark.skipif(not os.path.isdir(DEBIAN),
                    reason=f"needs Debian's fortunes package in {DEBIAN}")
def test_fortune_classes_learn_resume_bitwise_and_evaluate(tmp_path):
  data_dir = tmp_path / 'tokens'
  train = [sys.executable, '-m', 'recipes.train']
  straight = _run([*train, *_flags(tmp_path / 'straight', data_dir)])
  assert straight.count('Preparing fortune:') == 1, straight[-3000:]

  command = [*train, *_flags(tmp_path / 'killed', data_dir)]
  sigkill_after_first_checkpoint(command, tmp_path / 'killed', TIMEOUT,
                                 JAX_NUM_CPU_DEVICES='2')
  resumed = _run(command)
  assert 'Resuming from the checkpoint of step 40' in resumed, (
      resumed[-3000:])
  assert 'Preparing' not in resumed  # Read as the first run left it.
  (step, one), (_, other) = (saved_params(tmp_path / 'straight'),
                             saved_params(tmp_path / 'killed'))
  assert step == NUM_STEPS
  for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(other)):
    np.testing.assert_array_equal(a, b)

  accuracy = read_scalars(tmp_path / 'straight')['eval/accuracy']
  assert sorted(accuracy) == [40, NUM_STEPS]
  majority = _majority()
  assert majority == 60 / 184  # definitions.
  assert accuracy[NUM_STEPS] > majority + 0.15, (accuracy, majority)

  evaluated = _run([sys.executable, '-m', 'recipes.evaluate',
                    *_flags(tmp_path / 'straight', data_dir)])
  found = EVAL.findall(evaluated)
  assert found and int(found[-1][0]) == NUM_STEPS, evaluated[-3000:]
  assert int(found[-1][3]) == 184  # Every validation text, once.
  assert float(found[-1][2]) == pytest.approx(accuracy[NUM_STEPS],
                                              abs=1e-4), (found, accuracy)

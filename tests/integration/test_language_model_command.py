"""`python -m recipes.train` and `python -m recipes.evaluate` on the tiny
language model's config, as a user runs them on prepared `tokens:` data:
the run trains, shows tokens/s and perplexity, and the evaluation of its
workdir reports the perplexity the run ended with."""

import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT, command_env, write_token_dir

pytestmark = pytest.mark.slow

TIMEOUT = 300  # Seconds; the two commands take about 40 on 2 cores.


def _run(module, flags):
  return subprocess.run([sys.executable, '-m', module, *flags], cwd=ROOT,
                        capture_output=True, text=True, timeout=TIMEOUT,
                        env=command_env())


def test_the_tiny_llama_config_trains_then_evaluates_its_perplexity(
    tmp_path):
  tokens = write_token_dir(tmp_path, seq_len=16)
  flags = ['--config=configs/text_tiny_llama.py',
           f'--workdir={tmp_path / "work"}',
           f'--config.dataset=tokens:{tokens}',
           '--config.num_train_steps=20', '--config.warmup_steps=2',
           '--config.log_every_steps=10', '--config.eval_every_steps=10']
  trained = _run('recipes.train', flags)
  assert trained.returncode == 0, trained.stderr[-3000:]
  log = trained.stderr
  assert 'Traceback' not in log
  evals = re.findall(r'step (\d+): eval loss ([\d.]+), perplexity ([\d.]+), '
                     r'token accuracy [\d.]+ over (\d+) tokens of validation',
                     log)
  assert [e[0] for e in evals] == ['10', '20'], log[-3000:]
  assert float(evals[1][2]) < float(evals[0][2])  # It learns.
  assert re.search(r'Done: steps 1-20 of 20 .*tokens/s while training\); '
                   r'final accuracy [\d.]+ on validation \(loss [\d.]+, '
                   r'perplexity [\d.]+\)\.', log), log[-3000:]

  evaluated = _run('recipes.evaluate', flags)
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  again = re.findall(r'step 20: eval loss ([\d.]+), perplexity ([\d.]+)',
                     evaluated.stderr)
  assert again == [evals[1][1:3]], evaluated.stderr[-3000:]

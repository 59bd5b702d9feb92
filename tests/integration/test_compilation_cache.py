"""The compilation cache: on by default in a directory of the user's, off
with '', and a resumed run reads its steps instead of compiling them."""

import os
import signal
import subprocess
import sys
import threading

import jax
import pytest

from recipes.runtime import compilation_cache
from tests.helpers import ROOT, command_env


def test_the_setting_chooses_the_directory_unless_the_environment_does(
    monkeypatch, tmp_path):
  monkeypatch.delenv('JAX_COMPILATION_CACHE_DIR', raising=False)
  before = (jax.config.jax_compilation_cache_dir,
            jax.config.jax_enable_compilation_cache)
  try:
    compilation_cache.use('~/somewhere')
    assert jax.config.jax_compilation_cache_dir == os.path.expanduser(
        '~/somewhere')
    monkeypatch.setenv('JAX_COMPILATION_CACHE_DIR', str(tmp_path))
    compilation_cache.use('~/elsewhere')  # The environment's is kept.
    assert jax.config.jax_compilation_cache_dir == os.path.expanduser(
        '~/somewhere')
    compilation_cache.use('')
    assert not jax.config.jax_enable_compilation_cache
  finally:
    jax.config.update('jax_compilation_cache_dir', before[0])
    jax.config.update('jax_enable_compilation_cache', before[1])


def _steps(directory) -> dict[str, int]:
  """The cached train and eval steps, with the time each was written."""
  return {name: os.stat(os.path.join(directory, name)).st_mtime_ns
          for name in os.listdir(directory) if '_step-' in name}


@pytest.mark.slow
def test_a_resumed_run_reads_its_steps_from_the_cache(data_dir, tmp_path):
  cache = tmp_path / 'cache'
  env = command_env()
  del env['JAX_COMPILATION_CACHE_DIR']  # The session's; this run's own.
  command = [sys.executable, '-m', 'recipes.train',
             # jit's programs are cached; JAX does not keep pmap's.
             '--config=configs/fashion_mnist_sharded.py',
             f'--workdir={tmp_path / "work"}', f'--config.data_dir={data_dir}',
             '--config.batch_size=16', '--config.num_train_steps=400',
             '--config.log_every_steps=10', '--config.eval_every_steps=20',
             f'--config.compilation_cache_dir={cache}']

  def run_to_the_first_evaluation():
    """Runs `command` until both steps have run, then stops it (SIGTERM:
    saves, and stops); returns its output."""
    process = subprocess.Popen(command, cwd=ROOT, env=env, text=True,
                               stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    hung = threading.Timer(300, process.kill)  # Ends the wait for the line.
    hung.start()
    lines = []
    try:
      for line in process.stdout:
        lines.append(line)
        if ': eval loss ' in line:  # Both steps compiled.
          process.send_signal(signal.SIGTERM)
          break
    finally:
      hung.cancel()
    output = ''.join(lines) + process.communicate(timeout=120)[0]
    assert process.returncode == 0, output[-3000:]
    assert 'Stopped by SIGTERM' in output, output[-3000:]
    return output

  run_to_the_first_evaluation()
  compiled = _steps(cache)
  assert {name.split('-')[0] for name in compiled} == {
      'jit_train_step', 'jit_eval_step'}, compiled
  resumed = run_to_the_first_evaluation()
  assert 'Resum' in resumed, resumed[-3000:]
  assert _steps(cache) == compiled  # Read, not compiled and written again.

"""The compilation cache: on by default in a directory of the user's, off
with '', and a resumed run reads its steps instead of compiling them."""

import os
import signal
import subprocess
import sys

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
  first = subprocess.Popen(command, cwd=ROOT, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  for line in first.stdout:
    if ': eval loss ' in line:  # Both steps compiled.
      first.send_signal(signal.SIGTERM)  # Saves, and stops.
      break
  output, _ = first.communicate(timeout=120)
  assert first.returncode == 0, output[-3000:]
  assert 'Stopped by SIGTERM' in output, output[-3000:]
  compiled = _steps(cache)
  assert {name.split('-')[0] for name in compiled} == {
      'jit_train_step', 'jit_eval_step'}, compiled
  resumed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=300)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert 'Resum' in resumed.stderr, resumed.stderr[-3000:]
  assert _steps(cache) == compiled  # Read, not compiled and written again.

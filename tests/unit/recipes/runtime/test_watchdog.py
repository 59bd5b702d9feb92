"""The stall watchdog in-process: compiling is not a stall (the slow tier,
tests/integration/test_watchdog.py, ends real processes)."""

import itertools
import time

import jax
import numpy as np
import pytest
from jax._src import compiler

from recipes.runtime import watchdog

_COUNT = itertools.count()
# A stop ends the watchdog's thread with SystemExit (see `stops`).
pytestmark = pytest.mark.filterwarnings(
    'ignore::pytest.PytestUnhandledThreadExceptionWarning')


@pytest.fixture
def stops(monkeypatch):
  """The watchdog's stops, recorded instead of ending the test's process."""
  stopped = []

  def record(status):
    stopped.append(status)
    raise SystemExit  # Ends the watchdog's thread, as the process would end.

  monkeypatch.setattr(watchdog.os, '_exit', record)
  return stopped


def _slow_compilations(monkeypatch, seconds: float):
  """XLA's compilation takes `seconds` longer: the call JAX makes to compile
  (or to read the compilation cache) waits first."""
  compile_or_get_cached = compiler.compile_or_get_cached

  def slow(*args, **kwargs):
    time.sleep(seconds)
    return compile_or_get_cached(*args, **kwargs)

  monkeypatch.setattr(compiler, 'compile_or_get_cached', slow)


def _compile_new_step():
  """Compiles (and runs) a function never compiled before."""
  offset = next(_COUNT)
  return jax.jit(lambda x: x * 3 + offset)(np.ones(7)).block_until_ready()


@pytest.mark.slow
def test_a_slow_compilation_is_not_a_stall_but_a_stall_after_it_is(
    monkeypatch, capfd, stops):
  _slow_compilations(monkeypatch, 2)
  with watchdog.Watchdog(1) as dog:
    dog.beat('training step 1 of 6')
    _compile_new_step()
    assert not stops, capfd.readouterr().err
    time.sleep(2.5)  # Stalled, after the compilation.
  assert stops == [watchdog.EXIT_STATUS]
  error = capfd.readouterr().err.strip().splitlines()[-1]
  assert error.startswith('error: stalled in training step 1 of 6: no '
                          'progress for ')
  assert '(--config.stall_timeout_seconds=1)' in error


def test_a_compilation_past_its_own_bound_is_a_stall_named_so(
    monkeypatch, capfd, stops):
  _slow_compilations(monkeypatch, 3)
  with watchdog.Watchdog(0.5, compile_seconds=1.5) as dog:
    dog.beat('restoring the latest checkpoint')
    _compile_new_step()
  assert stops == [watchdog.EXIT_STATUS]
  error = capfd.readouterr().err.strip().splitlines()[-1]
  # Not taken for storage that does not answer.
  assert error.startswith('error: stalled in compiling ')
  assert '(restoring the latest checkpoint): no progress for ' in error
  assert 'storage' not in error
  assert 'a compilation may take 1.5 s' in error

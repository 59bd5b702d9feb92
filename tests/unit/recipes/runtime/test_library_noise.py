"""The commands' logs keep our lines and drop the libraries' noise."""

import asyncio
import gc
import logging

import orbax.checkpoint as ocp
import pytest

from recipes.runtime import library_noise


def _orbax_error() -> ValueError:
  try:  # A real error raised in orbax's code.
    ocp.path.step.step_from_checkpoint_name('not-a-step')
  except ValueError as e:
    return e
  raise AssertionError('orbax accepted the name')


def _never_retrieved(error: BaseException):
  """What asyncio logs of a failed future nobody awaited (as orbax's other
  writes of a save that failed on a full disk are left)."""
  loop = asyncio.new_event_loop()
  future = loop.create_future()
  future.set_exception(error)
  del future
  gc.collect()  # asyncio logs it when the future is collected.
  loop.close()


@pytest.fixture(name='logged')
def _logged(caplog):
  caplog.handler.addFilter(library_noise.LibraryNoise())
  with caplog.at_level(logging.ERROR, logger='asyncio'):
    yield caplog


def test_a_storage_error_never_retrieved_is_left_out(logged):
  _never_retrieved(_orbax_error())
  assert not logged.records


def test_another_error_never_retrieved_is_still_shown(logged):
  try:
    raise KeyError('ours')
  except KeyError as e:
    _never_retrieved(e)
  [record] = logged.records
  assert 'Future exception was never retrieved' in record.getMessage()

"""The converters' fast tests compare tiny models, which compile longer than
they run: XLA without most optimizations for them. The slow ones' real-size
models keep the optimizations."""

import pytest

from tests.helpers import fewer_optimizations


@pytest.fixture(autouse=True)
def _fast_tests_compile_without_optimizations(request):
  if request.node.get_closest_marker('slow'):
    yield
    return
  with fewer_optimizations():
    yield

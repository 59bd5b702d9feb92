"""Batches and results as global arrays (`jax.Array` over all processes).

Each process loads only its own rows of every global batch (see
recipes/data/pipeline/dataset.py `process_slice`);
`jax.make_array_from_process_local_data` assembles the global array, so the
same code runs on one host and on a pod. Used by the strategies whose state
and batches are global arrays: sharded and shard_map.
"""

import collections
import contextlib
from typing import Iterable, Iterator

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding

from recipes.data.pipeline.dataset import process_slice
from recipes.runtime.errors import UserError


def to_host(tree):
  """A numpy copy of each (global) array, gathered from all processes.

  Args:
    tree: a tree of jax.Arrays; every process must call this together.

  Returns:
    The same tree of whole numpy arrays.
  """

  def fetch(x):
    if x.is_fully_replicated:
      return np.asarray(x.addressable_shards[0].data)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))

  return jax.tree.map(fetch, tree)


class BatchPlacer:
  """Places each process's slice of a batch as one global array.

  `sharding` splits the batch dimension; `how_to_fix` says, for the error
  when a process's devices would hold rows it did not load, which setting
  to change.

  Args:
    sharding: the batches' sharding, splitting their first dimension.
    how_to_fix: the advice in that error, e.g. which mesh setting to change.
    prefetch: how many batches are placed on the devices ahead.
  """

  def __init__(self, sharding: NamedSharding, how_to_fix: str,
               prefetch: int = 2):
    self.sharding = sharding
    self.how_to_fix = how_to_fix
    self.prefetch = prefetch
    self._checked_sizes = set()

  def _check_rows(self, global_size: int):
    """This process's rows of the global batch must be the ones it loaded."""
    if global_size in self._checked_sizes:
      return
    rows = set()
    for index in self.sharding.addressable_devices_indices_map(
        (global_size,)).values():
      rows.update(range(*index[0].indices(global_size)))
    start, stop = process_slice(global_size)
    if rows != set(range(start, stop)):
      raise UserError(
          f'with {jax.process_count()} processes the mesh must split each '
          'batch between the processes, each holding its own rows: '
          f'{self.how_to_fix} (mesh: {dict(self.sharding.mesh.shape)}).')
    self._checked_sizes.add(global_size)

  def place(self, batch: dict) -> dict:
    """One batch as global arrays.

    Args:
      batch: this process's rows of the global batch, numpy arrays.

    Returns:
      The global batch, split by `sharding`.

    Raises:
      UserError: if this process's devices would hold other rows than
        the ones it loaded.
    """
    # Every array has a row per example (a label, or a token sequence).
    global_size = len(next(iter(batch.values()))) * jax.process_count()
    self._check_rows(global_size)
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(
            self.sharding, x, (global_size, *x.shape[1:])), batch)

  def __call__(self, batches: Iterable[dict]) -> Iterator[dict]:
    """Global batches from this process's slices, `prefetch` steps ahead.

    Args:
      batches: this process's rows of each global batch.

    Yields:
      The global batches, in order.
    """
    queue = collections.deque()
    for batch in batches:
      queue.append(self.place(batch))
      if len(queue) > self.prefetch:
        yield queue.popleft()
    while queue:
      yield queue.popleft()


class GlobalState:
  """The state as global arrays, as checkpoints hold it (recipes/
  checkpoints.py): what the sharded and shard_map strategies share.
  Subclasses set `state_shardings`, `abstract_state` (the shapes with
  those shardings, a target to restore into), `place_batches` (a
  BatchPlacer) and `jitted_steps` ({'train': ..., 'eval': ...}, the jitted
  steps)."""

  state_shardings = None
  abstract_state = None
  place_batches: BatchPlacer
  jitted_steps: dict = {}

  to_host = staticmethod(to_host)

  def tracing_scope(self):
    """What the steps are traced in (the sharded strategy's mesh and
    rules)."""
    return contextlib.nullcontext()

  def lower(self, step: str, batch: dict) -> jax.stages.Lowered:
    """See `Strategy.lower`: the batch split as `place_batches` splits it."""
    sharding = self.place_batches.sharding
    batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=sharding)
             for k, v in batch.items()}
    with self.tracing_scope():
      return self.jitted_steps[step].lower(self.abstract_state, batch)

  def place_state(self, state):
    """Places a state that every process holds whole (e.g. in tests)."""
    # From a host copy: the steps donate their state, the caller keeps theirs.
    return jax.device_put(jax.device_get(state), self.state_shardings)

  def to_checkpoint(self, state):
    """See `Strategy.to_checkpoint`: the state as it is."""
    return state

  def checkpoint_target(self):
    """See `Strategy.checkpoint_target`: `abstract_state`."""
    return self.abstract_state

  def from_checkpoint(self, restored):
    """See `Strategy.from_checkpoint`: the restored state as it is."""
    return restored

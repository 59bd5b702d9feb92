"""Data parallelism with `jax.pmap`: the state replicated on every local device.

Batches are reshaped to [local_devices, per_device_batch, ...] and placed on
the devices ahead of time; the shared steps run under `pmap` with the state
donated and reductions over the named axis (which spans all processes).
"""

import functools
from typing import Iterable, Iterator

import jax
import numpy as np
from flax import jax_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from recipes.core import steps
from recipes.core.state_spec import StateSpec
from recipes.parallel.data_parallel import DataParallel

AXIS = 'batch'


class PmapStrategy(DataParallel):
  """Places state and batches for `jax.pmap` and runs the shared steps.

  Args:
    spec: the state to train (recipes/core/state_spec.py).
    devices: the local devices to use (default: all of them).
    prefetch: how many batches are placed on the devices ahead.
  """

  name = 'pmap'
  batch_axis = AXIS

  def __init__(self, spec: StateSpec, devices=None, prefetch: int = 2):
    self.devices = list(devices) if devices else jax.local_devices()
    self._mesh = Mesh(np.array(self.devices), (AXIS,))  # Local devices.
    self.prefetch = prefetch
    self.spec = spec
    self.abstract_state = spec.abstract
    self.placement = (f'replicated on each of {len(self.devices)} local '
                      f'devices ({jax.device_count()} in all)')
    # All devices (the default) is what spans several processes.
    pmap_devices = None if devices is None else self.devices
    self.train_step = jax.pmap(
        functools.partial(steps.train_step, axis_name=AXIS, seed=spec.seed),
        axis_name=AXIS, donate_argnums=(0,), devices=pmap_devices)
    self.eval_step = jax.pmap(
        functools.partial(steps.eval_step, axis_name=AXIS), axis_name=AXIS,
        devices=pmap_devices)
    # Each device's own copy without the stacking axis, as one local array
    # replicated over the devices: one program for the whole state (a
    # reshape of each array apart compiled a program per array shape and
    # device, about 0.5 s at a run's first save). The copies are identical,
    # so no device needs another's.
    self._one_copy = jax.jit(jax.shard_map(
        lambda tree: jax.tree.map(lambda x: x[0], tree),
        mesh=self._mesh, in_specs=PartitionSpec(AXIS),
        out_specs=PartitionSpec(), check_vma=False))

  def create_state(self, rng: jax.Array):
    """See `Strategy.create_state`: a copy on each local device."""
    return self.place_state(self.spec.create_state(rng))

  def place_state(self, state):
    """Copies a state that every process holds whole onto each device.

    From the host: flax's `jax_utils.replicate` stacks each array on its
    device, which compiles a program per array shape (seconds at start).
    The sharding is the one pmap gives the state it returns (its axis name
    over the local devices): with any other, the first step's program would
    not serve the second, which would compile the step again."""
    sharding = NamedSharding(self._mesh, PartitionSpec(AXIS))
    copies = len(self.devices)

    def replicate(x):
      x = np.asarray(x)
      return jax.device_put(np.broadcast_to(x, (copies, *x.shape)), sharding)

    return jax.tree.map(replicate, state)

  @staticmethod
  def to_host(tree):
    """A numpy copy of the first replica (all replicas are identical)."""
    # `x[0]` would gather across all processes; the local shard is enough.
    return jax.tree.map(lambda x: np.asarray(x.addressable_shards[0].data)[0],
                        tree)

  # Checkpoints hold one copy of the state as global arrays, replicated over
  # every device of every process, so that all processes write them together
  # and any strategy or device count can read them back.

  @staticmethod
  def _replicated_everywhere():
    return NamedSharding(Mesh(np.array(jax.devices()), ('devices',)),
                         PartitionSpec())

  def to_checkpoint(self, state):
    """See `Strategy.to_checkpoint`: one copy, replicated everywhere."""
    sharding = self._replicated_everywhere()
    return jax.tree.map(
        lambda x: jax.make_array_from_single_device_arrays(
            x.shape, sharding, [s.data for s in x.addressable_shards]),
        self._one_copy(state))

  def checkpoint_target(self):
    """See `Strategy.checkpoint_target`: one copy's shapes."""
    sharding = self._replicated_everywhere()
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
        self.abstract_state)

  def from_checkpoint(self, restored):
    """See `Strategy.from_checkpoint`: a copy on each local device."""
    return self.place_state(
        jax.tree.map(lambda x: x.addressable_shards[0].data, restored))

  def lower(self, step: str, batch: dict) -> jax.stages.Lowered:
    """See `Strategy.lower`: a copy of the state and a share of the batch
    for each device, stacked."""
    n = len(self.devices)
    state = jax.tree.map(
        lambda a: jax.ShapeDtypeStruct((n, *a.shape), a.dtype),
        self.abstract_state)
    batch = {k: jax.ShapeDtypeStruct((n, v.shape[0] // n, *v.shape[1:]),
                                     v.dtype) for k, v in batch.items()}
    return {'train': self.train_step, 'eval': self.eval_step}[step].lower(
        state, batch)

  def place_batches(self, batches: Iterable[dict]) -> Iterator[dict]:
    """See `Strategy.place_batches`: each batch split [devices, share]."""

    def split(x):
      return np.reshape(x, (len(self.devices), -1, *x.shape[1:]))

    local = (jax.tree.map(split, batch) for batch in batches)
    return jax_utils.prefetch_to_device(local, self.prefetch, self.devices)

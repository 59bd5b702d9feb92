"""Data parallelism with `jax.shard_map`: the modern form of the pmap recipe.

The state is one global array per leaf, replicated over a one-axis mesh of
every device of every process; each batch is a global array split over that
axis. The shared steps run per device under `shard_map` inside `jax.jit`, with
the same named-axis reductions as under pmap (`lax.pmean` over 'batch'), so
both compute the same numbers. Unlike pmap, batches and checkpoints need no
reshaping: they are the global arrays the sharded recipe uses.
"""

import functools
from typing import Iterable

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from recipes.core import steps
from recipes.core.state_spec import StateSpec
from recipes.parallel import global_arrays
from recipes.parallel.data_parallel import DataParallel

AXIS = 'batch'


class ShardMapStrategy(DataParallel, global_arrays.GlobalState):
  """Replicates the state over a ('batch',) mesh and runs the shared steps
  per device under `jax.shard_map`.

  Args:
    spec: the state to train (recipes/core/state_spec.py).
    devices: the devices of the mesh (default: all, of every process).
    prefetch: how many batches are placed on the devices ahead.
  """

  name = 'shard_map'
  batch_axis = AXIS

  def __init__(self, spec: StateSpec, devices: Iterable | None = None,
               prefetch: int = 2):
    devices = jax.devices() if devices is None else list(devices)
    self.mesh = Mesh(np.array(devices), (AXIS,))
    self.spec = spec
    abstract = spec.abstract
    replicated = NamedSharding(self.mesh, PartitionSpec())
    self.state_shardings = jax.tree.map(lambda _: replicated, abstract)
    self.abstract_state = jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=replicated),
        abstract)
    self.placement = (f'replicated on each of the {self.mesh.size} devices '
                      f'of mesh axis {AXIS!r}')
    self.place_batches = global_arrays.BatchPlacer(
        NamedSharding(self.mesh, PartitionSpec(AXIS)),
        'run as many devices in each process', prefetch)

    def per_device(step, out_specs):
      # The state, and what the step reduces over all devices, is the same
      # on each device; the batch is split. The step spells its reductions
      # out as under pmap, which JAX cannot check (CLU's metrics gather
      # across devices), hence check_vma=False.
      return jax.shard_map(step, mesh=self.mesh,
                           in_specs=(PartitionSpec(), PartitionSpec(AXIS)),
                           out_specs=out_specs, check_vma=False)

    self.train_step = jax.jit(
        per_device(functools.partial(steps.train_step, axis_name=AXIS,
                                     seed=spec.seed),
                   (PartitionSpec(), PartitionSpec())),
        donate_argnums=(0,))
    self.eval_step = jax.jit(per_device(
        functools.partial(steps.eval_step, axis_name=AXIS), PartitionSpec()))
    self.jitted_steps = {'train': self.train_step, 'eval': self.eval_step}

  def create_state(self, rng: jax.Array):
    """See `Strategy.create_state`: replicated over the mesh."""
    return self.spec.create_state(rng, shardings=self.state_shardings)

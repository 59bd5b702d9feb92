"""Sharded training with `jax.jit` on a ('data', 'fsdp', 'tensor') device mesh.

Every array is global: each parameter and its optimizer state are split over
the mesh by the partition rules (recipes/parallel/partition_rules.py), the
batch over ('data', 'fsdp'), and the shared steps run under `jax.jit` with these
shardings; XLA inserts the cross-device reductions that pmap spells out.

    data    plain data parallelism: a copy of the state per index
    fsdp    the batch is split, and so are parameters and optimizer state
            (gathered where used): per-device memory falls by its size
    tensor  the batch is not split; large matrices are (a ViT's MLP hidden
            features and attention heads)

Each process feeds only its own rows of every global batch
(recipes/parallel/global_arrays.py).
"""

import contextlib
import functools
import math
from typing import Iterable

import flax.linen as nn
import jax
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from recipes.core import steps, train_state
from recipes.core.state_spec import StateSpec
from recipes.parallel import global_arrays
from recipes.parallel import mesh as meshes
from recipes.parallel import partition_rules
from recipes.parallel.partition_rules import BATCH_AXES


class ShardedStrategy(global_arrays.GlobalState):
  """Places state and batches on a mesh and runs the shared steps under jit.

  The state's shardings follow from the parameters' shapes and logical
  names and from the rules (recipes/parallel/partition_rules.py).

  Args:
    spec: the state to train (recipes/core/state_spec.py).
    mesh: a ('data', 'fsdp', 'tensor') mesh (recipes/parallel/mesh.py).
    rules: Flax logical-axis rules, e.g.
      `partition_rules.default_rules(model_name)`.
    path_rules: regex rules on parameter paths, checked first.
    prefetch: how many batches are placed on the devices ahead.
  """

  name = 'sharded'
  batch_axis = None

  def __init__(self, spec: StateSpec, mesh: Mesh, rules: Iterable = (),
               path_rules: Iterable = (), prefetch: int = 2):
    self.mesh = mesh
    self.rules = partition_rules.logical_rules(rules)
    self.path_rules = partition_rules.path_rules(path_rules)
    self.spec = spec

    abstract = spec.abstract
    params = partition_rules.param_specs(
        abstract.params, spec.logical_names, self.rules, self.path_rules,
        dict(mesh.shape))
    # Optimizer state shaped like the parameters (momentum, Adam's moments)
    # is split like them; counts and other scalars are replicated.
    opt_state = optax.tree_map_params(
        spec.tx, lambda _, spec: spec, abstract.opt_state, params,
        transform_non_params=lambda _: PartitionSpec(),
        is_leaf=lambda x: isinstance(x, PartitionSpec))
    # The parameters' average is split like them. The rest (step,
    # batch-norm statistics, loss scale) is small and carries no names:
    # replicated.
    specs = jax.tree.map(lambda _: PartitionSpec(), abstract).replace(
        params=params, opt_state=opt_state,
        ema_params=None if abstract.ema_params is None else params)
    self.state_shardings = jax.tree.map(
        lambda spec: NamedSharding(mesh, spec), specs,
        is_leaf=lambda x: isinstance(x, PartitionSpec))
    # Shapes carrying their shardings: a target to restore checkpoints into.
    self.abstract_state = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
        abstract, self.state_shardings)

    self.batch_sharding = NamedSharding(mesh, PartitionSpec(BATCH_AXES))
    self.replicated = NamedSharding(mesh, PartitionSpec())
    train_step = jax.jit(
        functools.partial(steps.train_step, axis_name=None, seed=spec.seed),
        in_shardings=(self.state_shardings, self.batch_sharding),
        out_shardings=(self.state_shardings, self.replicated),
        donate_argnums=(0,))
    eval_step = jax.jit(
        functools.partial(steps.eval_step, axis_name=None),
        in_shardings=(self.state_shardings, self.batch_sharding),
        out_shardings=self.replicated)
    self.jitted_steps = {'train': train_step, 'eval': eval_step}
    self.place_batches = global_arrays.BatchPlacer(
        self.batch_sharding, 'make mesh.data * mesh.fsdp a multiple of the '
        'number of processes', prefetch)

  @classmethod
  def from_settings(cls, spec: StateSpec, settings,
                    devices=None) -> 'ShardedStrategy':
    """The mesh of `settings.mesh` over `devices` (default: all), with the
    settings' rules."""
    return cls(spec, meshes.make_mesh(settings.mesh, devices),
               rules=settings.rules, path_rules=settings.path_rules)

  @staticmethod
  def batch_divisor(settings, num_devices: int) -> tuple[int, str]:
    """See `Strategy.batch_divisor`: the batch shards (and processes)."""
    data, fsdp, _ = meshes.mesh_shape(settings.mesh, num_devices)
    # Each process loads its own rows, so they must also divide evenly.
    return (math.lcm(data * fsdp, jax.process_count()),
            'batch shards (mesh.data x mesh.fsdp)')

  @contextlib.contextmanager
  def tracing_scope(self):
    # The models' logical constraints on activations need both the mesh and
    # the rules when the steps are traced.
    with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
      yield

  def describe(self) -> str:
    """The mesh and the per-parameter table, for the log."""
    params = self.abstract_state.params
    opt_bytes = partition_rules.bytes_per_device(
        self.abstract_state.opt_state, self.state_shardings.opt_state)
    return (f'{meshes.describe_mesh(self.mesh)}\n'
            f'{partition_rules.table(params, self.state_shardings.params)}\n'
            f'optimizer state: {opt_bytes:,} bytes per device')

  def create_state(self, rng: jax.Array) -> train_state.TrainState:
    """The initial state, each array created directly in its shards."""
    with self.tracing_scope():
      return self.spec.create_state(rng, shardings=self.state_shardings)

  def train_step(self, state, batch):
    """See `Strategy.train_step`."""
    with self.tracing_scope():
      return self.jitted_steps['train'](state, batch)

  def eval_step(self, state, batch):
    """See `Strategy.eval_step`."""
    with self.tracing_scope():
      return self.jitted_steps['eval'](state, batch)


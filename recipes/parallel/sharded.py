"""Sharded training with `jax.jit` on a ('data', 'fsdp', 'tensor') device mesh.

Every array is global: each parameter and its optimizer state are split over
the mesh by the partition rules (recipes/parallel/partition_rules.py), the batch over
('data', 'fsdp'), and the shared steps run under `jax.jit` with these
shardings; XLA inserts the cross-device reductions that pmap spells out.

    data    plain data parallelism: a copy of the state per index
    fsdp    the batch is split, and so are parameters and optimizer state
            (gathered where used): per-device memory falls by its size
    tensor  the batch is not split; large matrices are (a ViT's MLP hidden
            features and attention heads)

Each process feeds only its own rows of every global batch (see
recipes/data/in_memory.py) and `jax.make_array_from_process_local_data`
assembles the global array, so the same code runs on one host and on a pod.
"""

import collections
import contextlib
import functools
import math
from typing import Iterable, Iterator, Mapping

import flax.linen as nn
import jax
import numpy as np
import optax
from jax.experimental import multihost_utils
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

import zoo
from recipes import steps, train_state
from recipes.parallel import partition_rules
from recipes.parallel.distributed import process_slice
from recipes.errors import UserError
from recipes.parallel.partition_rules import BATCH_AXES, MESH_AXES


def mesh_shape(sizes: Mapping[str, int], num_devices: int) -> tuple[int, ...]:
  """Axis sizes in the order of MESH_AXES; one size -1 takes what is left."""
  given = {axis: int(sizes[axis]) for axis in MESH_AXES}
  flag = ' '.join(f'--config.mesh.{a}={s}' for a, s in given.items())
  free = [a for a, s in given.items() if s == -1]
  if len(free) > 1 or any(s == 0 or s < -1 for s in given.values()):
    raise UserError(f'bad mesh {flag}: give each axis a positive size, and '
                    'at most one of them -1 (the devices left over).')
  fixed = math.prod(s for s in given.values() if s != -1)
  if free:
    if num_devices % fixed:
      raise UserError(f'mesh {flag} cannot use the {num_devices} devices: '
                      f'the fixed sizes multiply to {fixed}, which does not '
                      f'divide {num_devices}.')
    given[free[0]] = num_devices // fixed
  elif fixed != num_devices:
    raise UserError(f'mesh {flag} has {fixed} devices but there are '
                    f'{num_devices}; make the sizes multiply to {num_devices}'
                    ', or set one of them to -1.')
  return tuple(given[a] for a in MESH_AXES)


def make_mesh(sizes: Mapping[str, int], devices=None) -> Mesh:
  """The ('data', 'fsdp', 'tensor') mesh over `devices` (default: all)."""
  devices = jax.devices() if devices is None else list(devices)
  # Auto axes: Flax Linen's logical partitioning does not work with the
  # Explicit axes jax.make_mesh gives by default.
  return jax.make_mesh(mesh_shape(sizes, len(devices)), MESH_AXES,
                       axis_types=(AxisType.Auto,) * len(MESH_AXES),
                       devices=devices)


def describe_mesh(mesh: Mesh) -> str:
  ids = np.vectorize(lambda d: d.id)(mesh.devices)
  shape = ', '.join(f'{a}={s}' for a, s in mesh.shape.items())
  return (f'mesh {shape}, axis names {mesh.axis_names}, device ids in mesh '
          f'order (data, fsdp, tensor):\n{ids}')


class ShardedStrategy:
  """Places state and batches on a mesh and runs the shared steps under jit.

  Made for one model and optimizer: the state's shardings follow from the
  parameters' shapes and logical names and from the rules. `rules` are Flax
  logical-axis rules (e.g. `zoo.default_rules(name)`; `from_config` picks
  them), `path_rules` regex rules on parameter paths; see
  recipes/parallel/partition_rules.py.
  """

  name = 'sharded'

  def __init__(self, mesh: Mesh, model: nn.Module,
               tx: optax.GradientTransformation, image_shape: tuple[int, ...],
               rules: Iterable = (), path_rules: Iterable = (),
               prefetch: int = 2, **state_options):
    self.mesh = mesh
    self.rules = partition_rules.logical_rules(rules)
    self.path_rules = partition_rules.path_rules(path_rules)
    self.prefetch = prefetch
    self._init = functools.partial(train_state.create, model, tx, image_shape,
                                   **state_options)

    abstract = train_state.abstract(model, tx, image_shape, **state_options)
    params = partition_rules.param_specs(
        abstract.params, train_state.logical_names(model, image_shape),
        self.rules, self.path_rules, dict(mesh.shape))
    # Optimizer state shaped like the parameters (momentum, Adam's moments)
    # is split like them; counts and other scalars are replicated.
    opt_state = optax.tree_map_params(
        tx, lambda _, spec: spec, abstract.opt_state, params,
        transform_non_params=lambda _: PartitionSpec(),
        is_leaf=lambda x: isinstance(x, PartitionSpec))
    # The rest (step, batch-norm statistics, loss scale) is small and
    # carries no names: replicated.
    specs = jax.tree.map(lambda _: PartitionSpec(), abstract).replace(
        params=params, opt_state=opt_state)
    self.state_shardings = jax.tree.map(
        lambda spec: NamedSharding(mesh, spec), specs,
        is_leaf=lambda x: isinstance(x, PartitionSpec))
    # Shapes carrying their shardings: a target to restore checkpoints into.
    self.abstract_state = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
        abstract, self.state_shardings)

    self.batch_sharding = NamedSharding(mesh, PartitionSpec(BATCH_AXES))
    self.replicated = NamedSharding(mesh, PartitionSpec())
    self._train_step = jax.jit(
        functools.partial(steps.train_step, axis_name=None),
        in_shardings=(self.state_shardings, self.batch_sharding),
        out_shardings=(self.state_shardings, self.replicated),
        donate_argnums=(0,))
    self._eval_step = jax.jit(
        functools.partial(steps.eval_step, axis_name=None),
        in_shardings=(self.state_shardings, self.batch_sharding),
        out_shardings=self.replicated)
    self._checked_batch_sizes = set()

  @classmethod
  def from_config(cls, config, model: nn.Module,
                  tx: optax.GradientTransformation,
                  image_shape: tuple[int, ...]) -> 'ShardedStrategy':
    """The mesh from `config.mesh`, rules from `config.partition_rules`
    (default: the model's) and `config.path_rules`."""
    return cls(make_mesh(config.mesh), model, tx, image_shape,
               rules=partition_rules.logical_rules(
                   config.partition_rules, zoo.default_rules(config.model)),
               path_rules=config.path_rules,
               **train_state.options(config))

  @contextlib.contextmanager
  def _scope(self):
    # The models' logical constraints on activations need both the mesh and
    # the rules when the steps are traced.
    with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
      yield

  def describe(self) -> str:
    """The mesh and the per-parameter table, for the log."""
    params = self.abstract_state.params
    opt_bytes = partition_rules.bytes_per_device(
        self.abstract_state.opt_state, self.state_shardings.opt_state)
    return (f'{describe_mesh(self.mesh)}\n'
            f'{partition_rules.table(params, self.state_shardings.params)}\n'
            f'optimizer state: {opt_bytes:,} bytes per device')

  def create_state(self, rng: jax.Array) -> train_state.TrainState:
    """The initial state, each array created directly in its shards."""
    with self._scope():
      return self._init(rng, shardings=self.state_shardings)

  def place_state(self, state: train_state.TrainState):
    """Splits a state that every process holds whole (e.g. in tests)."""
    return jax.device_put(state, self.state_shardings)

  # Checkpoints keep the state's global arrays as they are (see
  # recipes/checkpoints.py); they restore into this strategy's shardings.

  def to_checkpoint(self, state):
    return state

  def checkpoint_target(self, state):
    del state  # The shardings come from the mesh and rules, not the state.
    return self.abstract_state

  def from_checkpoint(self, restored):
    return restored

  def train_step(self, state, batch):
    with self._scope():
      return self._train_step(state, batch)

  def eval_step(self, state, batch):
    with self._scope():
      return self._eval_step(state, batch)

  @staticmethod
  def to_host(tree):
    """A numpy copy of each (global) array, gathered from all processes."""

    def fetch(x):
      if x.is_fully_replicated:
        return np.asarray(x.addressable_shards[0].data)
      return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(fetch, tree)

  def _check_rows(self, global_size: int):
    """This process's rows of the global batch must be the ones it loaded."""
    if global_size in self._checked_batch_sizes:
      return
    rows = set()
    for index in self.batch_sharding.addressable_devices_indices_map(
        (global_size,)).values():
      rows.update(range(*index[0].indices(global_size)))
    start, stop = process_slice(global_size)
    if rows != set(range(start, stop)):
      raise UserError(
          f'with {jax.process_count()} processes the mesh must split each '
          'batch between the processes, each holding its own rows: make '
          'mesh.data * mesh.fsdp a multiple of the number of processes '
          f'(mesh: {dict(self.mesh.shape)}).')
    self._checked_batch_sizes.add(global_size)

  def _place(self, batch: dict) -> dict:
    global_size = len(batch['label']) * jax.process_count()
    self._check_rows(global_size)
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(
            self.batch_sharding, x, (global_size, *x.shape[1:])), batch)

  def place_batches(self, batches: Iterable[dict]) -> Iterator[dict]:
    """Global batches from this process's slices, `prefetch` steps ahead."""
    queue = collections.deque()
    for batch in batches:
      queue.append(self._place(batch))
      if len(queue) > self.prefetch:
        yield queue.popleft()
    while queue:
      yield queue.popleft()

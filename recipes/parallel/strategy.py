"""The `Strategy` interface and the registry of strategies by name.

A strategy is everything that differs between ways of running the shared step
(recipes/core/steps.py) on many devices: where the state lives and how it is
created, how batches are placed, what the global batch must be divisible by,
the compiled steps, and how the state goes to and from a checkpoint. The loop,
the benchmark and the tests make one with `create(spec, settings)` and use
only this interface.

To add a strategy: write a class with these members in its own module under
recipes/parallel/ (recipes/parallel/shard_map.py is the shortest to copy) and
add it to STRATEGIES.
"""

import dataclasses
from typing import Any, Iterable, Iterator, Mapping, Protocol

import jax

from recipes.core.state_spec import StateSpec
from recipes.core.train_state import TrainState
from recipes.parallel import partition_rules
from recipes.parallel.pmap import PmapStrategy
from recipes.parallel.shard_map import ShardMapStrategy
from recipes.parallel.sharded import ShardedStrategy
from recipes.runtime.errors import UserError


@dataclasses.dataclass(frozen=True)
class ParallelSettings:
  """How a run is spread over the devices (the config's parallel fields).

  Attributes:
    strategy: a name from STRATEGIES.
    mesh: the sharded strategy's axis sizes {'data', 'fsdp', 'tensor'}; one
      may be -1 (the devices left over).
    rules: the sharded strategy's Flax logical-axis rules, already resolved
      (recipes/parallel/partition_rules.py `logical_rules`).
    path_rules: the sharded strategy's regex rules on parameter paths.
  """

  strategy: str = 'pmap'
  mesh: Mapping[str, int] = dataclasses.field(
      default_factory=lambda: dict(data=-1, fsdp=1, tensor=1))
  rules: tuple = ()
  path_rules: tuple = ()

  @classmethod
  def for_model(cls, model: str, strategy: str, mesh: Mapping[str, int],
                rules: Iterable = (),
                path_rules: Iterable = ()) -> 'ParallelSettings':
    """The settings for zoo model `model`, its logical rules resolved.

    Args:
      model: a zoo model name (or 'package.module:ClassName'), whose
        family gives the default logical rules.
      strategy: a name from STRATEGIES.
      mesh: the axis sizes {'data', 'fsdp', 'tensor'}.
      rules: the user's logical rules; () = the family's defaults.
      path_rules: regex rules on parameter paths.

    Returns:
      The settings, the logical rules checked.

    Raises:
      UserError: for a malformed logical rule.
    """
    return cls(strategy=strategy, mesh=dict(mesh),
               rules=partition_rules.logical_rules(
                   rules, partition_rules.default_rules(model)),
               path_rules=tuple(path_rules))


class Strategy(Protocol):
  """What the loop, the benchmark and the tests use of a strategy."""

  name: str
  # The mapped axis the step runs under, one device's share of the batch at
  # a time (pmap, shard_map); None where the step sees the global batch.
  batch_axis: str | None

  @classmethod
  def from_settings(cls, spec: StateSpec, settings: ParallelSettings,
                    devices: Iterable | None = None) -> 'Strategy':
    """The strategy for the state of `spec`, set up as `settings` say.

    Args:
      spec: the state to train (recipes/core/state_spec.py).
      settings: the mesh and rules (used by the sharded strategy only).
      devices: the devices to use; default: the strategy's (all of them).

    Returns:
      The strategy.

    Raises:
      UserError: where the settings do not fit the devices or the model
        (a bad mesh, a rule that cannot shard a parameter).
    """

  @staticmethod
  def batch_divisor(settings: ParallelSettings,
                    num_devices: int) -> tuple[int, str]:
    """What every global batch must be divisible by, and what to call it
    in an error message (known before the model or data exist).

    Args:
      settings: the strategy's settings (the sharded strategy's mesh).
      num_devices: how many devices the run uses, over all processes.

    Returns:
      (the divisor, a plural noun for what it counts, e.g. 'devices').

    Raises:
      UserError: for a mesh that does not fit `num_devices`.
    """

  def describe(self) -> str:
    """How the state is placed, for the log.

    Returns:
      Lines of text (for the sharded strategy, the mesh and a table of the
      parameters' shardings).
    """

  def create_state(self, rng: jax.Array) -> TrainState:
    """The initial state, already placed.

    Args:
      rng: the initialization key (the same on every process).

    Returns:
      The state, placed as the steps take it.
    """

  def place_state(self, state: TrainState) -> TrainState:
    """Places a state that every process holds whole.

    Args:
      state: a whole TrainState, the same on every process (e.g. on the
        host); it is left as it is.

    Returns:
      The state, placed as the steps take it.
    """

  def place_batches(self, batches: Iterable[dict]) -> Iterator[dict]:
    """This process's batches, placed for the steps (a few ahead).

    Args:
      batches: this process's rows of each global batch, numpy dicts
        (recipes/data/pipeline/dataset.py).

    Returns:
      An iterator of the batches as the steps take them.
    """

  def train_step(self, state, batch) -> tuple[Any, Any]:
    """The shared train step: (new state, metrics).

    Args:
      state: the placed state; donated, so not to be used again.
      batch: a batch from `place_batches`.

    Returns:
      (the new state, the step's TrainMetrics, still on the devices).
    """

  def eval_step(self, state, batch) -> Any:
    """The shared eval step: metrics.

    Args:
      state: the placed state; not donated.
      batch: a batch from `place_batches`, with a `mask`.

    Returns:
      The batch's EvalMetrics, still on the devices.
    """

  def lower(self, step: str, batch: Mapping[str, jax.ShapeDtypeStruct]
            ) -> jax.stages.Lowered:
    """The train or eval step, lowered for the abstract state and a global
    batch of these shapes: nothing is allocated, so the devices may be a TPU
    topology's compile-only ones (recipes/compile.py).

    Args:
      step: 'train' or 'eval'.
      batch: the global batch's shapes and dtypes, without shardings
        (recipes/data/pipeline/dataset.py `batch_shapes`).

    Returns:
      The lowered step, to `.compile()`.
    """

  def to_host(self, tree) -> Any:
    """Metrics or state as numpy, one copy.

    Args:
      tree: metrics or a state as the steps return them.

    Returns:
      The same tree of numpy arrays, whole on every process.
    """

  def to_checkpoint(self, state) -> Any:
    """The state as global arrays for `checkpoints.save`.

    Args:
      state: the placed state.

    Returns:
      The state with one global array per leaf.
    """

  def checkpoint_target(self) -> Any:
    """Shapes and shardings to restore a checkpoint into, before any state
    exists (a resumed run creates no initial state).

    Returns:
      The state's tree of jax.ShapeDtypeStruct with shardings.
    """

  def from_checkpoint(self, restored) -> Any:
    """A restored state, placed for the steps.

    Args:
      restored: the state as restored into `checkpoint_target`.

    Returns:
      The state, placed as the steps take it.
    """


STRATEGIES: dict[str, type[Strategy]] = {
    s.name: s for s in (PmapStrategy, ShardedStrategy, ShardMapStrategy)}


def get(name: str) -> type[Strategy]:
  """The strategy class registered as `name`.

  Args:
    name: a key of STRATEGIES (config.strategy).

  Returns:
    The class.

  Raises:
    UserError: for an unknown name.
  """
  try:
    return STRATEGIES[name]
  except KeyError:
    raise UserError(f'unknown strategy {name!r}; choose one of '
                    f'{", ".join(STRATEGIES)}.') from None


def create(spec: StateSpec, settings: ParallelSettings,
           devices: Iterable | None = None) -> Strategy:
  """The strategy that trains the state of `spec`.

  Args:
    spec: the state (recipes/core/state_spec.py).
    settings: which strategy, and its mesh and rules.
    devices: the devices to use; default: the strategy's (all of them).

  Returns:
    The strategy, ready to create or restore the state and run the steps.

  Raises:
    UserError: for an unknown strategy, or settings that do not fit the
      devices or the model.
  """
  return get(settings.strategy).from_settings(spec, settings, devices)


def batch_divisor(settings: ParallelSettings,
                  num_devices: int) -> tuple[int, str]:
  """What every global batch must be divisible by under `settings` on
  `num_devices` devices, and what to call it in an error message.

  Args:
    settings: which strategy, and its mesh.
    num_devices: how many devices the run uses, over all processes.

  Returns:
    (the divisor, a plural noun for what it counts, e.g. 'devices').

  Raises:
    UserError: for an unknown strategy, or a mesh that does not fit.
  """
  return get(settings.strategy).batch_divisor(settings, num_devices)

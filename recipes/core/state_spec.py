"""What a train state is made of, known before any state exists.

A `StateSpec` is made once per run (recipes/experiment.py `build`; the bench
makes its own the same way) and every strategy is built from it
(recipes/parallel/strategy.py `create`): how to initialize the state, its
shapes, the logical axis names of its parameters, the optimizer and the seed.
"""

import dataclasses
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import dynamic_scale as dynamic_scale_lib

from recipes.core.train_state import TrainState, UpdateRules


@dataclasses.dataclass(frozen=True)
class StateSpec:
  """How to make the initial train state, and what it will look like.

  Attributes:
    init: rng -> the initial TrainState, on the default device (a strategy
      compiles it with its own output shardings).
    abstract: the state's shapes and dtypes (jax.ShapeDtypeStruct leaves).
    logical_names: the params tree with a PartitionSpec of logical axis
      names per leaf (empty for leaves the model does not annotate).
    tx: the optimizer; the sharded strategy splits its state like the
      parameters it follows.
    seed: the run's seed: the initial state's and each step's randomness.
  """

  init: Callable[[jax.Array], TrainState]
  abstract: TrainState
  logical_names: Any
  tx: optax.GradientTransformation
  seed: int = 0

  @property
  def update_rules(self) -> UpdateRules:
    """What the shared step does besides the optimizer's update."""
    return self.abstract.update_rules

  def create_state(self, rng: jax.Array | None = None,
                   shardings: Any = None) -> TrainState:
    """The initial state.

    Args:
      rng: the initialization key; default: the one from `seed`.
      shardings: a TrainState of shardings (as `abstract` is of shapes):
        each array then comes out of the initialization already split
        across the devices, and no device ever holds the whole state.
        Default: the default device.

    Returns:
      The initial TrainState.
    """
    rng = jax.random.PRNGKey(self.seed) if rng is None else rng
    return jax.jit(self.init, out_shardings=shardings,
                   compiler_options=_init_compiler_options())(rng)


# The initial state's program is mostly random-number code, one stretch per
# array, that runs once. XLA:CPU compiles it with LLVM's -O3 by default;
# -O2 compiles it 2-3x quicker (a CNN 1.1 -> 0.4 s, a ResNet-20 3.1 -> 1.2
# s) and gives the same bits (tests/unit/recipes/core/test_state_spec.py
# compares them; at level 0 some differ, and so do a step's at -O2).
_CPU_INIT_OPTIMIZATION_LEVEL = 2


def _init_compiler_options() -> dict[str, Any] | None:
  if jax.default_backend() != 'cpu':
    return None
  return {'xla_backend_optimization_level': _CPU_INIT_OPTIMIZATION_LEVEL}


def make(model: nn.Module, tx: optax.GradientTransformation,
         image_shape: tuple[int, ...], *, seed: int = 0,
         input_dtype=jnp.float32, loss_scaling: bool = False,
         update_rules: UpdateRules = UpdateRules()) -> StateSpec:
  """The spec of the state for training `model` with `tx`.

  Args:
    model: a Linen module taking (images, train=...).
    tx: the optimizer.
    image_shape: the shape of one example, e.g. (28, 28, 1); (seq_len,)
      for a language model.
    seed: see `StateSpec.seed`.
    input_dtype: the examples' dtype: float32 images, int32 token ids.
    loss_scaling: float16 dynamic loss scaling (a flax `DynamicScale` kept
      in the state).
    update_rules: mixing, accumulation, EMA and the rest (the defaults
      change nothing).

  Returns:
    The StateSpec; computing it initializes nothing (shapes only).
  """

  def init(rng):
    variables = model.init(rng, jnp.zeros((1, *image_shape), input_dtype),
                           train=False)
    # Plain arrays: logical-axis annotations are kept in the spec
    # (`logical_names`), not carried in the state.
    variables = nn.meta.unbox(variables)
    params = variables['params']
    state = TrainState.create(
        apply_fn=model.apply, params=params, tx=tx,
        batch_stats=variables.get('batch_stats', {}),
        dynamic_scale=dynamic_scale_lib.DynamicScale() if loss_scaling
        else None,
        ema_params=jax.tree.map(jnp.copy, params) if update_rules.ema_decay
        else None, update_rules=update_rules)
    # A plain int32, as a restored checkpoint's: a weakly typed 0 would
    # make the resumed run's step another program (compiled again, and
    # missed in the compilation cache).
    return state.replace(step=jnp.zeros((), jnp.int32))

  boxed = jax.eval_shape(
      lambda rng: model.init(rng, jnp.zeros((1, *image_shape), input_dtype),
                             train=False), jax.random.PRNGKey(0))
  return StateSpec(init=init,
                   abstract=jax.eval_shape(init, jax.random.PRNGKey(0)),
                   logical_names=nn.get_partition_spec(boxed)['params'],
                   tx=tx, seed=seed)

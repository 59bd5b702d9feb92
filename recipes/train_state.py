"""The train state: parameters, optimizer state, batch-norm statistics, step.

Plus how updates are made: float16 loss scaling (a flax `DynamicScale`) and
whether a non-finite update is skipped instead of applied.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct
from flax.training import dynamic_scale as dynamic_scale_lib
from flax.training import train_state


class TrainState(train_state.TrainState):
  # Mutable model state such as batch-norm statistics; {} for models without.
  batch_stats: Any = None
  # float16 only: the loss scale, saved and restored with the rest.
  dynamic_scale: dynamic_scale_lib.DynamicScale | None = None
  skip_nonfinite: bool = struct.field(pytree_node=False, default=False)

  @property
  def skips_nonfinite_updates(self) -> bool:
    """Whether an update with a non-finite loss or gradient is skipped: when
    asked, and always under float16 loss scaling, which expects overflows."""
    return self.skip_nonfinite or self.dynamic_scale is not None


def _init_fn(model: nn.Module, tx: optax.GradientTransformation,
             image_shape: tuple[int, ...], loss_scaling: bool = False,
             skip_nonfinite: bool = False):
  """rng -> initial TrainState, from the model run on one dummy example."""

  def init(rng):
    variables = model.init(rng, jnp.zeros((1, *image_shape), jnp.float32),
                           train=False)
    # Plain arrays: logical-axis annotations are read from the model when a
    # strategy needs them (`logical_names`), not carried in the state.
    variables = nn.meta.unbox(variables)
    return TrainState.create(
        apply_fn=model.apply, params=variables['params'], tx=tx,
        batch_stats=variables.get('batch_stats', {}),
        dynamic_scale=dynamic_scale_lib.DynamicScale() if loss_scaling
        else None, skip_nonfinite=skip_nonfinite)

  return init


def options(config) -> dict:
  """The update options `create` takes, from the config."""
  return dict(loss_scaling=bool(config.half_precision)
              and config.half_precision_dtype == 'float16',
              skip_nonfinite=config.skip_nonfinite_updates)


def create(model: nn.Module, tx: optax.GradientTransformation,
           image_shape: tuple[int, ...], rng: jax.Array,
           shardings: Any = None, **options) -> TrainState:
  """Initializes the state; on the default device unless `shardings` is given.

  `shardings` (a TrainState of shardings, as `abstract` returns shapes) makes
  each array come out of the initialization already split across the devices:
  no device ever holds the whole state. `options`: see `options(config)`.
  """
  return jax.jit(_init_fn(model, tx, image_shape, **options),
                 out_shardings=shardings)(rng)


def abstract(model: nn.Module, tx: optax.GradientTransformation,
             image_shape: tuple[int, ...], **options) -> TrainState:
  """The state's shapes and dtypes (jax.ShapeDtypeStruct), computing nothing."""
  return jax.eval_shape(_init_fn(model, tx, image_shape, **options),
                        jax.random.PRNGKey(0))


def logical_names(model: nn.Module, image_shape: tuple[int, ...]):
  """The params tree with a PartitionSpec of logical axis names per leaf.

  Leaves the model does not annotate get an empty PartitionSpec.
  """
  variables = jax.eval_shape(
      lambda rng: model.init(rng, jnp.zeros((1, *image_shape), jnp.float32),
                             train=False), jax.random.PRNGKey(0))
  return nn.get_partition_spec(variables)['params']

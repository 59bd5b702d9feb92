"""The train state: parameters, optimizer state, batch-norm statistics, step."""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state


class TrainState(train_state.TrainState):
  # Mutable model state such as batch-norm statistics; {} for models without.
  batch_stats: Any = None


def _init_fn(model: nn.Module, tx: optax.GradientTransformation,
             image_shape: tuple[int, ...]):
  """rng -> initial TrainState, from the model run on one dummy example."""

  def init(rng):
    variables = model.init(rng, jnp.zeros((1, *image_shape), jnp.float32),
                           train=False)
    # Plain arrays: logical-axis annotations are read from the model when a
    # strategy needs them (`logical_names`), not carried in the state.
    variables = nn.meta.unbox(variables)
    return TrainState.create(apply_fn=model.apply, params=variables['params'],
                             tx=tx, batch_stats=variables.get('batch_stats',
                                                              {}))

  return init


def create(model: nn.Module, tx: optax.GradientTransformation,
           image_shape: tuple[int, ...], rng: jax.Array,
           shardings: Any = None) -> TrainState:
  """Initializes the state; on the default device unless `shardings` is given.

  `shardings` (a TrainState of shardings, as `abstract` returns shapes) makes
  each array come out of the initialization already split across the devices:
  no device ever holds the whole state.
  """
  return jax.jit(_init_fn(model, tx, image_shape),
                 out_shardings=shardings)(rng)


def abstract(model: nn.Module, tx: optax.GradientTransformation,
             image_shape: tuple[int, ...]) -> TrainState:
  """The state's shapes and dtypes (jax.ShapeDtypeStruct), computing nothing."""
  return jax.eval_shape(_init_fn(model, tx, image_shape),
                        jax.random.PRNGKey(0))


def logical_names(model: nn.Module, image_shape: tuple[int, ...]):
  """The params tree with a PartitionSpec of logical axis names per leaf.

  Leaves the model does not annotate get an empty PartitionSpec.
  """
  variables = jax.eval_shape(
      lambda rng: model.init(rng, jnp.zeros((1, *image_shape), jnp.float32),
                             train=False), jax.random.PRNGKey(0))
  return nn.get_partition_spec(variables)['params']

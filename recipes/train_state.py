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


def create(model: nn.Module, tx: optax.GradientTransformation,
           image_shape: tuple[int, ...], rng: jax.Array) -> TrainState:
  """Initializes the model on one dummy example, on the default device."""

  @jax.jit
  def init(rng):
    variables = model.init(rng, jnp.zeros((1, *image_shape), jnp.float32),
                           train=False)
    # Plain arrays: logical-axis annotations are read from the model when a
    # strategy needs them, not carried in the state.
    variables = nn.meta.unbox(variables)
    return TrainState.create(apply_fn=model.apply, params=variables['params'],
                             tx=tx, batch_stats=variables.get('batch_stats',
                                                              {}))

  return init(rng)

"""Multi-layer perceptron: flatten, hidden ReLU layers, linear classifier."""

from typing import Any, Sequence

import flax.linen as nn
import jax.numpy as jnp

from zoo.registry import register


@register('mlp')
class MLP(nn.Module):
  """Logits come out in the computation `dtype`; the recipes upcast them."""

  num_classes: int
  hidden_sizes: Sequence[int] = (512, 512)
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train  # No dropout or batch norm: train and eval are the same.
    x = x.reshape((x.shape[0], -1)).astype(self.dtype)
    for width in self.hidden_sizes:
      x = nn.relu(nn.Dense(width, dtype=self.dtype,
                           param_dtype=self.param_dtype)(x))
    return nn.Dense(self.num_classes, dtype=self.dtype,
                    param_dtype=self.param_dtype)(x)

"""Multi-layer perceptron: flatten, hidden ReLU layers, linear classifier."""

from typing import Any, Sequence

import flax.linen as nn
import jax.numpy as jnp

from zoo import layers
from zoo.registry import register


@register('mlp', family='mlp', input_shape=(28, 28, 1),
          test_kwargs=dict(hidden_sizes=(64, 64)),
          reference_params=784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10,
          num_classes=10)
class MLP(nn.Module):
  """Logits come out in the computation `dtype`; the recipes upcast them."""

  num_classes: int
  hidden_sizes: Sequence[int] = (512, 512)
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train  # No dropout or batch norm: train and eval are the same.
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    x = x.reshape((x.shape[0], -1)).astype(self.dtype)
    for width in self.hidden_sizes:
      x = nn.relu(layers.dense(width, ('embed', 'mlp'), **layer)(x))
    return layers.dense(self.num_classes, ('embed', 'classes'), **layer)(x)

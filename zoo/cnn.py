"""The classic small CNN for 28x28 digits and clothes (as in Flax's MNIST example)."""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from zoo import layers
from zoo.registry import register


# Already tiny: tested as it is. Its count is Flax's MNIST example's.
@register('cnn', family='convnet', input_shape=(28, 28, 1), test_kwargs={},
          reference_params=824_458, num_classes=10)
class CNN(nn.Module):
  """conv3x3(32) relu avgpool2, conv3x3(64) relu avgpool2, dense(256) relu, dense.

  Logits come out in the computation `dtype`; the recipes upcast them.
  """

  num_classes: int
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train  # No dropout or batch norm: train and eval are the same.
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    x = x.astype(self.dtype)
    for features in (32, 64):
      x = layers.conv(features, (3, 3), padding='SAME', **layer)(x)
      x = nn.avg_pool(nn.relu(x), (2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(layers.dense(256, ('embed', 'mlp'), **layer)(x))
    return layers.dense(self.num_classes, ('embed', 'classes'), **layer)(x)

"""Wide ResNet (Zagoruyko & Komodakis 2016) for 32x32 images: pre-activation blocks.

WRN-d-k has three stages of (d - 4) / 6 blocks, 16k, 32k and 64k channels
wide. Each block is BN-ReLU-conv3x3-BN-ReLU-conv3x3; where the shape changes,
the shortcut is a 1x1 conv of the pre-activated input. No dropout.
"""

import functools
from typing import Any, Callable

import flax.linen as nn
import jax.numpy as jnp

from zoo import layers
from zoo.partitioning import IMAGE
from zoo.registry import register


class PreActBlock(nn.Module):
  features: int
  strides: int
  conv: Callable[..., nn.Module]
  norm: Callable[..., nn.Module]

  @nn.compact
  def __call__(self, x):
    out = nn.relu(self.norm()(x))
    shortcut = x
    if x.shape[-1] != self.features or self.strides != 1:
      shortcut = self.conv(self.features, (1, 1), strides=self.strides,
                           name='proj_conv')(out)
    y = self.conv(self.features, (3, 3), strides=self.strides, padding=1)(out)
    y = nn.relu(self.norm()(y))
    y = self.conv(self.features, (3, 3), padding=1)(y)
    return shortcut + y


# The paper gives 36.5M parameters (10 classes).
@register('wrn28_10', family='convnet', input_shape=(32, 32, 3),
          test_kwargs=dict(depth=10, widen_factor=1),
          reference_params=36.5e6, reference_params_rtol=0.01,
          num_classes=10, depth=28, widen_factor=10)
class WideResNet(nn.Module):
  """Call with `train=True` and `mutable=['batch_stats']` to use and update
  the batch statistics. Logits come out in the computation `dtype`; the
  recipes upcast them."""

  num_classes: int
  depth: int = 28
  widen_factor: int = 10
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = False):
    if (self.depth - 4) % 6:
      raise ValueError(f'WRN depth must be 6n + 4, got {self.depth}')
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    conv = functools.partial(layers.conv, use_bias=False,
                             kernel_init=layers.he_normal, **layer)
    norm = functools.partial(layers.batch_norm,
                             use_running_average=not train, **layer)
    x = conv(16, (3, 3), padding=1)(x.astype(self.dtype))
    for i in range(3):
      for j in range((self.depth - 4) // 6):
        x = PreActBlock(16 * self.widen_factor * 2**i,
                        strides=2 if i > 0 and j == 0 else 1,
                        conv=conv, norm=norm)(x)
        x = nn.with_logical_constraint(x, IMAGE)
    x = nn.relu(norm()(x))
    x = jnp.mean(x, axis=(1, 2))
    return layers.dense(self.num_classes, ('embed', 'classes'), **layer)(x)

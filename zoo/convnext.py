"""ConvNeXt (Liu et al. 2022): a ResNet modernized towards the Swin
Transformer, with layer norm and no batch norm.

One class serves every size; the registrations give ConvNeXt-T, S, B and L
on 224x224 images, as timm and torchvision build them (their state dicts
convert exactly: zoo/convert/timm_convnext.py, torchvision_convnext.py). The
net is fully convolutional, so any input size whose sides are multiples of
32 keeps every stage whole (others are cropped, as in the originals).

A 4x4 stride-4 conv and a layer norm make the stem; four stages follow, each
after the first opening with a layer norm and a 2x2 stride-2 conv that
halves the resolution and widens to the stage's width. A block is a 7x7
depthwise conv, a layer norm, a 4x wide MLP with the exact GELU, and a
learned per-channel layer scale (init `layer_scale_init`) on the residual
branch. The head pools, normalizes and classifies.
"""

from typing import Any, Sequence

import flax.linen as nn
import jax.numpy as jnp
from flax.linen import initializers

from zoo import layers
from zoo.partitioning import IMAGE
from zoo.registry import register

# The original initialization of convs and dense layers (timm, torchvision).
_KERNEL_INIT = initializers.truncated_normal(0.02)


class Block(nn.Module):
  """x + drop_path(gamma * mlp(norm(depthwise_conv(x)))), the width kept."""

  layer_scale_init: float
  dtype: Any
  param_dtype: Any
  drop_path_rate: float = 0.0
  deterministic: bool = True

  @nn.compact
  def __call__(self, x):
    width = x.shape[-1]
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype,
                 kernel_init=_KERNEL_INIT)
    y = layers.conv(width, (7, 7), padding=3, feature_group_count=width,
                    name='conv_dw', **layer)(x)
    y = layers.layer_norm(name='norm', dtype=self.dtype,
                          param_dtype=self.param_dtype)(y)
    y = layers.dense(4 * width, ('embed', 'mlp'), name='fc1', **layer)(y)
    y = nn.gelu(y, approximate=False)
    y = layers.dense(width, ('mlp', 'embed'), name='fc2', **layer)(y)
    gamma = self.param('gamma', layers.named(
        initializers.constant(self.layer_scale_init), ('norm',)), (width,),
                       self.param_dtype)
    y = layers.drop_path(y * gamma.astype(self.dtype), self.drop_path_rate,
                         self.deterministic)
    return nn.with_logical_constraint(x + y, IMAGE)


class Stage(nn.Module):
  """Blocks of `width`, one per drop-path rate; with `downsample`, a layer
  norm and a 2x2 stride-2 conv to `width` first."""

  width: int
  drop_path_rates: Sequence[float]
  downsample: bool
  layer_scale_init: float
  dtype: Any
  param_dtype: Any
  deterministic: bool = True

  @nn.compact
  def __call__(self, x):
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    if self.downsample:
      x = layers.layer_norm(name='downsample_norm', **layer)(x)
      x = layers.conv(self.width, (2, 2), strides=2, padding='VALID',
                      kernel_init=_KERNEL_INIT, name='downsample_conv',
                      **layer)(x)
    for j, rate in enumerate(self.drop_path_rates):
      x = Block(self.layer_scale_init, drop_path_rate=rate,
                deterministic=self.deterministic, name=f'block{j}',
                **layer)(x)
    return x


# Counts as published: timm's and torchvision's (1000 classes, 224x224
# inputs); FLOPs twice the paper's GMACs.
_CONVNEXT = dict(family='convnet', input_shape=(224, 224, 3),
                 test_kwargs=dict(depths=(1, 1, 1, 1), dims=(8, 16, 32, 64)),
                 test_input_shape=(32, 32, 3), num_classes=1000)


@register('convnext_tiny', depths=(3, 3, 9, 3), dims=(96, 192, 384, 768),
          reference_params=28_589_128, reference_gflops=2 * 4.5, **_CONVNEXT)
@register('convnext_small', depths=(3, 3, 27, 3), dims=(96, 192, 384, 768),
          reference_params=50_223_688, reference_gflops=2 * 8.7, **_CONVNEXT)
@register('convnext_base', depths=(3, 3, 27, 3),
          dims=(128, 256, 512, 1024), reference_params=88_591_464,
          reference_gflops=2 * 15.4, **_CONVNEXT)
@register('convnext_large', depths=(3, 3, 27, 3),
          dims=(192, 384, 768, 1536), reference_params=197_767_336,
          reference_gflops=2 * 34.4, **_CONVNEXT)
class ConvNeXt(nn.Module):
  """ConvNeXt; stage i has `depths[i]` blocks of width `dims[i]`.

  `train=True` turns drop path on; it draws from the 'dropout' rng
  collection (`apply(..., rngs={'dropout': key})`). There is no batch norm,
  so no 'batch_stats'. Logits come out in the computation `dtype`; the
  recipes upcast them.

  What the call returns, for images (B, H, W, 3):
    num_classes > 0: the logits (B, num_classes).
    num_classes=0: no classifier; the pooled features after the head's
      layer norm, (B, dims[-1]) (timm's num_classes=0).
    features=True: each stage's output, NHWC, a tuple of 4 (B, H/4, W/4,
      dims[0]), (B, H/8, W/8, dims[1]), (B, H/16, W/16, dims[2]), (B, H/32,
      W/32, dims[3]) (strides 4, 8, 16, 32; sides rounded down), as timm's
      features_only=True gives them; the head is not applied, and its
      parameters are not made (a classifier's variables serve as they
      are).

  Training-recipe options (the defaults are the paper's, timm's and
  torchvision's):
    drop_path_rate: stochastic depth on each block's residual branch, per
      example, rising linearly from 0 at the first block to this at the last
      (the paper: 0.1, 0.4, 0.5, 0.5 for T, S, B, L on ImageNet-1k).
    layer_scale_init: the initial value of every block's layer scale
      `gamma` (Touvron et al. 2021), which multiplies the residual branch
      channel by channel.
  """

  num_classes: int
  depths: Sequence[int]
  dims: Sequence[int]
  drop_path_rate: float = 0.0
  layer_scale_init: float = 1e-6
  features: bool = False
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def __post_init__(self):
    # Checked on creation, so a bad option is one ValueError from zoo.create.
    layers.check_classes(self.num_classes)
    layers.check_rate('drop_path_rate', self.drop_path_rate)
    if len(self.depths) != len(self.dims) or not self.depths:
      raise ValueError(f'depths {tuple(self.depths)} and dims '
                       f'{tuple(self.dims)} must give one depth and one width '
                       'per stage.')
    super().__post_init__()

  @nn.compact
  def __call__(self, x, train: bool = False):
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    x = layers.conv(self.dims[0], (4, 4), strides=4, padding='VALID',
                    kernel_init=_KERNEL_INIT, name='stem_conv',
                    **layer)(x.astype(self.dtype))
    x = layers.layer_norm(name='stem_norm', **layer)(x)
    x = nn.with_logical_constraint(x, IMAGE)
    rates = layers.linear_rates(self.drop_path_rate, sum(self.depths))
    outputs = []
    for i, (depth, width) in enumerate(zip(self.depths, self.dims)):
      x = Stage(width, tuple(rates[:depth]), downsample=i > 0,
                layer_scale_init=self.layer_scale_init,
                deterministic=not train, name=f'stage{i}', **layer)(x)
      rates = rates[depth:]
      outputs.append(x)
    if self.features:
      return tuple(outputs)
    x = layers.layer_norm(name='head_norm', **layer)(jnp.mean(x, axis=(1, 2)))
    return layers.head(self.num_classes, ('embed', 'classes'),
                       kernel_init=_KERNEL_INIT, name='head', **layer)(x)

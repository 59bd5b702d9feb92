"""ResNet v1.5 (He et al. 2015; stride on the bottleneck's 3x3 conv), with batch norm.

One class serves every depth: the stage sizes and the block type pick the
variant. ImageNet nets (224x224) start with a 7x7/2 conv and a 3x3/2 max-pool;
with `small_inputs=True` the stem is one 3x3 conv for 32x32 CIFAR images, as in
the paper's CIFAR nets (three stages of 16, 32, 64 channels). Where a block
changes the shape, the shortcut is a 1x1 conv with batch norm (the paper's
option B; its CIFAR nets used zero padding, option A, with 0.27M parameters
either way).
"""

import functools
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax.numpy as jnp
from flax.linen import initializers

from zoo import layers
from zoo.partitioning import IMAGE
from zoo.registry import register


class _ResidualBlock(nn.Module):
  """What every residual block is built from. `padding` is that of its 3x3
  convs; drop path acts on the residual branch unless `deterministic`."""

  features: int
  strides: int
  conv: Callable[..., nn.Module]
  norm: Callable[..., nn.Module]
  zero_init_last_bn: bool
  padding: Any = 1
  drop_path_rate: float = 0.0
  deterministic: bool = True


class BasicBlock(_ResidualBlock):
  """Two 3x3 convs; used by ResNet-18/34 and the CIFAR nets."""

  @nn.compact
  def __call__(self, x):
    y = self.conv(self.features, (3, 3), strides=self.strides,
                  padding=self.padding)(x)
    y = nn.relu(self.norm()(y))
    y = self.conv(self.features, (3, 3), padding=self.padding)(y)
    y = self.norm(zero_scale=self.zero_init_last_bn)(y)
    return _add_shortcut(self, x, y)


class Bottleneck(_ResidualBlock):
  """1x1 reduce, 3x3 (strided: v1.5), 1x1 expand to 4x `features`."""

  @nn.compact
  def __call__(self, x):
    y = nn.relu(self.norm()(self.conv(self.features, (1, 1))(x)))
    y = self.conv(self.features, (3, 3), strides=self.strides,
                  padding=self.padding)(y)
    y = nn.relu(self.norm()(y))
    y = self.conv(4 * self.features, (1, 1))(y)
    y = self.norm(zero_scale=self.zero_init_last_bn)(y)
    return _add_shortcut(self, x, y)


def _add_shortcut(block: _ResidualBlock, x, y):
  """relu(shortcut(x) + drop_path(y)). The shortcut is the identity, or a
  strided 1x1 conv + batch norm where the shape changes."""
  y = layers.drop_path(y, block.drop_path_rate, block.deterministic)
  if x.shape != y.shape:
    x = block.conv(y.shape[-1], (1, 1), strides=block.strides,
                   name='proj_conv')(x)
    x = block.norm(name='proj_bn')(x)
  return nn.relu(x + y)


_KERNEL_INITS = {'he_fan_out': layers.he_normal,
                 'lecun_normal': initializers.lecun_normal()}

# Counts as published: torchvision's (1000 classes, 224x224 inputs).
_IMAGENET = dict(family='convnet', input_shape=(224, 224, 3),
                 test_kwargs=dict(num_filters=8, stage_sizes=(1, 1, 1, 1)),
                 test_input_shape=(32, 32, 3), num_classes=1000)
# The paper gives counts to two digits (10 classes, 32x32 inputs).
_CIFAR = dict(family='convnet', input_shape=(32, 32, 3),
              test_kwargs=dict(num_filters=8, stage_sizes=(1, 1, 1)),
              reference_params_rtol=0.02, num_classes=10,
              block_cls=BasicBlock, num_filters=16, small_inputs=True)


@register('resnet18', stage_sizes=(2, 2, 2, 2), block_cls=BasicBlock,
          reference_params=11_689_512, **_IMAGENET)
@register('resnet34', stage_sizes=(3, 4, 6, 3), block_cls=BasicBlock,
          reference_params=21_797_672, **_IMAGENET)
@register('resnet50', stage_sizes=(3, 4, 6, 3), block_cls=Bottleneck,
          reference_params=25_557_032, reference_gflops=2 * 4.1, **_IMAGENET)
@register('resnet101', stage_sizes=(3, 4, 23, 3), block_cls=Bottleneck,
          reference_params=44_549_160, **_IMAGENET)
@register('resnet152', stage_sizes=(3, 8, 36, 3), block_cls=Bottleneck,
          reference_params=60_192_808, **_IMAGENET)
@register('resnet20', stage_sizes=(3, 3, 3), reference_params=0.27e6,
          **_CIFAR)
@register('resnet56', stage_sizes=(9, 9, 9), reference_params=0.85e6,
          **_CIFAR)
class ResNet(nn.Module):
  """ResNet; stage i has `stage_sizes[i]` blocks of `num_filters * 2**i`.

  `zero_init_last_bn` starts the last batch-norm scale of every residual
  block at zero, so each block starts as the identity (Goyal et al. 2017).
  Call with `train=True` and `mutable=['batch_stats']` to use and update the
  batch statistics; with `drop_path_rate` > 0 also give
  `rngs={'dropout': key}`. Logits come out in the computation `dtype`; the
  recipes upcast them.

  Training-recipe options (the defaults are torchvision's ResNets):
    padding: 'torchvision', 1 pixel on every side of each 3x3 window (convs
      and the stem's max-pool); 'same', TensorFlow's 'SAME' there, as in
      Flax's ImageNet example (its 7x7 stem conv pads 3 either way). Where a
      stride-2 window meets an even size, as at 224x224, 'SAME' pads only the
      bottom and right, so the two differ in function (not in shapes or
      parameters); on odd sizes they agree.
    kernel_init: of the convs: 'he_fan_out', He normal over fan-out
      (torchvision); 'lecun_normal', truncated normal over fan-in (nn.Conv's
      default, the Flax example's).
    drop_path_rate: stochastic depth on each block's residual branch, per
      example, rising linearly from 0 at the first block to this at the last
      (timm).
    batch_norm_axis_name: the mapped axis (pmap or shard_map) over which
      every batch norm averages its batch statistics, for statistics of the
      whole global batch (the Flax example's axis_name='batch'); None, the
      statistics of the local batch. The caller names the axis.
    remat: recompute each residual block in the backward pass instead of
      storing its activations (`nn.remat`); same parameter names.
  """

  stage_sizes: Sequence[int]
  block_cls: type[nn.Module]
  num_classes: int
  num_filters: int = 64
  small_inputs: bool = False
  zero_init_last_bn: bool = True
  padding: str = 'torchvision'
  kernel_init: str = 'he_fan_out'
  drop_path_rate: float = 0.0
  batch_norm_axis_name: str | None = None
  remat: bool = False
  features: bool = False
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def __post_init__(self):
    # Checked on creation, so a bad option is one ValueError from zoo.create.
    layers.check_choice('padding', self.padding, ('torchvision', 'same'))
    layers.check_classes(self.num_classes)
    layers.check_choice('kernel_init', self.kernel_init, tuple(_KERNEL_INITS))
    layers.check_rate('drop_path_rate', self.drop_path_rate)
    super().__post_init__()

  @nn.compact
  def __call__(self, x, train: bool = False):
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    conv = functools.partial(layers.conv, use_bias=False,
                             kernel_init=_KERNEL_INITS[self.kernel_init],
                             **layer)
    norm = functools.partial(layers.batch_norm, use_running_average=not train,
                             axis_name=self.batch_norm_axis_name, **layer)
    pad = ((1, 1), (1, 1)) if self.padding == 'torchvision' else 'SAME'
    x = x.astype(self.dtype)
    if self.small_inputs:
      x = nn.relu(norm()(conv(self.num_filters, (3, 3), padding=pad)(x)))
    else:
      x = conv(self.num_filters, (7, 7), strides=2, padding=3)(x)
      x = nn.relu(norm()(x))
      x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=pad)
    x = nn.with_logical_constraint(x, IMAGE)
    block_cls = nn.remat(self.block_cls) if self.remat else self.block_cls
    blocks = [(i, j) for i, n in enumerate(self.stage_sizes) for j in range(n)]
    rates = layers.linear_rates(self.drop_path_rate, len(blocks))
    stages = []
    for k, ((i, j), rate) in enumerate(zip(blocks, rates)):
      x = block_cls(self.num_filters * 2**i,
                    strides=2 if i > 0 and j == 0 else 1,
                    conv=conv, norm=norm,
                    zero_init_last_bn=self.zero_init_last_bn, padding=pad,
                    drop_path_rate=rate, deterministic=not train,
                    # Linen's automatic name, which nn.remat would change.
                    name=f'{self.block_cls.__name__}_{k}')(x)
      x = nn.with_logical_constraint(x, IMAGE)
      if j == self.stage_sizes[i] - 1:
        stages.append(x)
    if self.features:
      return tuple(stages)
    x = jnp.mean(x, axis=(1, 2))
    return layers.head(self.num_classes, ('embed', 'classes'), **layer)(x)

"""BiT (Kolesnikov et al. 2019, Big Transfer): pre-activation ResNet v2 with
group norm and weight-standardized convs.

Every conv standardizes its kernel per output channel before use (weight
standardization, Qiao et al. 2019), and group norm replaces batch norm, so
nothing depends on the batch: no batch statistics, the same function in
training and evaluation at any batch size. A residual block is pre-activation
(He et al. 2016, v2): norm-ReLU before each conv, and the sum of the branch
and the shortcut is not activated; the stride sits on the 3x3 conv. BiT-R50xK
is ResNet-50 with every width times K:

    zoo.create('bit_r50x3', num_classes=10)

The registrations are timm's resnetv2_{50x1,50x3,101x1,101x3,152x2,152x4}_bit,
whose parameter counts they give; zoo/convert reads timm's state dicts and
the original BiT .npz files.
"""

import functools
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen import initializers

from zoo import layers
from zoo.partitioning import IMAGE
from zoo.registry import register

named = layers.named


def standardize(kernel, eps: float):
  """A conv kernel (h, w, in, out) with each output channel's weights shifted
  and scaled to mean 0 and variance 1: (w - mean) / sqrt(var + eps), the
  variance the biased one, as BiT and timm compute it.

  Args:
    kernel: the kernel, (h, w, in, out).
    eps: added to the variance.

  Returns:
    The standardized kernel, in the kernel's dtype.
  """
  mean = jnp.mean(kernel, axis=(0, 1, 2), keepdims=True)
  kernel = kernel - mean
  var = jnp.mean(jnp.square(kernel), axis=(0, 1, 2), keepdims=True)
  return kernel * jax.lax.rsqrt(var + eps)


class StdConv(nn.Conv):
  """nn.Conv with a weight-standardized kernel (see `standardize`), in the
  parameter dtype, before it is cast to the computation dtype."""

  eps: float = 1e-8

  def param(self, name, *args, **kwargs):
    value = super().param(name, *args, **kwargs)
    return standardize(value, self.eps) if name == 'kernel' else value


def std_conv(features: int, kernel_size: Sequence[int], *, eps: float,
             **kwargs) -> StdConv:
  """A StdConv without bias whose kernel's channel axes are named
  ('conv_in', 'conv_out'), He-initialized over fan-out as timm does.

  Args:
    features: the number of output channels.
    kernel_size: the window's spatial size, e.g. (3, 3).
    eps: added to the variance of each output channel's weights.
    **kwargs: more nn.Conv arguments (strides, padding, dtype, name, ...).

  Returns:
    The StdConv module.
  """
  spatial = (None,) * len(kernel_size)
  return StdConv(features, tuple(kernel_size), eps=eps, use_bias=False,
                 kernel_init=named(layers.he_normal,
                                   (*spatial, 'conv_in', 'conv_out')),
                 **kwargs)


def group_norm(num_groups: int, **kwargs) -> nn.GroupNorm:
  """nn.GroupNorm with epsilon 1e-5 (BiT's and PyTorch's), the variance
  computed from the centred values (as BiT does; Flax's faster
  E[x^2] - E[x]^2 loses digits on activations far from zero), and the
  statistics in float32 under bfloat16.

  Args:
    num_groups: the groups the channels split into.
    **kwargs: more nn.GroupNorm arguments (dtype, param_dtype, name, ...).

  Returns:
    The nn.GroupNorm module.
  """
  return nn.GroupNorm(num_groups=num_groups, epsilon=1e-5,
                      use_fast_variance=False,
                      scale_init=named(initializers.ones_init(), ('norm',)),
                      bias_init=named(initializers.zeros_init(), ('norm',)),
                      **kwargs)


class PreActBottleneck(nn.Module):
  """norm-ReLU, then 1x1 reduce to `features`, 3x3 (strided), 1x1 expand to
  4x `features`, each after a norm-ReLU; drop path on the branch unless
  `deterministic`. Where the shape changes (the first block of a stage), the
  shortcut is a strided 1x1 conv of the pre-activated input, else the input
  itself."""

  features: int
  strides: int
  conv: Callable[..., nn.Module]
  norm: Callable[..., nn.Module]
  drop_path_rate: float = 0.0
  deterministic: bool = True

  @nn.compact
  def __call__(self, x):
    out = 4 * self.features
    preact = nn.relu(self.norm()(x))
    shortcut = x
    if x.shape[-1] != out or self.strides != 1:
      shortcut = self.conv(out, (1, 1), strides=self.strides,
                           name='proj_conv')(preact)
    y = self.conv(self.features, (1, 1))(preact)
    y = nn.relu(self.norm()(y))
    y = self.conv(self.features, (3, 3), strides=self.strides, padding=1)(y)
    y = nn.relu(self.norm()(y))
    y = self.conv(out, (1, 1))(y)
    return shortcut + layers.drop_path(y, self.drop_path_rate,
                                       self.deterministic)


# Counts as published: timm's resnetv2_*_bit (1000 classes, 224x224 inputs).
_BIT = dict(family='convnet', input_shape=(224, 224, 3),
            test_kwargs=dict(stage_sizes=(1, 1, 1, 1), width=8, num_groups=4),
            test_input_shape=(32, 32, 3), num_classes=1000)


@register('bit_r50x1', stage_sizes=(3, 4, 6, 3), width=64,
          reference_params=25_549_352, **_BIT)
@register('bit_r50x3', stage_sizes=(3, 4, 6, 3), width=192,
          reference_params=217_319_080, **_BIT)
@register('bit_r101x1', stage_sizes=(3, 4, 23, 3), width=64,
          reference_params=44_541_480, **_BIT)
@register('bit_r101x3', stage_sizes=(3, 4, 23, 3), width=192,
          reference_params=387_934_888, **_BIT)
@register('bit_r152x2', stage_sizes=(3, 8, 36, 3), width=128,
          reference_params=236_335_208, **_BIT)
@register('bit_r152x4', stage_sizes=(3, 8, 36, 3), width=256,
          reference_params=936_533_224, **_BIT)
class BiT(nn.Module):
  """BiT-R{depth}x{K}: stage i has `stage_sizes[i]` pre-activation
  bottlenecks of `width * 2**i` channels inside and 4x that outside
  (`width` = 64K: the stem's and the first stage's).

  The stem is a 7x7/2 conv and a 3x3/2 max-pool; then the stages (the first
  at stride 1, the others 2), a final group norm and ReLU, the global average
  and a dense head that starts at zero, as in BiT. Nothing is batch
  dependent: `train=True` only turns drop path on (give
  `rngs={'dropout': key}`). Logits come out in the computation `dtype`; the
  recipes upcast them.

  num_classes=0 leaves out the head: the output is the pooled features
  (batch, 32 * width) after the final norm and ReLU (timm's num_classes=0).

  features=True returns, instead of logits, the four stages' outputs (NHWC,
  batch first): (B, H/4, W/4, 4w), (B, H/8, W/8, 8w), (B, H/16, W/16, 16w),
  (B, H/32, W/32, 32w) for `width` w and H, W multiples of 32. In a
  pre-activation net a stage's output is the residual stream: the last
  block's sum, neither normalized nor activated (the next block's norm-ReLU
  does that), as timm's features_only=True gives it (its last one too: the
  final norm is not applied). The final norm and the head are then not
  created.

  Options (the defaults are timm's BiT):
    num_groups: the groups of every group norm (BiT: 32); `width` must be a
      multiple.
    std_conv_eps: added to the variance of each output channel's weights in
      the weight standardization: timm's 1e-8; the original BiT code and
      big_vision's use 1e-10 (zoo/convert sets the file's).
    pool_padding: the stem's max-pool pads one pixel on each side with
      'zeros' (the original BiT code and timm's stem_type='fixed'), or pads
      with values that are 'ignored' (never the maximum: big_vision's
      bit_paper model, PyTorch's MaxPool2d). The stem conv's output is not
      activated, so the two differ on the border.
    drop_path_rate: stochastic depth on each block's residual branch, per
      example, rising linearly from 0 at the first block to this at the last
      (timm).
  """

  stage_sizes: Sequence[int]
  num_classes: int
  width: int = 64
  num_groups: int = 32
  std_conv_eps: float = 1e-8
  pool_padding: str = 'zeros'
  drop_path_rate: float = 0.0
  features: bool = False
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def __post_init__(self):
    # Checked on creation, so a bad option is one ValueError from zoo.create.
    layers.check_choice('pool_padding', self.pool_padding,
                        ('zeros', 'ignored'))
    layers.check_classes(self.num_classes)
    layers.check_rate('drop_path_rate', self.drop_path_rate)
    if self.num_groups <= 0 or self.width % self.num_groups:
      raise ValueError(f'width {self.width} does not split into '
                       f'{self.num_groups} groups (num_groups).')
    super().__post_init__()

  @nn.compact
  def __call__(self, x, train: bool = False):
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    conv = functools.partial(std_conv, eps=self.std_conv_eps, **layer)
    norm = functools.partial(group_norm, self.num_groups, **layer)
    x = conv(self.width, (7, 7), strides=2, padding=3)(x.astype(self.dtype))
    if self.pool_padding == 'zeros':
      x = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
      x = nn.max_pool(x, (3, 3), strides=(2, 2))
    else:  # Flax pads a max-pool with -inf.
      x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
    x = nn.with_logical_constraint(x, IMAGE)
    blocks = [(i, j) for i, n in enumerate(self.stage_sizes) for j in range(n)]
    rates = layers.linear_rates(self.drop_path_rate, len(blocks))
    stages = []
    for (i, j), rate in zip(blocks, rates):
      x = PreActBottleneck(self.width * 2**i,
                           strides=2 if i > 0 and j == 0 else 1,
                           conv=conv, norm=norm, drop_path_rate=rate,
                           deterministic=not train)(x)
      x = nn.with_logical_constraint(x, IMAGE)
      if j == self.stage_sizes[i] - 1:
        stages.append(x)
    if self.features:
      return tuple(stages)
    x = nn.relu(norm(name='final_norm')(x))
    x = jnp.mean(x, axis=(1, 2))
    return layers.head(self.num_classes, ('embed', 'classes'),
                       kernel_init=initializers.zeros_init(), name='head',
                       **layer)(x)

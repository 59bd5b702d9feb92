"""Linen layers whose parameters carry logical axis names (see `partitioning`),
and the pieces of training recipes that several models share.

Thin wrappers: each returns the plain Flax layer with its initializers wrapped
in `nn.with_logical_partitioning`, so `model.init` returns
`nn.LogicallyPartitioned` boxes (`nn.meta.unbox` gives plain arrays).
"""

from typing import Any, Sequence

import flax.linen as nn
from flax.linen import initializers

named = nn.with_logical_partitioning

# He initialization for convs followed by ReLU, as in torchvision's ResNets.
he_normal = initializers.variance_scaling(2.0, 'fan_out', 'normal')


def dense(features: int, names: Sequence[str], *,
          kernel_init=initializers.lecun_normal(), **kwargs) -> nn.Dense:
  """nn.Dense with kernel axes `names` (in, out); the bias takes `out`."""
  return nn.Dense(features, kernel_init=named(kernel_init, tuple(names)),
                  bias_init=named(initializers.zeros_init(), (names[-1],)),
                  **kwargs)


def conv(features: int, kernel_size: Sequence[int],
         names: Sequence[str] = ('conv_in', 'conv_out'), *,
         kernel_init=initializers.lecun_normal(), **kwargs) -> nn.Conv:
  """nn.Conv with channel axes `names` (in, out); spatial axes are unnamed."""
  spatial = (None,) * len(kernel_size)
  return nn.Conv(features, tuple(kernel_size),
                 kernel_init=named(kernel_init, (*spatial, *names)),
                 bias_init=named(initializers.zeros_init(), (names[-1],)),
                 **kwargs)


def batch_norm(*, zero_scale: bool = False, **kwargs) -> nn.BatchNorm:
  """nn.BatchNorm with ImageNet-recipe momentum and epsilon.

  Flax reduces the statistics in float32 even when `dtype` is bfloat16, and
  keeps the running statistics in float32. With `axis_name` (given by the
  caller, e.g. a recipe that maps over devices) the batch statistics are
  averaged over that mapped axis: cross-device batch norm.
  """
  scale_init = (initializers.zeros_init() if zero_scale else
                initializers.ones_init())
  return nn.BatchNorm(momentum=0.9, epsilon=1e-5,
                      scale_init=named(scale_init, ('norm',)),
                      bias_init=named(initializers.zeros_init(), ('norm',)),
                      **kwargs)


def layer_norm(**kwargs) -> nn.LayerNorm:
  """nn.LayerNorm (statistics in float32 under bfloat16, as Flax does)."""
  return nn.LayerNorm(epsilon=1e-6,
                      scale_init=named(initializers.ones_init(), ('norm',)),
                      bias_init=named(initializers.zeros_init(), ('norm',)),
                      **kwargs)


def drop_path(x, rate: float, deterministic: bool):
  """Stochastic depth (Huang et al. 2016): zeroes a residual branch `x` for
  each example with probability `rate`, and scales the kept ones by
  1 / (1 - rate). Dropout of whole examples, drawing from the 'dropout' rng
  collection; call it inside a compact method."""
  return nn.Dropout(rate, broadcast_dims=tuple(range(1, x.ndim)))(
      x, deterministic)


def linear_rates(rate: float, count: int) -> list[float]:
  """Drop-path rates of `count` blocks rising linearly from 0 at the first
  to `rate` at the last, as in DeiT and timm."""
  return [rate * i / max(count - 1, 1) for i in range(count)]


def check_rate(name: str, rate: float):
  if not 0 <= rate < 1:
    raise ValueError(f'{name} must be at least 0 and below 1, got {rate!r}.')


def check_choice(name: str, value: Any, choices: Sequence[Any]):
  if value not in choices:
    raise ValueError(f'{name} must be one of '
                     f'{", ".join(map(repr, choices))}, got {value!r}.')

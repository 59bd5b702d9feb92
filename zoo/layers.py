"""Linen layers whose parameters carry logical axis names (see `partitioning`),
and the pieces of training recipes that several models share.

Thin wrappers: each returns the plain Flax layer with its initializers wrapped
in `nn.with_logical_partitioning`, so `model.init` returns
`nn.LogicallyPartitioned` boxes (`nn.meta.unbox` gives plain arrays).
"""

from typing import Any, Sequence

import flax.linen as nn
import jax.numpy as jnp
from flax.linen import initializers

named = nn.with_logical_partitioning

# He initialization for convs followed by ReLU, as in torchvision's ResNets.
he_normal = initializers.variance_scaling(2.0, 'fan_out', 'normal')


def dense(features: int, names: Sequence[str], *,
          kernel_init=initializers.lecun_normal(),
          bias_init=initializers.zeros_init(), **kwargs) -> nn.Dense:
  """nn.Dense with kernel axes `names` (in, out); the bias takes `out`.

  Args:
    features: the number of outputs.
    names: the logical names of the kernel's (input, output) axes, e.g.
      ('embed', 'mlp'); see zoo/partitioning.py.
    kernel_init: the kernel's initializer, before the names are attached.
    bias_init: the bias's, likewise.
    **kwargs: more nn.Dense arguments (dtype, param_dtype, name, ...).

  Returns:
    The nn.Dense module.
  """
  return nn.Dense(features, kernel_init=named(kernel_init, tuple(names)),
                  bias_init=named(bias_init, (names[-1],)), **kwargs)


def head(num_classes: int, names: Sequence[str], **kwargs):
  """The classifier: `dense(num_classes, names, **kwargs)`, or for
  num_classes=0 the identity, so that the model's output is its pooled
  features (as timm's num_classes=0).

  Args:
    num_classes: the classes; 0: no head.
    names: the logical names of the kernel's (input, output) axes.
    **kwargs: more `dense` arguments (kernel_init, dtype, name, ...).

  Returns:
    A callable: the nn.Dense module, or the identity.
  """
  if num_classes == 0:
    return lambda x: x
  return dense(num_classes, names, **kwargs)


def check_classes(num_classes: int):
  """Checks that `num_classes` is a number of classes, or 0 (no head).

  Args:
    num_classes: the option's value.

  Raises:
    ValueError: it is not a non-negative int.
  """
  if not (isinstance(num_classes, int) and not isinstance(num_classes, bool)
          and num_classes >= 0):
    raise ValueError(f'num_classes must be 0 (no head: the pooled features) '
                     f'or a number of classes, got {num_classes!r}.')


def conv(features: int, kernel_size: Sequence[int],
         names: Sequence[str] = ('conv_in', 'conv_out'), *,
         kernel_init=initializers.lecun_normal(), **kwargs) -> nn.Conv:
  """nn.Conv with channel axes `names` (in, out); spatial axes are unnamed.

  Args:
    features: the number of output channels.
    kernel_size: the window's spatial size, e.g. (3, 3).
    names: the logical names of the kernel's (input, output) channel axes.
    kernel_init: the kernel's initializer, before the names are attached.
    **kwargs: more nn.Conv arguments (strides, padding, use_bias, dtype,
      ...).

  Returns:
    The nn.Conv module.
  """
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

  Args:
    zero_scale: start the scale at zero instead of one (the last norm of a
      residual block, so the block starts as the identity).
    **kwargs: more nn.BatchNorm arguments (use_running_average, axis_name,
      dtype, name, ...).

  Returns:
    The nn.BatchNorm module (momentum 0.9, epsilon 1e-5).
  """
  scale_init = (initializers.zeros_init() if zero_scale else
                initializers.ones_init())
  return nn.BatchNorm(momentum=0.9, epsilon=1e-5,
                      scale_init=named(scale_init, ('norm',)),
                      bias_init=named(initializers.zeros_init(), ('norm',)),
                      **kwargs)


def layer_norm(*, epsilon: float = 1e-6, **kwargs) -> nn.LayerNorm:
  """nn.LayerNorm (statistics in float32 under bfloat16, as Flax does).

  Args:
    epsilon: added to the variance (1e-6; PyTorch's default is 1e-5).
    **kwargs: nn.LayerNorm arguments (dtype, param_dtype, name, ...).

  Returns:
    The nn.LayerNorm module.
  """
  return nn.LayerNorm(epsilon=epsilon,
                      scale_init=named(initializers.ones_init(), ('norm',)),
                      bias_init=named(initializers.zeros_init(), ('norm',)),
                      **kwargs)


def rms_norm(*, epsilon: float = 1e-6, **kwargs) -> nn.RMSNorm:
  """nn.RMSNorm: x / sqrt(mean(x^2) + epsilon) times a learned scale, no
  bias or mean (Zhang and Sennrich 2019; Llama), in float32 under bfloat16.

  Args:
    epsilon: added to the mean square.
    **kwargs: nn.RMSNorm arguments (dtype, param_dtype, name, ...).

  Returns:
    The nn.RMSNorm module.
  """
  return nn.RMSNorm(epsilon=epsilon,
                    scale_init=named(initializers.ones_init(), ('norm',)),
                    **kwargs)


def drop_path(x, rate: float, deterministic: bool):
  """Stochastic depth (Huang et al. 2016): zeroes a residual branch `x` for
  each example with probability `rate`, and scales the kept ones by
  1 / (1 - rate). Dropout of whole examples, drawing from the 'dropout' rng
  collection; call it inside a compact method.

  Args:
    x: the branch's output, batch first.
    rate: the probability of dropping an example's branch, in [0, 1).
    deterministic: True (evaluation): `x` comes back unchanged.

  Returns:
    `x` with the dropped examples zeroed and the kept ones rescaled.
  """
  return nn.Dropout(rate, broadcast_dims=tuple(range(1, x.ndim)))(
      x, deterministic)


def linear_rates(rate: float, count: int) -> list[float]:
  """Drop-path rates of `count` blocks rising linearly from 0 at the first
  to `rate` at the last, as in DeiT and timm.

  Args:
    rate: the last block's rate.
    count: the number of blocks.

  Returns:
    One rate per block, first to last (a single block gets 0).
  """
  return [rate * i / max(count - 1, 1) for i in range(count)]


def check_rate(name: str, rate: float):
  """Checks that `rate` is a probability of dropping, in [0, 1).

  Args:
    name: the option's name, for the message.
    rate: its value.

  Raises:
    ValueError: `rate` is below 0 or at least 1.
  """
  if not 0 <= rate < 1:
    raise ValueError(f'{name} must be at least 0 and below 1, got {rate!r}.')


def check_tokens(model: str, tokens, positions: int | None):
  """Checks that `tokens` are integer ids (batch, length) that fit the
  learned positions.

  Args:
    model: the model, with its article, for the message ('a Decoder').
    tokens: the input.
    positions: the positions the model has learned; None: any length (RoPE).

  Raises:
    ValueError: the ids are not 2-D integers, or too many for `positions`.
  """
  if tokens.ndim != 2 or not jnp.issubdtype(tokens.dtype, jnp.integer):
    raise ValueError(f'{model} takes integer token ids of shape (batch, '
                     f'length), got {tokens.dtype} inputs of shape '
                     f'{tokens.shape}.')
  if positions is not None and tokens.shape[1] > positions:
    raise ValueError(f'{tokens.shape[1]} tokens are more than the '
                     f'{positions} positions the model has learned.')


def check_choice(name: str, value: Any, choices: Sequence[Any]):
  """Checks that `value` is one of `choices`.

  Args:
    name: the option's name, for the message.
    value: its value.
    choices: the allowed values.

  Raises:
    ValueError: `value` is not one of `choices` (the message lists them).
  """
  if value not in choices:
    raise ValueError(f'{name} must be one of '
                     f'{", ".join(map(repr, choices))}, got {value!r}.')

"""MLP-Mixer (Tolstikhin et al. 2021): patches mixed by MLPs alone, across the
patches and across the channels in turn.

One class serves every size; the registrations give Mixer-S, B and L with
16x16 patches on 224x224 images (the paper's Table 1). A block is

    x = x + token_mixing(norm(x) transposed) transposed
    x = x + channel_mixing(norm(x))

each mixing a Dense-GELU-Dense MLP: over the patches with `tokens_mlp_dim`
hidden features, over the channels with `channels_mlp_dim`. A final layer
norm, the mean over the patches and a zero-initialized head classify, as in
Google's code (vit_jax/models_mixer.py, big_vision/models/mlp_mixer.py),
whose parameter names the zoo's follow.

The token-mixing weights are made for one number of patches, so a Mixer
takes images of its `image_size` only:

    zoo.create('mixer_b16', num_classes=10, patch_size=4, image_size=32)
"""

import functools
from typing import Any

import flax.linen as nn
import jax.numpy as jnp
from flax.linen import initializers

from zoo import layers
from zoo.partitioning import TOKENS
from zoo.registry import register


class MlpBlock(nn.Module):
  """Dense, GELU, Dense back to the input's width, over the last axis of
  (batch, rows, features). `features` is that axis' logical name ('embed'
  for the channels, 'seq' for the patches) and `rows` the other's; the
  hidden features are 'mlp', split like a transformer MLP's."""

  mlp_dim: int
  features: str
  rows: str
  approximate_gelu: bool
  dtype: Any
  param_dtype: Any

  @nn.compact
  def __call__(self, x):
    dense = functools.partial(layers.dense, dtype=self.dtype,
                              param_dtype=self.param_dtype)
    y = dense(self.mlp_dim, (self.features, 'mlp'))(x)
    y = nn.gelu(y, approximate=self.approximate_gelu)
    y = nn.with_logical_constraint(y, ('batch', self.rows, 'mlp'))
    return dense(x.shape[-1], ('mlp', self.features))(y)


class MixerBlock(nn.Module):
  """x + token_mixing(norm(x)), then x + channel_mixing(norm(x)) on
  (batch, patches, channels); each branch passes through drop path unless
  `deterministic`."""

  tokens_mlp_dim: int
  channels_mlp_dim: int
  dtype: Any
  param_dtype: Any
  drop_path_rate: float = 0.0
  approximate_gelu: bool = True
  deterministic: bool = True

  @nn.compact
  def __call__(self, x):
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    mlp = functools.partial(MlpBlock, approximate_gelu=self.approximate_gelu,
                            **layer)

    def add(x, branch):
      branch = layers.drop_path(branch, self.drop_path_rate,
                                self.deterministic)
      return nn.with_logical_constraint(x + branch, TOKENS)

    y = jnp.swapaxes(layers.layer_norm(**layer)(x), 1, 2)
    y = mlp(self.tokens_mlp_dim, 'seq', 'embed', name='token_mixing')(y)
    x = add(x, jnp.swapaxes(y, 1, 2))
    y = layers.layer_norm(**layer)(x)
    return add(x, mlp(self.channels_mlp_dim, 'embed', 'seq',
                      name='channel_mixing')(y))


def _square_rgb(kwargs):
  return (kwargs['image_size'], kwargs['image_size'], 3)


# Counts as published: timm's (1000 classes, 224x224 inputs); FLOPs: timm's
# model cards (GMACs).
_MIXER = dict(family='transformer', input_shape=_square_rgb,
              test_kwargs=dict(hidden_size=32, num_layers=2,
                               tokens_mlp_dim=16, channels_mlp_dim=64,
                               patch_size=8, image_size=32),
              num_classes=1000, patch_size=16, image_size=224)


@register('mixer_s16', hidden_size=512, num_layers=8, tokens_mlp_dim=256,
          channels_mlp_dim=2048, reference_params=18_528_264, **_MIXER)
@register('mixer_b16', hidden_size=768, num_layers=12, tokens_mlp_dim=384,
          channels_mlp_dim=3072, reference_params=59_880_472,
          reference_gflops=2 * 12.6, **_MIXER)
@register('mixer_l16', hidden_size=1024, num_layers=24, tokens_mlp_dim=512,
          channels_mlp_dim=4096, reference_params=208_196_168,
          reference_gflops=2 * 44.6, **_MIXER)
class Mixer(nn.Module):
  """Classifies the mean of the patches after a last norm.

  Inputs must be `image_size` square, a multiple of `patch_size` (the
  token-mixing weights are made for that many patches). `train=True` turns
  drop path on; it draws from the 'dropout' rng collection
  (`apply(..., rngs={'dropout': key})`). Logits come out in the computation
  `dtype`; the recipes upcast them.

  Outputs other than logits:
    num_classes=0: no head; the pooled features (batch, hidden_size), as
      timm's num_classes=0 gives them.
    features=True: a tuple of every block's output, the patches as a grid
      (batch, image_size / patch_size, image_size / patch_size,
      hidden_size), stride `patch_size`, before the final norm (timm's
      forward_intermediates); the final norm, pooling and head are not
      applied, so their parameters are not created.

  Training-recipe options (the defaults are Google's Mixer):
    drop_path_rate: stochastic depth on each residual branch, per example,
      rising linearly from 0 at the first block to this at the last
      (big_vision's stoch_depth; timm gives every block the same rate).
    gelu: 'tanh', the tanh approximation (Flax's default, Google's code);
      'exact', the erf GELU of PyTorch and timm.
    remat: recompute each block in the backward pass instead of storing its
      activations (`nn.remat`); same parameter names.
  """

  num_classes: int
  hidden_size: int
  num_layers: int
  tokens_mlp_dim: int
  channels_mlp_dim: int
  patch_size: int = 16
  image_size: int = 224
  drop_path_rate: float = 0.0
  gelu: str = 'tanh'
  remat: bool = False
  features: bool = False
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def __post_init__(self):
    # Checked on creation, so a bad option is one ValueError from zoo.create.
    layers.check_classes(self.num_classes)
    layers.check_rate('drop_path_rate', self.drop_path_rate)
    layers.check_choice('gelu', self.gelu, ('tanh', 'exact'))
    if self.image_size % self.patch_size:
      raise ValueError(f'image_size {self.image_size} is not a multiple of '
                       f'patch_size {self.patch_size}.')
    super().__post_init__()

  @nn.compact
  def __call__(self, x, train: bool = False):
    if x.shape[1:3] != (self.image_size, self.image_size):
      raise ValueError(f'Mixer built for {self.image_size}x{self.image_size} '
                       f'images got input of shape {x.shape}')
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    p = self.patch_size
    x = layers.conv(self.hidden_size, (p, p), ('conv_in', 'embed'),
                    strides=p, padding='VALID', name='stem',
                    **layer)(x.astype(self.dtype))
    n, h, w, _ = x.shape
    x = nn.with_logical_constraint(x.reshape((n, h * w, self.hidden_size)),
                                   TOKENS)
    block_cls = nn.remat(MixerBlock) if self.remat else MixerBlock
    rates = layers.linear_rates(self.drop_path_rate, self.num_layers)
    grids = []
    for i, rate in enumerate(rates):
      x = block_cls(self.tokens_mlp_dim, self.channels_mlp_dim,
                    drop_path_rate=rate, approximate_gelu=self.gelu == 'tanh',
                    deterministic=not train, name=f'block{i}', **layer)(x)
      if self.features:
        grids.append(x.reshape((n, h, w, self.hidden_size)))
    if self.features:
      return tuple(grids)
    x = layers.layer_norm(name='final_norm', **layer)(x).mean(axis=1)
    # A zero head, as in Google's code: training starts from uniform logits.
    return layers.head(self.num_classes, ('embed', 'classes'),
                       kernel_init=initializers.zeros_init(), name='head',
                       **layer)(x)

"""Vision Transformer (Dosovitskiy et al. 2020): patches, class token, pre-norm blocks.

One class serves every size; the registrations give the widths of ViT-Ti, S,
B and L with 16x16 patches on 224x224 images. `patch_size` and `image_size`
can be overridden, e.g. for 32x32 CIFAR images:

    zoo.create('vit_s16', num_classes=10, patch_size=4, image_size=32)

Attention is `jax.nn.dot_product_attention`. `attention_impl` picks its
implementation: 'xla' (XLA's einsums and softmax), 'cudnn' (cuDNN's fused
flash-attention kernel; GPU only, bfloat16/float16, an error where cuDNN
refuses the shapes) or 'auto', the default: cuDNN where it takes the shapes
and dtype, XLA everywhere else (CPU, TPU, float32). No dropout.
"""

import functools
import logging
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen import initializers

from zoo import layers
from zoo.partitioning import TOKENS
from zoo.registry import register

named = layers.named


class Attention(nn.Module):
  """Multi-head self-attention with separate query, key, value projections."""

  num_heads: int
  attention_impl: str | None
  dtype: Any
  param_dtype: Any

  @nn.compact
  def __call__(self, x):
    embed = x.shape[-1]
    if embed % self.num_heads:
      raise ValueError(f'{embed} features do not split into '
                       f'{self.num_heads} heads')
    heads = (self.num_heads, embed // self.num_heads)
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    # nn.Einsum rather than nn.DenseGeneral: DenseGeneral initializes a
    # flattened kernel, which breaks 3-d logical names under a mesh.
    project = functools.partial(
        nn.Einsum, (embed, *heads), 'btd,dhk->bthk',
        kernel_init=named(_xavier(in_axis=0, out_axis=(1, 2)),
                          ('embed', 'heads', 'kv')),
        bias_init=named(initializers.zeros_init(), ('heads', 'kv')), **layer)
    q, k, v = (
        nn.with_logical_constraint(project(name=name)(x),
                                   ('batch', 'seq', 'heads', 'kv'))
        for name in ('query', 'key', 'value'))
    y = dot_product_attention(q, k, v, self.attention_impl)
    return nn.Einsum(
        (*heads, embed), 'bthk,hkd->btd',
        kernel_init=named(_xavier(in_axis=(0, 1), out_axis=2),
                          ('heads', 'kv', 'embed')),
        bias_init=named(initializers.zeros_init(), ('embed',)),
        name='out', **layer)(y)


def dot_product_attention(q, k, v, implementation: str | None, *,
                          backend: str | None = None):
  """`jax.nn.dot_product_attention` with 'auto' resolved for these inputs on
  `backend` (default: JAX's default backend)."""
  if implementation != 'auto':
    return jax.nn.dot_product_attention(q, k, v, implementation=implementation)
  backend = backend or jax.default_backend()
  if backend == 'gpu' and q.dtype in (jnp.bfloat16, jnp.float16):
    # cuDNN's checks (head dim, sequence lengths, cuDNN version) run while
    # tracing, so a refusal is an exception here, not a failed compile.
    try:
      return jax.nn.dot_product_attention(q, k, v, implementation='cudnn')
    except (NotImplementedError, ValueError, RuntimeError) as e:
      _warn_once(f'cuDNN attention is not available for queries of shape '
                 f'{q.shape} ({e}); using XLA attention.')
  return jax.nn.dot_product_attention(q, k, v, implementation='xla')


@functools.cache
def _warn_once(message: str):
  logging.getLogger(__name__).warning(message)


def _xavier(in_axis, out_axis):
  """Glorot uniform over a kernel whose inputs or outputs span several axes."""
  return initializers.variance_scaling(1.0, 'fan_avg', 'uniform',
                                       in_axis=in_axis, out_axis=out_axis)


class EncoderBlock(nn.Module):
  """x + attention(norm(x)), then x + mlp(norm(x))."""

  num_heads: int
  mlp_dim: int
  attention_impl: str | None
  dtype: Any
  param_dtype: Any

  @nn.compact
  def __call__(self, x):
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    dense = functools.partial(layers.dense,
                              kernel_init=initializers.xavier_uniform(),
                              **layer)
    y = Attention(self.num_heads, self.attention_impl,
                  **layer)(layers.layer_norm(**layer)(x))
    x = nn.with_logical_constraint(x + y, TOKENS)
    y = dense(self.mlp_dim, ('embed', 'mlp'))(layers.layer_norm(**layer)(x))
    y = nn.with_logical_constraint(nn.gelu(y), ('batch', 'seq', 'mlp'))
    y = dense(x.shape[-1], ('mlp', 'embed'))(y)
    return nn.with_logical_constraint(x + y, TOKENS)


def _square_rgb(kwargs):
  return (kwargs['image_size'], kwargs['image_size'], 3)


# Counts as published: timm's (1000 classes, 224x224 inputs).
_VIT = dict(family='transformer', input_shape=_square_rgb,
            test_kwargs=dict(hidden_size=32, num_layers=2, num_heads=2,
                             mlp_dim=64, patch_size=8, image_size=32),
            num_classes=1000, patch_size=16, image_size=224)


@register('vit_ti16', hidden_size=192, num_layers=12, num_heads=3,
          mlp_dim=768, reference_params=5_717_416, **_VIT)
@register('vit_s16', hidden_size=384, num_layers=12, num_heads=6,
          mlp_dim=1536, reference_params=22_050_664, **_VIT)
@register('vit_b16', hidden_size=768, num_layers=12, num_heads=12,
          mlp_dim=3072, reference_params=86_567_656,
          reference_gflops=2 * 17.6, **_VIT)
@register('vit_l16', hidden_size=1024, num_layers=24, num_heads=16,
          mlp_dim=4096, reference_params=304_326_632, **_VIT)
class ViT(nn.Module):
  """Classifies from the class token after the final layer norm.

  Inputs must be `image_size` square (the position embeddings are learned for
  that many patches). `train` changes nothing (no dropout, no batch norm).
  Logits come out in the computation `dtype`; the recipes upcast them.
  """

  num_classes: int
  hidden_size: int
  num_layers: int
  num_heads: int
  mlp_dim: int
  patch_size: int = 16
  image_size: int = 224
  attention_impl: str | None = 'auto'
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = False):
    del train
    if x.shape[1:3] != (self.image_size, self.image_size):
      raise ValueError(f'ViT built for {self.image_size}x{self.image_size} '
                       f'images got input of shape {x.shape}')
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    p = self.patch_size
    x = layers.conv(self.hidden_size, (p, p), ('conv_in', 'embed'),
                    strides=p, padding='VALID', name='embedding',
                    **layer)(x.astype(self.dtype))
    x = x.reshape((x.shape[0], -1, self.hidden_size))
    cls = self.param('cls', named(initializers.zeros_init(),
                                  (None, None, 'embed')),
                     (1, 1, self.hidden_size), self.param_dtype)
    cls = jnp.broadcast_to(cls, (x.shape[0], 1, self.hidden_size))
    x = jnp.concatenate([cls.astype(self.dtype), x], axis=1)
    pos = self.param('pos_embedding',
                     named(initializers.normal(0.02), (None, 'seq', 'embed')),
                     (1, x.shape[1], self.hidden_size), self.param_dtype)
    x = nn.with_logical_constraint(x + pos.astype(self.dtype), TOKENS)
    for i in range(self.num_layers):
      x = EncoderBlock(self.num_heads, self.mlp_dim, self.attention_impl,
                       name=f'block{i}', **layer)(x)
    x = layers.layer_norm(name='final_norm', **layer)(x[:, 0])
    # A zero head, as in big_vision: training starts from uniform logits.
    return layers.dense(self.num_classes, ('embed', 'classes'),
                        kernel_init=initializers.zeros_init(),
                        name='head', **layer)(x)

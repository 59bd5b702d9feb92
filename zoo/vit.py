"""Vision Transformer (Dosovitskiy et al. 2020): patches, class token, pre-norm blocks.

One class serves every size; the registrations give the widths of ViT-Ti, S,
B and L with 16x16 patches on 224x224 images. `patch_size` and `image_size`
can be overridden, e.g. for 32x32 CIFAR images:

    zoo.create('vit_s16', num_classes=10, patch_size=4, image_size=32)

Attention is `jax.nn.dot_product_attention`. `attention_impl` picks its
implementation: 'xla' (XLA's einsums and softmax), 'cudnn' (cuDNN's fused
flash-attention kernel; GPU only, bfloat16/float16, an error where cuDNN
refuses the shapes) or 'auto', the default: cuDNN where it takes the shapes
and dtype, XLA everywhere else (CPU, TPU, float32).

The defaults are the original ViT without dropout; the other options (see
`ViT`) give big_vision's variant (`pool='gap'`, `posemb='sincos2d'`) or the
DeiT/timm recipe (`drop_path_rate`, `gelu='exact'`).
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
  `backend` (default: JAX's default backend).

  Args:
    q: queries, (batch, tokens, heads, head_dim); `k` and `v` alike.
    k: keys.
    v: values.
    implementation: 'auto' (cuDNN on GPU for bfloat16/float16 inputs where
      it takes the shapes, else XLA, with a warning once per shape), 'xla',
      'cudnn', or None (JAX's own choice).
    backend: the platform 'auto' decides for ('gpu', 'cpu', 'tpu'); None:
      JAX's default backend.

  Returns:
    The attention output, shaped like `q`.
  """
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
  """x + attention(norm(x)), then x + mlp(norm(x)); each branch passes
  through dropout, then drop path, unless `deterministic`."""

  num_heads: int
  mlp_dim: int
  attention_impl: str | None
  dtype: Any
  param_dtype: Any
  dropout_rate: float = 0.0
  drop_path_rate: float = 0.0
  approximate_gelu: bool = True
  deterministic: bool = True

  @nn.compact
  def __call__(self, x):
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    dense = functools.partial(layers.dense,
                              kernel_init=initializers.xavier_uniform(),
                              **layer)

    def dropout(y):
      return nn.Dropout(self.dropout_rate)(y, self.deterministic)

    def add(x, branch):
      branch = layers.drop_path(dropout(branch), self.drop_path_rate,
                                self.deterministic)
      return nn.with_logical_constraint(x + branch, TOKENS)

    x = add(x, Attention(self.num_heads, self.attention_impl,
                         **layer)(layers.layer_norm(**layer)(x)))
    y = dense(self.mlp_dim, ('embed', 'mlp'))(layers.layer_norm(**layer)(x))
    y = nn.gelu(y, approximate=self.approximate_gelu)
    y = dropout(nn.with_logical_constraint(y, ('batch', 'seq', 'mlp')))
    return add(x, dense(x.shape[-1], ('mlp', 'embed'))(y))


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
  """Classifies the class token, or the mean of the tokens, after a last norm.

  Inputs must be `image_size` square (the position embeddings are made for
  that many patches). `train=True` turns dropout and drop path on; they draw
  from the 'dropout' rng collection (`apply(..., rngs={'dropout': key})`).
  Logits come out in the computation `dtype`; the recipes upcast them.

  Training-recipe options (the defaults are the original ViT):
    dropout_rate: dropout after the position embeddings are added, on the
      attention output and in the MLP after the activation and after the
      second dense layer (ViT paper, big_vision).
    drop_path_rate: stochastic depth on each residual branch, per example,
      rising linearly from 0 at the first block to this at the last (DeiT,
      timm).
    pool: 'token', a learned class token 'cls' is classified; 'gap', no class
      token, the mean of the patch tokens after the final layer norm
      (big_vision's pool_type='gap').
    posemb: 'learn', a learned 'pos_embedding' added after the class token is
      prepended; 'sincos2d', big_vision's fixed 2-D sin-cos embedding
      (`posemb_sincos_2d`), no parameter, added to the patches before the
      class token is prepended.
    pre_logits: 0, none; else a dense layer 'pre_logits' of this width and a
      tanh before the head (big_vision's rep_size).
    gelu: 'tanh', the tanh approximation (Flax's default); 'exact', the erf
      GELU of PyTorch and timm.
    remat: recompute each encoder block in the backward pass instead of
      storing its activations (`nn.remat`); same parameter names.
  """

  num_classes: int
  hidden_size: int
  num_layers: int
  num_heads: int
  mlp_dim: int
  patch_size: int = 16
  image_size: int = 224
  attention_impl: str | None = 'auto'
  dropout_rate: float = 0.0
  drop_path_rate: float = 0.0
  pool: str = 'token'
  posemb: str = 'learn'
  pre_logits: int = 0
  gelu: str = 'tanh'
  remat: bool = False
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def __post_init__(self):
    # Checked on creation, so a bad option is one ValueError from zoo.create.
    layers.check_rate('dropout_rate', self.dropout_rate)
    layers.check_rate('drop_path_rate', self.drop_path_rate)
    layers.check_choice('pool', self.pool, ('token', 'gap'))
    layers.check_choice('posemb', self.posemb, ('learn', 'sincos2d'))
    layers.check_choice('gelu', self.gelu, ('tanh', 'exact'))
    if self.posemb == 'sincos2d' and (self.hidden_size % 4 or
                                      self.hidden_size < 8):
      raise ValueError("posemb='sincos2d' needs a hidden_size that is a "
                       f'multiple of 4 and at least 8, got {self.hidden_size}.')
    if self.pre_logits < 0:
      raise ValueError(f'pre_logits must be 0 (none) or a width, got '
                       f'{self.pre_logits}.')
    super().__post_init__()

  @nn.compact
  def __call__(self, x, train: bool = False):
    if x.shape[1:3] != (self.image_size, self.image_size):
      raise ValueError(f'ViT built for {self.image_size}x{self.image_size} '
                       f'images got input of shape {x.shape}')
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    p = self.patch_size
    x = layers.conv(self.hidden_size, (p, p), ('conv_in', 'embed'),
                    strides=p, padding='VALID', name='embedding',
                    **layer)(x.astype(self.dtype))
    n, h, w, _ = x.shape
    x = x.reshape((n, h * w, self.hidden_size))
    if self.posemb == 'sincos2d':
      x = x + posemb_sincos_2d(h, w, self.hidden_size).astype(self.dtype)
    if self.pool == 'token':
      cls = self.param('cls', named(initializers.zeros_init(),
                                    (None, None, 'embed')),
                       (1, 1, self.hidden_size), self.param_dtype)
      cls = jnp.broadcast_to(cls, (n, 1, self.hidden_size))
      x = jnp.concatenate([cls.astype(self.dtype), x], axis=1)
    if self.posemb == 'learn':
      pos = self.param('pos_embedding',
                       named(initializers.normal(0.02),
                             (None, 'seq', 'embed')),
                       (1, x.shape[1], self.hidden_size), self.param_dtype)
      x = x + pos.astype(self.dtype)
    x = nn.with_logical_constraint(x, TOKENS)
    x = nn.Dropout(self.dropout_rate)(x, not train)
    block_cls = nn.remat(EncoderBlock) if self.remat else EncoderBlock
    rates = layers.linear_rates(self.drop_path_rate, self.num_layers)
    for i, rate in enumerate(rates):
      x = block_cls(self.num_heads, self.mlp_dim, self.attention_impl,
                    dropout_rate=self.dropout_rate, drop_path_rate=rate,
                    approximate_gelu=self.gelu == 'tanh',
                    deterministic=not train, name=f'block{i}', **layer)(x)
    norm = layers.layer_norm(name='final_norm', **layer)
    # Layer norm works token by token: normalizing the class token alone is
    # the same as normalizing every token first, as big_vision does.
    x = norm(x[:, 0]) if self.pool == 'token' else norm(x).mean(axis=1)
    if self.pre_logits:
      x = jnp.tanh(layers.dense(self.pre_logits, ('embed', 'mlp'),
                                name='pre_logits', **layer)(x))
    # A zero head, as in big_vision: training starts from uniform logits.
    return layers.dense(self.num_classes,
                        ('mlp' if self.pre_logits else 'embed', 'classes'),
                        kernel_init=initializers.zeros_init(),
                        name='head', **layer)(x)


def posemb_sincos_2d(h: int, w: int, width: int, temperature: float = 1e4):
  """big_vision's fixed position embedding of an h x w grid of patches,
  (1, h * w, width), float32: [sin(x w_k), cos(x w_k), sin(y w_k), cos(y w_k)]
  with w_k = temperature**(-k / (width/4 - 1)), k < width/4 (MoCo v3).

  Args:
    h: the grid's height, in patches.
    w: the grid's width, in patches.
    width: the embedding width; a multiple of 4, at least 8.
    temperature: the longest wavelength's scale (10000, as in big_vision).

  Returns:
    The embedding, (1, h * w, width) float32, patches in row-major order.
  """
  y, x = jnp.mgrid[:h, :w]
  omega = 1.0 / temperature**(jnp.arange(width // 4) / (width // 4 - 1))
  y = jnp.einsum('m,d->md', y.flatten(), omega)
  x = jnp.einsum('m,d->md', x.flatten(), omega)
  pe = jnp.concatenate([jnp.sin(x), jnp.cos(x), jnp.sin(y), jnp.cos(y)], axis=1)
  return pe[None].astype(jnp.float32)

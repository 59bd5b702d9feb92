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
`ViT`) give big_vision's variant (`pool='gap'`, `posemb='sincos2d'`), the
DeiT/timm recipe (`drop_path_rate`, `gelu='exact'`) and the two families
registered beside it:

  siglip_b16, siglip_l16, siglip_so400m14   SigLIP and SigLIP 2 image towers
      (Zhai et al. 2023; Tschannen et al. 2025): no class token, a
      multi-head attention-pooling head (`pool='map'`), no classifier: they
      return the pooled embedding.
  dinov2_s14, dinov2_b14, dinov2_l14 and their _reg4 variants   DINOv2
      (Oquab et al. 2023), with 4 register tokens (Darcet et al. 2023):
      layer scale, 14x14 patches on 518x518 images, any input size
      (`dynamic_size`), no classifier: they return the class token's
      features.

Every variant takes `num_classes=0` (no head: the pooled features) and
`features=True` (every block's patch tokens, for dense tasks).
"""

import functools
import logging
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.linen import initializers

from zoo import layers
from zoo.partitioning import TOKENS
from zoo.registry import register

named = layers.named


class Attention(nn.Module):
  """Multi-head attention with separate query, key, value projections: the
  tokens `x` attend to `context` (default: to themselves)."""

  num_heads: int
  attention_impl: str | None
  dtype: Any
  param_dtype: Any

  @nn.compact
  def __call__(self, x, context=None, mask=None):
    """`mask` (batch, context tokens): True for the tokens attended to, False
    for padding (SigLIP's text tower); None: every token."""
    context = x if context is None else context
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
        nn.with_logical_constraint(project(name=name)(inputs),
                                   ('batch', 'seq', 'heads', 'kv'))
        for name, inputs in (('query', x), ('key', context),
                             ('value', context)))
    if mask is not None:
      # Spelled out over the queries, as zoo/decoder.py does for cuDNN.
      mask = jnp.broadcast_to(mask[:, None, None, :].astype(bool),
                              (x.shape[0], 1, x.shape[1], context.shape[1]))
    y = dot_product_attention(q, k, v, self.attention_impl, mask=mask)
    return nn.Einsum(
        (*heads, embed), 'bthk,hkd->btd',
        kernel_init=named(_xavier(in_axis=(0, 1), out_axis=2),
                          ('heads', 'kv', 'embed')),
        bias_init=named(initializers.zeros_init(), ('embed',)),
        name='out', **layer)(y)


def dot_product_attention(q, k, v, implementation: str | None, *,
                          backend: str | None = None, **options):
  """`jax.nn.dot_product_attention` with 'auto' resolved for these inputs on
  `backend` (default: JAX's default backend).

  Args:
    q: queries, (batch, tokens, heads, head_dim); `k` and `v` alike (or
      fewer heads: grouped-query attention).
    k: keys.
    v: values.
    implementation: 'auto' (cuDNN on GPU for bfloat16/float16 inputs where
      it takes the shapes, else XLA, with a warning once per shape), 'xla',
      'cudnn', or None (JAX's own choice).
    backend: the platform 'auto' decides for ('gpu', 'cpu', 'tpu'); None:
      JAX's default backend.
    **options: more arguments of `jax.nn.dot_product_attention` (mask,
      is_causal).

  Returns:
    The attention output, shaped like `q`.
  """
  if implementation != 'auto':
    return jax.nn.dot_product_attention(q, k, v, implementation=implementation,
                                        **options)
  backend = backend or jax.default_backend()
  if backend == 'gpu' and q.dtype in (jnp.bfloat16, jnp.float16):
    # cuDNN's checks (head dim, sequence lengths, cuDNN version) run while
    # tracing, so a refusal is an exception here, not a failed compile.
    try:
      return jax.nn.dot_product_attention(q, k, v, implementation='cudnn',
                                          **options)
    except (NotImplementedError, ValueError, RuntimeError) as e:
      _warn_once(f'cuDNN attention is not available for queries of shape '
                 f'{q.shape} ({e}); using XLA attention.')
  return jax.nn.dot_product_attention(q, k, v, implementation='xla',
                                      **options)


@functools.cache
def _warn_once(message: str):
  logging.getLogger(__name__).warning(message)


def _xavier(in_axis, out_axis):
  """Glorot uniform over a kernel whose inputs or outputs span several axes."""
  return initializers.variance_scaling(1.0, 'fan_avg', 'uniform',
                                       in_axis=in_axis, out_axis=out_axis)


def mlp(x, mlp_dim: int, approximate_gelu: bool, dropout,
        bias_init_std: float = 0.0, **layer):
  """dense to `mlp_dim`, GELU, `dropout`, dense back to x's width: the
  transformer's MLP. Call it inside a compact method: its layers are the
  caller's Dense_0 and Dense_1 (names as in big_vision's MlpBlock).

  Args:
    x: the tokens, (batch, tokens, width).
    mlp_dim: the hidden features.
    approximate_gelu: the tanh GELU (True) or the exact erf one.
    dropout: applied to the hidden features (a function of them).
    bias_init_std: both biases start from N(0, this**2); 0: zeros.
    **layer: dtype and param_dtype of the dense layers.

  Returns:
    The MLP's output, shaped like `x`.
  """
  dense = functools.partial(
      layers.dense, kernel_init=initializers.xavier_uniform(),
      bias_init=(initializers.normal(bias_init_std) if bias_init_std
                 else initializers.zeros_init()), **layer)
  y = nn.gelu(dense(mlp_dim, ('embed', 'mlp'))(x), approximate=approximate_gelu)
  y = dropout(nn.with_logical_constraint(y, ('batch', 'seq', 'mlp')))
  return dense(x.shape[-1], ('mlp', 'embed'))(y)


class LayerScale(nn.Module):
  """A learned scale per channel of a residual branch (CaiT, DINOv2),
  starting at `init_value`; named 'norm' for partitioning, like a norm's
  scale."""

  init_value: float
  param_dtype: Any

  @nn.compact
  def __call__(self, x):
    scale = self.param('scale', named(initializers.constant(self.init_value),
                                      ('norm',)),
                       (x.shape[-1],), self.param_dtype)
    return x * scale.astype(x.dtype)


class EncoderBlock(nn.Module):
  """x + attention(norm(x)), then x + mlp(norm(x)); each branch passes
  through dropout, layer scale (if `layer_scale`, its initial value), then
  drop path, unless `deterministic`. `mask` (batch, tokens), if given, keeps
  the False tokens (padding) out of the attention."""

  num_heads: int
  mlp_dim: int
  attention_impl: str | None
  dtype: Any
  param_dtype: Any
  dropout_rate: float = 0.0
  drop_path_rate: float = 0.0
  approximate_gelu: bool = True
  layer_scale: float = 0.0
  mlp_bias_init_std: float = 0.0
  deterministic: bool = True

  @nn.compact
  def __call__(self, x, mask=None):
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)

    def dropout(y):
      return nn.Dropout(self.dropout_rate)(y, self.deterministic)

    def add(x, branch):
      branch = dropout(branch)
      if self.layer_scale:
        branch = LayerScale(self.layer_scale, self.param_dtype)(branch)
      branch = layers.drop_path(branch, self.drop_path_rate,
                                self.deterministic)
      return nn.with_logical_constraint(x + branch, TOKENS)

    x = add(x, Attention(self.num_heads, self.attention_impl,
                         **layer)(layers.layer_norm(**layer)(x), mask=mask))
    return add(x, mlp(layers.layer_norm(**layer)(x), self.mlp_dim,
                      self.approximate_gelu, dropout,
                      self.mlp_bias_init_std, **layer))


class MAPHead(nn.Module):
  """Multi-head attention pooling (big_vision's MAPHead, timm's
  AttentionPoolLatent): a learned probe attends to the tokens, then
  y + mlp(norm(y)); returns the probe's output, (batch, width)."""

  num_heads: int
  mlp_dim: int
  attention_impl: str | None
  approximate_gelu: bool
  dtype: Any
  param_dtype: Any
  mlp_bias_init_std: float = 0.0

  @nn.compact
  def __call__(self, x):
    n, _, width = x.shape
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    probe = self.param('probe', named(initializers.xavier_uniform(),
                                      (None, None, 'embed')),
                       (1, 1, width), self.param_dtype)
    probe = jnp.broadcast_to(probe.astype(self.dtype), (n, 1, width))
    y = Attention(self.num_heads, self.attention_impl, **layer)(probe, x)
    y = y + mlp(layers.layer_norm(**layer)(y), self.mlp_dim,
                self.approximate_gelu, lambda h: h, self.mlp_bias_init_std,
                **layer)
    return y[:, 0]


def _square_rgb(kwargs):
  return (kwargs['image_size'], kwargs['image_size'], 3)


# Counts as published: timm's (1000 classes, 224x224 inputs).
_VIT = dict(family='transformer', input_shape=_square_rgb,
            test_kwargs=dict(hidden_size=32, num_layers=2, num_heads=2,
                             mlp_dim=64, patch_size=8, image_size=32),
            num_classes=1000, patch_size=16, image_size=224)
# Image towers, no classifier; timm's counts at its defaults (num_classes=0,
# the image size of the name). Flax's tanh GELU, as big_vision trained them.
_SIGLIP = dict(_VIT, num_classes=0, pool='map')
# Features, no classifier; timm's counts at its defaults (num_classes=0,
# 518x518). The exact GELU of DINOv2's PyTorch code; layer scale started at
# DINOv2's 1e-5. With registers, timm's layout: the position embedding has
# entries for the patches only (the class token's entry is added to the class
# token when timm converts DINOv2's files).
_DINOV2 = dict(_VIT, num_classes=0, patch_size=14, image_size=518,
               gelu='exact', layer_scale=1e-5, dynamic_size=True)
_REG4 = dict(_DINOV2, num_registers=4, class_posemb=False)


@register('vit_ti16', hidden_size=192, num_layers=12, num_heads=3,
          mlp_dim=768, reference_params=5_717_416, **_VIT)
@register('vit_s16', hidden_size=384, num_layers=12, num_heads=6,
          mlp_dim=1536, reference_params=22_050_664, **_VIT)
@register('vit_b16', hidden_size=768, num_layers=12, num_heads=12,
          mlp_dim=3072, reference_params=86_567_656,
          reference_gflops=2 * 17.6, **_VIT)
@register('vit_l16', hidden_size=1024, num_layers=24, num_heads=16,
          mlp_dim=4096, reference_params=304_326_632, **_VIT)
@register('siglip_b16', hidden_size=768, num_layers=12, num_heads=12,
          mlp_dim=3072, reference_params=92_884_224, **_SIGLIP)
@register('siglip_l16', hidden_size=1024, num_layers=24, num_heads=16,
          mlp_dim=4096, reference_params=315_956_224,
          **dict(_SIGLIP, image_size=256))
@register('siglip_so400m14', hidden_size=1152, num_layers=27, num_heads=16,
          mlp_dim=4304, reference_params=427_680_704,
          **dict(_SIGLIP, patch_size=14))
@register('dinov2_s14', hidden_size=384, num_layers=12, num_heads=6,
          mlp_dim=1536, reference_params=22_056_192, **_DINOV2)
@register('dinov2_b14', hidden_size=768, num_layers=12, num_heads=12,
          mlp_dim=3072, reference_params=86_579_712, **_DINOV2)
@register('dinov2_l14', hidden_size=1024, num_layers=24, num_heads=16,
          mlp_dim=4096, reference_params=304_367_616, **_DINOV2)
@register('dinov2_s14_reg4', hidden_size=384, num_layers=12, num_heads=6,
          mlp_dim=1536, reference_params=22_057_344, **_REG4)
@register('dinov2_b14_reg4', hidden_size=768, num_layers=12, num_heads=12,
          mlp_dim=3072, reference_params=86_582_016, **_REG4)
@register('dinov2_l14_reg4', hidden_size=1024, num_layers=24, num_heads=16,
          mlp_dim=4096, reference_params=304_370_688, **_REG4)
class ViT(nn.Module):
  """Classifies the class token, the mean of the tokens or their attention
  pooling, after a last norm.

  Inputs must be `image_size` square (the position embeddings are made for
  that many patches) unless `dynamic_size`. `train=True` turns dropout and
  drop path on; they draw from the 'dropout' rng collection
  (`apply(..., rngs={'dropout': key})`). Logits come out in the computation
  `dtype`; the recipes upcast them.

  Outputs: logits (batch, num_classes); with num_classes=0 no head, the
  pooled features (batch, hidden_size) (after `pre_logits` if any), as
  timm's num_classes=0. With `features=True`, a tuple of every block's
  output, first to last: its patch tokens (no class or register tokens)
  before the final norm, as a grid (batch, H/p, W/p, hidden_size), stride p
  (`patch_size`) for H x W inputs, as timm's `forward_intermediates`; the
  final norm, pooling and head are not built.

  Options (the defaults are the original ViT):
    dropout_rate: dropout after the position embeddings are added, on the
      attention output and in the MLP after the activation and after the
      second dense layer (ViT paper, big_vision).
    drop_path_rate: stochastic depth on each residual branch, per example,
      rising linearly from 0 at the first block to this at the last (DeiT,
      timm).
    pool: 'token', a learned class token 'cls' is classified; 'gap', no class
      token, the mean of the patch tokens after the final layer norm
      (big_vision's pool_type='gap'); 'map', no class token, multi-head
      attention pooling of the normalized patch tokens by a learned probe
      ('map_head', big_vision's pool_type='map', timm's global_pool='map';
      SigLIP).
    posemb: 'learn', a learned 'pos_embedding' added after the class token is
      prepended; 'sincos2d', big_vision's fixed 2-D sin-cos embedding
      (`posemb_sincos_2d`), no parameter, added to the patches before the
      class token is prepended.
    class_posemb: with pool='token' and posemb='learn': whether the learned
      embedding has an entry for the class token (timm, vit_jax, DINOv2);
      False, entries for the patches only, added before the class token is
      prepended (timm's no_embed_class: DeiT III, DINOv2 with registers).
    num_registers: learned 'registers' tokens after the class token (DINOv2
      with registers, timm's reg_tokens); no position embedding, not
      pooled.
    layer_scale: 0, none; else each residual branch is scaled per channel
      by a learned 'LayerScale_{0,1}/scale' started at this value (CaiT;
      DINOv2: 1e-5).
    dynamic_size: inputs of any size in whole patches, not only
      `image_size`; a learned embedding's grid (made for `image_size`) is
      resampled to the input's as timm's dynamic_img_size does it
      (`resample_posemb`: bicubic, antialiased), sin-cos is computed for
      it.
    pre_logits: 0, none; else a dense layer 'pre_logits' of this width and a
      tanh before the head (big_vision's rep_size).
    gelu: 'tanh', the tanh approximation (Flax's default); 'exact', the erf
      GELU of PyTorch and timm.
    mlp_bias_init_std: 0, the MLPs' biases (blocks and MAP head) start at
      zero; else from N(0, this**2) (big_vision's MlpBlock: 1e-6).
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
  class_posemb: bool = True
  num_registers: int = 0
  layer_scale: float = 0.0
  dynamic_size: bool = False
  pre_logits: int = 0
  gelu: str = 'tanh'
  mlp_bias_init_std: float = 0.0
  remat: bool = False
  features: bool = False
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def __post_init__(self):
    # Checked on creation, so a bad option is one ValueError from zoo.create.
    layers.check_classes(self.num_classes)
    layers.check_rate('dropout_rate', self.dropout_rate)
    layers.check_rate('drop_path_rate', self.drop_path_rate)
    layers.check_choice('pool', self.pool, ('token', 'gap', 'map'))
    layers.check_choice('posemb', self.posemb, ('learn', 'sincos2d'))
    layers.check_choice('gelu', self.gelu, ('tanh', 'exact'))
    if self.posemb == 'sincos2d' and (self.hidden_size % 4 or
                                      self.hidden_size < 8):
      raise ValueError("posemb='sincos2d' needs a hidden_size that is a "
                       f'multiple of 4 and at least 8, got {self.hidden_size}.')
    for option in ('pre_logits', 'num_registers', 'layer_scale',
                   'mlp_bias_init_std'):
      if getattr(self, option) < 0:
        raise ValueError(f'{option} must be 0 (none) or positive, got '
                         f'{getattr(self, option)}.')
    super().__post_init__()

  @nn.compact
  def __call__(self, x, train: bool = False):
    p = self.patch_size
    if self.dynamic_size:
      if x.shape[1] % p or x.shape[2] % p or min(x.shape[1:3]) == 0:
        raise ValueError(f'ViT with {p}x{p} patches got input of shape '
                         f'{x.shape}, not whole patches')
    elif x.shape[1:3] != (self.image_size, self.image_size):
      raise ValueError(f'ViT built for {self.image_size}x{self.image_size} '
                       f'images got input of shape {x.shape}')
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    width = self.hidden_size
    x = layers.conv(width, (p, p), ('conv_in', 'embed'), strides=p,
                    padding='VALID', name='embedding',
                    **layer)(x.astype(self.dtype))
    n, h, w, _ = x.shape
    x = x.reshape((n, h * w, width))
    class_token = self.pool == 'token'
    # Whether the learned embedding is added after the class token is
    # prepended, with an entry for it, or to the patches only.
    class_entry = (class_token and self.class_posemb and
                   self.posemb == 'learn')
    if self.posemb == 'sincos2d':
      x = x + posemb_sincos_2d(h, w, width).astype(self.dtype)
    elif not class_entry:
      x = x + self._learned_posemb((h, w), 0)
    if class_token:
      cls = self.param('cls', named(initializers.zeros_init(),
                                    (None, None, 'embed')),
                       (1, 1, width), self.param_dtype)
      cls = jnp.broadcast_to(cls, (n, 1, width))
      x = jnp.concatenate([cls.astype(self.dtype), x], axis=1)
      if class_entry:
        x = x + self._learned_posemb((h, w), 1)
    if self.num_registers:
      registers = self.param('registers', named(initializers.normal(1e-6),
                                                (None, None, 'embed')),
                             (1, self.num_registers, width), self.param_dtype)
      registers = jnp.broadcast_to(registers.astype(self.dtype),
                                   (n, self.num_registers, width))
      x = jnp.concatenate([x[:, :int(class_token)], registers,
                           x[:, int(class_token):]], axis=1)
    prefix = int(class_token) + self.num_registers  # Tokens before patches.
    x = nn.with_logical_constraint(x, TOKENS)
    x = nn.Dropout(self.dropout_rate)(x, not train)
    block_cls = nn.remat(EncoderBlock) if self.remat else EncoderBlock
    rates = layers.linear_rates(self.drop_path_rate, self.num_layers)
    features = []
    for i, rate in enumerate(rates):
      x = block_cls(self.num_heads, self.mlp_dim, self.attention_impl,
                    dropout_rate=self.dropout_rate, drop_path_rate=rate,
                    approximate_gelu=self.gelu == 'tanh',
                    layer_scale=self.layer_scale,
                    mlp_bias_init_std=self.mlp_bias_init_std,
                    deterministic=not train,
                    name=f'block{i}', **layer)(x)
      if self.features:
        features.append(x[:, prefix:].reshape((n, h, w, width)))
    if self.features:
      return tuple(features)
    norm = layers.layer_norm(name='final_norm', **layer)
    if class_token:
      # Layer norm works token by token: normalizing the class token alone
      # is the same as normalizing every token first, as big_vision does.
      x = norm(x[:, 0])
    elif self.pool == 'gap':
      x = norm(x[:, prefix:]).mean(axis=1)
    else:
      x = MAPHead(self.num_heads, self.mlp_dim, self.attention_impl,
                  self.gelu == 'tanh', name='map_head',
                  mlp_bias_init_std=self.mlp_bias_init_std,
                  **layer)(norm(x[:, prefix:]))
    if self.pre_logits:
      x = jnp.tanh(layers.dense(self.pre_logits, ('embed', 'mlp'),
                                name='pre_logits', **layer)(x))
    # A zero head, as in big_vision: training starts from uniform logits.
    return layers.head(self.num_classes,
                       ('mlp' if self.pre_logits else 'embed', 'classes'),
                       kernel_init=initializers.zeros_init(), name='head',
                       **layer)(x)

  def _learned_posemb(self, grid: tuple[int, int], prefix: int):
    """The learned 'pos_embedding' for a `grid` of patches after `prefix`
    tokens with an entry (the class token's), in `dtype`: made for
    `image_size`, resampled to `grid` where that differs."""
    side = self.image_size // self.patch_size
    posemb = self.param('pos_embedding',
                        named(initializers.normal(0.02),
                              (None, 'seq', 'embed')),
                        (1, prefix + side * side, self.hidden_size),
                        self.param_dtype)
    if grid != (side, side):
      posemb = jnp.concatenate(
          [posemb[:, :prefix],
           resample_posemb(posemb[:, prefix:], (side, side), grid)], axis=1)
    return posemb.astype(self.dtype)


def bicubic_matrix(old: int, new: int, antialias: bool = True) -> np.ndarray:
  """The (new, old) matrix of torch's bicubic resize of one axis from `old`
  to `new` samples, align_corners=False (`F.interpolate`).

  Without antialiasing, Keys' cubic kernel with a=-0.75 at source
  coordinate (i + 1/2) old/new - 1/2, the four nearest samples, indices
  clamped at the edges. With it (torch's separable antialiased kernel, as
  PIL), Keys' kernel with a=-0.5, stretched by old/new when shrinking,
  over the samples within its support only, the weights normalized to sum
  to 1.

  Args:
    old: the samples in.
    new: the samples out.
    antialias: torch's antialias=True (timm's `resample_abs_pos_embed`
      default).

  Returns:
    The weights, float64: resized = matrix @ samples.
  """
  scale = old / new
  weights = np.zeros((new, old))
  for i in range(new):
    center = scale * (i + 0.5)
    if antialias:
      stretch = max(scale, 1.0)
      lo = max(int(center - 2 * stretch + 0.5), 0)
      hi = min(int(center + 2 * stretch + 0.5), old)
      taps = np.arange(lo, hi)
      kernel = _keys_cubic((taps - center + 0.5) / stretch, -0.5)
      weights[i, lo:hi] = kernel / kernel.sum()
    else:
      first = np.floor(center - 0.5)
      taps = first + np.arange(-1, 3)
      kernel = _keys_cubic(taps - (center - 0.5), -0.75)
      np.add.at(weights[i], np.clip(taps, 0, old - 1).astype(int), kernel)
  return weights


def _keys_cubic(x: np.ndarray, a: float) -> np.ndarray:
  """Keys' cubic convolution kernel with parameter `a` at `x`."""
  x = np.abs(x)
  near = ((a + 2) * x - (a + 3)) * x * x + 1
  far = ((x - 5) * x + 8) * x * a - 4 * a
  return np.where(x < 1, near, np.where(x < 2, far, 0.0))


def resample_posemb(posemb, old: tuple[int, int], new: tuple[int, int]):
  """A position embedding of an `old` grid of patches resampled to a `new`
  one as timm's `resample_abs_pos_embed` does (bicubic, antialiased, in
  float32): its result within float rounding.

  Args:
    posemb: (1, old height * old width, width), patches in row-major order.
    old: the grid's (height, width), in patches.
    new: the new grid's (height, width).

  Returns:
    (1, new height * new width, width) float32.
  """
  grid = posemb.reshape(*old, -1).astype(jnp.float32)
  rows, cols = (jnp.asarray(bicubic_matrix(o, n), jnp.float32)
                for o, n in zip(old, new))
  grid = jnp.einsum('Hh,hwd,Ww->HWd', rows, grid, cols,
                    precision=jax.lax.Precision.HIGHEST)
  return grid.reshape(1, new[0] * new[1], -1)


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

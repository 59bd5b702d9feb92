"""Decoder-only language models: GPT-2 and the Llama family in one class.

    model = zoo.create('smollm2_135m')
    logits = model.apply(variables, tokens)   # int32 (batch, length) -> (batch, length, vocab)

One `Decoder` covers both shapes of today's open models; the options pick
the pieces, and the registrations give the originals' sizes (Hugging Face
`transformers` computes the same logits from the same weights: zoo/convert/
transformers_decoder.py converts its files, tests/unit/zoo/convert/
test_convert_transformers_decoder.py compares):

  gpt2, gpt2_medium          GPT-2 (Radford et al. 2019): learned positions,
      layer norm, an MLP with the tanh GELU (transformers' `gelu_new`),
      biases everywhere, the head tied to the token embedding.
  smollm2_135m, smollm2_360m, llama3_2_1b, llama3_8b, qwen2_5_0_5b
      the Llama shape (Touvron et al. 2023): rotary position embeddings (RoPE; Llama 3's
      frequency scaling for llama3_2_1b), grouped-query attention, RMS norm,
      the SwiGLU MLP, no biases (but Qwen2's on the query, key and value
      projections), tied embeddings (`tie_embeddings=False`: a separate
      head, as Llama 3 8B has: llama3_8b).

Attention is causal, through `jax.nn.dot_product_attention` (`attention_impl`
as the ViT's: 'auto', 'xla', 'cudnn'); `mask` (batch, length), True for real
tokens, keeps padding out of it. Positions count from 0 at the first token
of the input, padding included, as transformers' forward does.

Packed sequences (recipes/data/text/packing.py) hold several documents per
row: `segment_ids` (batch, length) keeps attention within each document
(tokens attend only to tokens of the same id), and `positions` (batch,
length) restarts the positions (RoPE's angles or the learned table's rows)
at each document's first token, so a packed row gives each document the
logits it has alone.
"""

import functools
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.linen import initializers
from jax import lax

from zoo import layers
from zoo.partitioning import TOKENS
from zoo.registry import register
from zoo.vit import dot_product_attention

named = layers.named
# GPT-2's and transformers' `initializer_range`: every weight starts N(0, 0.02²).
_INIT = initializers.normal(0.02)


def rope_frequencies(head_dim: int, theta: float,
                     scaling: tuple[float, float, float, int] | None = None
                     ) -> np.ndarray:
  """The angular frequency of each pair of a head's features, float32:
  theta ** (-2i / head_dim) (Su et al. 2021), with Llama 3's scaling.

  Args:
    head_dim: the features of one head (even).
    theta: the base wavelength (10000 in the paper; 500000 in Llama 3).
    scaling: Llama 3's (factor, low_freq_factor, high_freq_factor,
      original_max_length): wavelengths longer than original_max_length /
      low_freq_factor are stretched by `factor`, those shorter than
      original_max_length / high_freq_factor kept, those between
      interpolated (transformers' `_compute_llama3_parameters`); None:
      none.

  Returns:
    (head_dim // 2,) float32.
  """
  inverse = 1.0 / theta**(np.arange(0, head_dim, 2) / head_dim)
  if scaling:
    factor, low, high, original = scaling
    wavelength = 2 * math.pi / inverse
    stretched = np.where(wavelength > original / low, inverse / factor,
                         inverse)
    smooth = (original / wavelength - low) / (high - low)
    between = ((wavelength >= original / high) &
               (wavelength <= original / low))
    inverse = np.where(
        between, (1 - smooth) * stretched / factor + smooth * stretched,
        stretched)
  return inverse.astype(np.float32)


def rotate(x, cos, sin):
  """Rotary position embedding of `x` (batch, length, heads, head_dim),
  the halves of each head paired as transformers' `rotate_half` pairs them
  (feature i with feature i + head_dim/2), computed in float32.

  Args:
    x: queries or keys.
    cos: (length, head_dim) or (batch or 1, length, head_dim) cosines of
      the angles, each angle twice (each row's own: packed documents,
      cached decoding).
    sin: the sines, likewise.

  Returns:
    `x` rotated, in its dtype.
  """
  y = x.astype(jnp.float32)
  first, second = jnp.split(y, 2, axis=-1)
  turned = jnp.concatenate([-second, first], axis=-1)
  cos, sin = cos[..., None, :], sin[..., None, :]  # Broadcast over heads.
  return (y * cos + turned * sin).astype(x.dtype)


class SelfAttention(nn.Module):
  """Self-attention with `num_kv_heads` key and value heads shared by groups
  of the `num_heads` query heads (grouped-query attention; as many:
  multi-head attention); causal unless `causal=False` (an encoder's)."""

  num_heads: int
  num_kv_heads: int
  head_dim: int
  qkv_bias: bool
  out_bias: bool
  attention_impl: str | None
  dtype: Any
  param_dtype: Any
  causal: bool = True

  @nn.compact
  def __call__(self, x, rope, mask, cache=None):
    """`mask`: (batch, length) over the keys, or (batch, 1, length,
    length) over query and key pairs; None: every key. `cache`: this
    layer's keys and values while decoding (see `Decoder.init_cache`)."""
    embed = x.shape[-1]
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)

    def project(heads, head_names, name):
      # nn.Einsum, as the ViT's: 3-d kernels keep their logical names.
      return nn.Einsum(
          (embed, heads, self.head_dim), 'btd,dhk->bthk',
          use_bias=self.qkv_bias,
          kernel_init=named(_INIT, ('embed', head_names, 'kv')),
          bias_init=named(initializers.zeros_init(), (head_names, 'kv')),
          name=name, **layer)(x)

    q = project(self.num_heads, 'heads', 'query')
    k = project(self.num_kv_heads, 'kv_heads', 'key')
    v = project(self.num_kv_heads, 'kv_heads', 'value')
    q = nn.with_logical_constraint(q, ('batch', 'seq', 'heads', 'kv'))
    k, v = (nn.with_logical_constraint(a, ('batch', 'seq', 'kv_heads', 'kv'))
            for a in (k, v))
    if rope is not None:
      q, k = rotate(q, *rope), rotate(k, *rope)
    causal = self.causal
    if cache is not None:  # Decoding: see `Decoder.init_cache`.
      k, v, cache = _cached(cache, k, v)
      mask, causal = mask[:, None], False  # (batch, 1, length, cache).
    elif mask is not None and mask.ndim == 2:
      # Spelled out over the queries: cuDNN refuses a mask broadcast along
      # them (measured on an H200), and XLA fuses the broadcast away.
      n, t = mask.shape
      mask = jnp.broadcast_to(mask[:, None, None, :].astype(bool),
                              (n, 1, t, t))
    y = dot_product_attention(q, k, v, self.attention_impl, mask=mask,
                              is_causal=causal)
    y = nn.Einsum(
        (self.num_heads, self.head_dim, embed), 'bthk,hkd->btd',
        use_bias=self.out_bias,
        kernel_init=named(_INIT, ('heads', 'kv', 'embed')),
        bias_init=named(initializers.zeros_init(), ('embed',)),
        name='out', **layer)(y)
    return y if cache is None else (y, cache)


def _cached(cache, k, v):
  """(keys, values, the layer's cache) with `k` and `v` (batch, length,
  kv_heads, head_dim) written into each row's cache at its 'index'."""
  write = jax.vmap(lambda c, u, i: lax.dynamic_update_slice_in_dim(c, u, i, 0))
  keys = write(cache['key'], k.astype(cache['key'].dtype), cache['index'])
  values = write(cache['value'], v.astype(cache['value'].dtype),
                 cache['index'])
  return (keys.astype(k.dtype), values.astype(v.dtype),
          {'key': keys, 'value': values})


class DecoderBlock(nn.Module):
  """x + attention(norm(x)), then x + mlp(norm(x)); each branch through
  dropout unless `deterministic`."""

  num_heads: int
  num_kv_heads: int
  head_dim: int
  mlp_dim: int
  norm: str
  norm_epsilon: float
  mlp: str
  bias: bool
  qkv_bias: bool
  dropout_rate: float
  attention_impl: str | None
  dtype: Any
  param_dtype: Any
  deterministic: bool = True

  @nn.compact
  def __call__(self, x, rope, mask, cache=None):
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    norm = functools.partial(
        layers.layer_norm if self.norm == 'layer' else layers.rms_norm,
        epsilon=self.norm_epsilon, **layer)

    def add(x, branch):
      branch = nn.Dropout(self.dropout_rate)(branch, self.deterministic)
      return nn.with_logical_constraint(x + branch, TOKENS)

    y = SelfAttention(
        self.num_heads, self.num_kv_heads, self.head_dim,
        self.bias or self.qkv_bias, self.bias, self.attention_impl,
        name='attention', **layer)(norm(name='attention_norm')(x), rope, mask,
                                   cache)
    if cache is not None:
      y, cache = y
    x = add(x, y)
    h = norm(name='mlp_norm')(x)
    dense = functools.partial(layers.dense, use_bias=self.bias,
                              kernel_init=_INIT, **layer)
    up = dense(self.mlp_dim, ('embed', 'mlp'), name='up')(h)
    if self.mlp == 'swiglu':  # Shazeer 2020: silu(gate) * up.
      up = nn.silu(dense(self.mlp_dim, ('embed', 'mlp'), name='gate')(h)) * up
    else:  # GPT-2's `gelu_new`: the tanh approximation.
      up = nn.gelu(up, approximate=True)
    up = nn.with_logical_constraint(up, ('batch', 'seq', 'mlp'))
    x = add(x, dense(x.shape[-1], ('mlp', 'embed'), name='down')(up))
    return x if cache is None else (x, cache)


def _tokens(kwargs):
  return (kwargs['max_length'],)


# Counts as transformers builds the originals from their config.json (see
# tests/unit/zoo/convert/test_convert_transformers_decoder.py, which builds
# each at full size on the `meta` device and counts).
_TEXT = dict(family='decoder', modality='text', input_shape=_tokens)
_GPT2 = dict(_TEXT, vocab_size=50257, max_length=1024, positions='learned',
             norm='layer', norm_epsilon=1e-5, mlp='gelu', bias=True,
             test_kwargs=dict(vocab_size=97, hidden_size=32, num_layers=2,
                              num_heads=2, mlp_dim=128, max_length=16))
_LLAMA = dict(_TEXT, test_kwargs=dict(vocab_size=97, hidden_size=32,
                                      num_layers=2, num_heads=4,
                                      num_kv_heads=2, mlp_dim=64,
                                      max_length=16))


@register('gpt2', hidden_size=768, num_layers=12, num_heads=12,
          mlp_dim=3072, reference_params=124_439_808, **_GPT2)
@register('gpt2_medium', hidden_size=1024, num_layers=24, num_heads=16,
          mlp_dim=4096, reference_params=354_823_168, **_GPT2)
@register('smollm2_135m', vocab_size=49152, hidden_size=576, num_layers=30,
          num_heads=9, num_kv_heads=3, mlp_dim=1536, max_length=8192,
          rope_theta=100000.0, reference_params=134_515_008, **_LLAMA)
@register('smollm2_360m', vocab_size=49152, hidden_size=960, num_layers=32,
          num_heads=15, num_kv_heads=5, mlp_dim=2560, max_length=8192,
          rope_theta=100000.0, reference_params=361_821_120, **_LLAMA)
@register('llama3_2_1b', vocab_size=128256, hidden_size=2048, num_layers=16,
          num_heads=32, num_kv_heads=8, mlp_dim=8192, max_length=131072,
          rope_theta=500000.0, rope_scaling=(32.0, 1.0, 4.0, 8192),
          reference_params=1_235_814_400, **_LLAMA)
@register('llama3_8b', vocab_size=128256, hidden_size=4096, num_layers=32,
          num_heads=32, num_kv_heads=8, mlp_dim=14336, max_length=8192,
          rope_theta=500000.0, tie_embeddings=False,
          reference_params=8_030_261_248, **_LLAMA)
@register('qwen2_5_0_5b', vocab_size=151936, hidden_size=896, num_layers=24,
          num_heads=14, num_kv_heads=2, mlp_dim=4864, max_length=32768,
          rope_theta=1000000.0, norm_epsilon=1e-6, qkv_bias=True,
          reference_params=494_032_768, **_LLAMA)
class Decoder(nn.Module):
  """Next-token logits of a causal transformer.

  Input: int token ids (batch, length), length at most `max_length` with
  learned positions; `mask` (batch, length), True (1) for real tokens and
  False for padding, which no token attends to; for packed sequences,
  `segment_ids` (batch, length), attention only between tokens of equal
  ids, and `positions` (batch, length), each token's position in its
  document (None: 0, 1, ... along the row). Output: logits (batch,
  length, vocab_size) in `logits_dtype` (default: the computation `dtype`).
  `train=True` turns dropout on (drawing from the 'dropout' rng
  collection).

  Options (the defaults are the Llama shape):
    num_kv_heads: key and value heads, each shared by num_heads /
      num_kv_heads query heads; None: num_heads.
    head_dim: the features of one head; None: hidden_size / num_heads.
    max_length: the longest input with learned positions (the table's
      length); the context the model was made for with RoPE (its input
      shape in the registry).
    positions: 'rope' (rotary, in every attention layer) or 'learned'
      (GPT-2: a table added to the token embeddings).
    rope_theta, rope_scaling: RoPE's base wavelength and Llama 3's
      (factor, low_freq_factor, high_freq_factor, original_max_length)
      (see `rope_frequencies`).
    norm: 'rms' or 'layer' (GPT-2), with `norm_epsilon`.
    mlp: 'swiglu' (gate, up and down projections) or 'gelu' (GPT-2: up,
      the tanh GELU, down).
    bias: biases in every dense layer (GPT-2); qkv_bias: in the query, key
      and value projections only (Qwen2).
    tie_embeddings: the head is the token embedding (transposed); False:
      a separate 'head'.
    dropout_rate: dropout on the embeddings and on each residual branch
      (GPT-2 trained with 0.1; transformers' attention dropout has no
      counterpart).
    remat: recompute each block in the backward pass (less memory).
    logits_dtype: the head's dtype (e.g. jnp.float32 under bfloat16: a
      large vocabulary's logits in full precision); None: `dtype`.

  Cached decoding (zoo/generation.py): with `cache=` (`init_cache`'s, then
  the one returned) the call returns (logits, cache): each layer's keys and
  values are written into the cache at each row's 'index', the tokens
  attend to the cache up to themselves, and their positions continue from
  the index. Padding is on the right: `mask` then only counts each row's
  real tokens, by which its index moves on (a prompt's padding is
  overwritten by the tokens that follow it).
  """

  vocab_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  mlp_dim: int
  num_kv_heads: int | None = None
  head_dim: int | None = None
  max_length: int = 2048
  positions: str = 'rope'
  rope_theta: float = 10000.0
  rope_scaling: tuple[float, float, float, int] | None = None
  norm: str = 'rms'
  norm_epsilon: float = 1e-5
  mlp: str = 'swiglu'
  bias: bool = False
  qkv_bias: bool = False
  tie_embeddings: bool = True
  dropout_rate: float = 0.0
  remat: bool = False
  attention_impl: str | None = 'auto'
  logits_dtype: Any = None
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, tokens, train: bool = False, mask=None,
               segment_ids=None, positions=None, cache=None):
    self._check(tokens)
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    num_kv_heads = self.num_kv_heads or self.num_heads
    head_dim = self.head_dim or self.hidden_size // self.num_heads
    length = tokens.shape[1]
    table = self.param('token_embedding', named(_INIT, ('vocab', 'embed')),
                       (self.vocab_size, self.hidden_size), self.param_dtype)
    x = jnp.take(table, tokens, axis=0).astype(self.dtype)
    if positions is None:  # Cached: each row from its index on.
      positions = jnp.arange(length)[None] + (0 if cache is None else
                                              cache['index'][:, None])
    rope = None
    if self.positions == 'learned':
      learned = self.param('position_embedding',
                           named(_INIT, ('seq', 'embed')),
                           (self.max_length, self.hidden_size),
                           self.param_dtype)
      x = x + jnp.take(learned, positions, axis=0).astype(self.dtype)
    else:
      angles = (positions.astype(jnp.float32)[..., None] *
                rope_frequencies(head_dim, self.rope_theta,
                                 self.rope_scaling))
      angles = jnp.concatenate([angles, angles], axis=-1)
      rope = (jnp.cos(angles), jnp.sin(angles))
    real_mask, cached = mask, []
    if segment_ids is not None:  # Query i sees key j of its own document.
      same = segment_ids[:, :, None] == segment_ids[:, None, :]
      if mask is not None:
        same &= mask[:, None, :].astype(bool)
      mask = same[:, None]
    x = nn.with_logical_constraint(x, TOKENS)
    x = nn.Dropout(self.dropout_rate)(x, not train)
    block_cls = nn.remat(DecoderBlock) if self.remat else DecoderBlock
    if cache is not None:  # Each token sees the cache up to itself.
      mask = (jnp.arange(cache['layers'][0]['key'].shape[1])[None, None] <=
              positions[:, :, None])
    for i in range(self.num_layers):
      x = block_cls(self.num_heads, num_kv_heads, head_dim, self.mlp_dim,
                    self.norm, self.norm_epsilon, self.mlp, self.bias,
                    self.qkv_bias, self.dropout_rate, self.attention_impl,
                    deterministic=not train, name=f'block{i}',
                    **layer)(x, rope, mask, None if cache is None else dict(
                        cache['layers'][i], index=cache['index']))
      if cache is not None:
        x, layer_cache = x
        cached.append(layer_cache)
    norm = layers.layer_norm if self.norm == 'layer' else layers.rms_norm
    x = norm(epsilon=self.norm_epsilon, name='final_norm', **layer)(x)
    head_dtype = self.logits_dtype or self.dtype
    if self.tie_embeddings:
      logits = jnp.einsum('btd,vd->btv', x.astype(head_dtype),
                          table.astype(head_dtype))
    else:
      logits = layers.dense(self.vocab_size, ('embed', 'vocab'),
                            use_bias=False, kernel_init=_INIT, name='head',
                            dtype=head_dtype,
                            param_dtype=self.param_dtype)(x)
    logits = nn.with_logical_constraint(logits, ('batch', 'seq', 'vocab'))
    if cache is None:
      return logits
    real = length if real_mask is None else real_mask.sum(-1, dtype=jnp.int32)
    return logits, {'index': cache['index'] + real,
                    'layers': cached}

  def init_cache(self, batch_size: int, length: int, dtype: Any = None):
    """An empty cache of `length` positions for `batch_size` rows (see
    the class's notes): {'index': (batch,) int32 zeros, 'layers': a
    {'key', 'value'} of (batch, length, kv heads, head_dim) zeros per
    layer}, in `dtype` (default: the computation dtype)."""
    heads = self.num_kv_heads or self.num_heads
    shape = (batch_size, length, heads,
             self.head_dim or self.hidden_size // self.num_heads)
    zeros = functools.partial(jnp.zeros, shape, dtype or self.dtype)
    return {'index': jnp.zeros((batch_size,), jnp.int32),
            'layers': [{'key': zeros(), 'value': zeros()}
                       for _ in range(self.num_layers)]}

  def _check(self, tokens):
    layers.check_choice('positions', self.positions, ('rope', 'learned'))
    layers.check_choice('norm', self.norm, ('rms', 'layer'))
    layers.check_choice('mlp', self.mlp, ('swiglu', 'gelu'))
    layers.check_rate('dropout_rate', self.dropout_rate)
    layers.check_tokens('a Decoder', tokens, self.max_length
                        if self.positions == 'learned' else None)
    kv_heads = self.num_kv_heads or self.num_heads
    if self.num_heads % kv_heads:
      raise ValueError(f'{self.num_heads} query heads do not share '
                       f'{kv_heads} key and value heads evenly.')
    if self.head_dim is None and self.hidden_size % self.num_heads:
      raise ValueError(f'{self.hidden_size} features do not split into '
                       f'{self.num_heads} heads; give head_dim.')

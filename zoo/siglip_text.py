"""SigLIP's text tower: the text embedding the image towers
(siglip_b16, siglip_l16, siglip_so400m14 in zoo/vit.py) are matched against.

    model = zoo.create('siglip_b16_text')
    embedding = model.apply(variables, tokens)  # (batch, 64) -> (batch, 768)

The tokens (SigLIP's 32,000 SentencePiece ids, padded to 64 as it was
trained: `padding='max_length'`) are embedded with learned positions, pass
the ViT's pre-norm blocks (zoo/vit.py's `EncoderBlock`: the tanh GELU, layer
norms of epsilon 1e-6), attending to every token, then a final norm; the
last token's features pass a linear head. That is transformers'
`SiglipTextModel` (its `pooler_output`) and big_vision's text tower (Zhai
et al. 2023); zoo/convert/transformers_siglip.py converts transformers'
files and zoo/siglip.py joins the two towers into the sigmoid logits.

  siglip_b16_text, siglip_l16_text, siglip_so400m14_text   SigLIP's,
      beside the image towers of google/siglip-base-patch16-224,
      siglip-large-patch16-256 and siglip-so400m-patch14-384.
  siglip2_b16_text, siglip2_l16_text, siglip2_so400m14_text   SigLIP 2's
      (Tschannen et al. 2025) fixed-resolution checkpoints: the same tower
      with Gemma's 256,000-token vocabulary.
"""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp
from flax.linen import initializers

from zoo import layers
from zoo.partitioning import TOKENS
from zoo.registry import register
from zoo.vit import EncoderBlock

named = layers.named


def _tokens(kwargs):
  return (kwargs['max_length'],)


# Counts as transformers builds SiglipTextModel from the originals'
# text_config (tests/unit/zoo/convert/test_convert_siglip_text.py builds
# each on the `meta` device).
_TEXT = dict(family='encoder', modality='text', input_shape=_tokens,
             max_length=64,
             test_kwargs=dict(vocab_size=97, hidden_size=32, num_layers=2,
                              num_heads=2, mlp_dim=64, max_length=16,
                              projection_size=7))
_B = dict(hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072)
_L = dict(hidden_size=1024, num_layers=24, num_heads=16, mlp_dim=4096)
_SO400M = dict(hidden_size=1152, num_layers=27, num_heads=16, mlp_dim=4304)


@register('siglip_b16_text', vocab_size=32000, reference_params=110_271_744,
          **_B, **_TEXT)
@register('siglip_l16_text', vocab_size=32000, reference_params=336_194_560,
          **_L, **_TEXT)
@register('siglip_so400m14_text', vocab_size=32000,
          reference_params=449_734_896, **_SO400M, **_TEXT)
@register('siglip2_b16_text', vocab_size=256000,
          reference_params=282_303_744, **_B, **_TEXT)
@register('siglip2_l16_text', vocab_size=256000,
          reference_params=565_570_560, **_L, **_TEXT)
@register('siglip2_so400m14_text', vocab_size=256000,
          reference_params=707_782_896, **_SO400M, **_TEXT)
class SiglipText(nn.Module):
  """The text embedding of token ids, as transformers' SiglipTextModel.

  Input: int token ids (batch, length), length at most `max_length`;
  `mask` (batch, length), True (1) for real tokens, False for padding,
  which no token attends to (SigLIP was trained without one: padded to
  `max_length`, every token attended to). Output: (batch, projection_size),
  the last token's features through the head: the token at the last
  position, padding or not, as in transformers and big_vision. Not
  normalized (zoo/siglip.py normalizes). `train=True` turns dropout on (the
  'dropout' rng collection).

  Options:
    max_length: rows of the learned position table (64).
    projection_size: the head's outputs; None: hidden_size (transformers'
      default, as all the originals have).
    dropout_rate: after the embeddings and on each residual branch (none in
      SigLIP's training).
    remat: recompute each block in the backward pass (less memory).
  """

  vocab_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  mlp_dim: int
  max_length: int = 64
  projection_size: int | None = None
  dropout_rate: float = 0.0
  remat: bool = False
  attention_impl: str | None = 'auto'
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def __post_init__(self):
    # Checked on creation, so a bad option is one ValueError from zoo.create.
    layers.check_rate('dropout_rate', self.dropout_rate)
    if self.hidden_size % self.num_heads:
      raise ValueError(f'{self.hidden_size} features do not split into '
                       f'{self.num_heads} heads.')
    super().__post_init__()

  @nn.compact
  def __call__(self, tokens, train: bool = False, mask=None):
    layers.check_tokens('a SiglipText', tokens, self.max_length)
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    # Both tables start N(0, 1/width), as Flax's nn.Embed and transformers'
    # SigLIP initialize them.
    init = initializers.normal(self.hidden_size**-0.5)
    words = self.param('token_embedding', named(init, ('vocab', 'embed')),
                       (self.vocab_size, self.hidden_size), self.param_dtype)
    positions = self.param('position_embedding', named(init, ('seq', 'embed')),
                           (self.max_length, self.hidden_size),
                           self.param_dtype)
    x = (jnp.take(words, tokens, axis=0) +
         positions[None, :tokens.shape[1]]).astype(self.dtype)
    x = nn.with_logical_constraint(x, TOKENS)
    x = nn.Dropout(self.dropout_rate)(x, not train)
    block_cls = nn.remat(EncoderBlock) if self.remat else EncoderBlock
    for i in range(self.num_layers):
      # SigLIP's initialization: xavier-uniform kernels, MLP biases from
      # N(0, 1e-6²) (big_vision's MlpBlock; transformers' _init_weights).
      x = block_cls(self.num_heads, self.mlp_dim, self.attention_impl,
                    dropout_rate=self.dropout_rate, mlp_bias_init_std=1e-6,
                    deterministic=not train, name=f'block{i}',
                    **layer)(x, mask)
    # Layer norm works token by token: normalizing the last token alone is
    # normalizing every token, then taking the last.
    x = layers.layer_norm(name='final_norm', **layer)(x[:, -1])
    return layers.dense(self.projection_size or self.hidden_size,
                        ('embed', 'mlp'), name='head', **layer)(x)

"""Bidirectional text encoders: BERT and RoBERTa in one class.

    model = zoo.create('bert_base')                 # masked-LM logits
    logits = model.apply(variables, tokens, mask=mask)  # (batch, length, vocab)
    model = zoo.create('roberta_base', num_classes=2)   # sequence classifier
    logits = model.apply(variables, tokens, mask=mask)  # (batch, 2)

The blocks are the original Transformer's (Vaswani et al. 2017) as BERT
(Devlin et al. 2019) uses them: attention over every token, then the
residual sum normalized (post-norm), an MLP with the exact GELU likewise.
The embeddings add the tokens', the positions' (learned) and the segments'
(BERT's sentence A and B; RoBERTa has one), then a layer norm.

RoBERTa (Liu et al. 2019) is BERT's shape trained otherwise; its positions
count real tokens only, from its padding id + 1 (fairseq's numbering, kept
by its published weights): `pad_token_id` turns that on.

Heads: with `num_classes=0` (the default) the masked-LM head of
pretraining (a dense layer, the GELU and a layer norm, then the token
embedding transposed plus a bias per token); with `num_classes=N` BERT's
pooler (a dense layer and tanh on the first token, [CLS] or <s>) and a
linear classifier, which is also RoBERTa's classification head. Hugging
Face transformers computes the same logits from the same weights
(zoo/convert/transformers_encoder.py converts its files;
tests/unit/zoo/convert/test_convert_transformers_encoder.py compares).
"""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp
from flax.linen import initializers

from zoo import layers
from zoo.decoder import SelfAttention
from zoo.partitioning import TOKENS
from zoo.registry import register

named = layers.named
# BERT's `initializer_range`: every weight starts N(0, 0.02²).
_INIT = initializers.normal(0.02)


class EncoderBlock(nn.Module):
  """norm(x + attention(x)), then norm(x + mlp(x)); each branch through
  dropout unless `deterministic`."""

  num_heads: int
  mlp_dim: int
  norm_epsilon: float
  dropout_rate: float
  attention_impl: str | None
  dtype: Any
  param_dtype: Any
  deterministic: bool = True

  @nn.compact
  def __call__(self, x, mask):
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    width = x.shape[-1]

    def add_and_norm(x, branch, name):
      branch = nn.Dropout(self.dropout_rate)(branch, self.deterministic)
      x = layers.layer_norm(epsilon=self.norm_epsilon, name=name,
                            **layer)(x + branch)
      return nn.with_logical_constraint(x, TOKENS)

    attention = SelfAttention(
        self.num_heads, self.num_heads, width // self.num_heads, True, True,
        self.attention_impl, causal=False, name='attention', **layer)
    x = add_and_norm(x, attention(x, None, mask), 'attention_norm')
    dense = lambda n, names, name: layers.dense(  # pylint: disable=g-long-lambda
        n, names, kernel_init=_INIT, name=name, **layer)
    h = nn.gelu(dense(self.mlp_dim, ('embed', 'mlp'), 'up')(x),
                approximate=False)
    h = nn.with_logical_constraint(h, ('batch', 'seq', 'mlp'))
    return add_and_norm(x, dense(width, ('mlp', 'embed'), 'down')(h),
                        'mlp_norm')


def _tokens(kwargs):
  # RoBERTa's table starts its positions after the padding id.
  pad = kwargs.get('pad_token_id', Encoder.pad_token_id)
  return (kwargs.get('max_length', Encoder.max_length) -
          (0 if pad is None else pad + 1),)


_TEXT = dict(family='encoder', modality='text', input_shape=_tokens,
             test_kwargs=dict(vocab_size=97, hidden_size=32, num_layers=2,
                              num_heads=2, mlp_dim=64, max_length=18))


# Counts as transformers builds BertForMaskedLM and RobertaForMaskedLM from
# the originals' config.json (tests/unit/zoo/convert/
# test_convert_transformers_encoder.py builds each on the `meta` device).
@register('bert_base', vocab_size=30522, hidden_size=768, num_layers=12,
          num_heads=12, mlp_dim=3072, reference_params=109_514_298, **_TEXT)
@register('bert_large', vocab_size=30522, hidden_size=1024, num_layers=24,
          num_heads=16, mlp_dim=4096, reference_params=335_174_458, **_TEXT)
@register('roberta_base', vocab_size=50265, hidden_size=768, num_layers=12,
          num_heads=12, mlp_dim=3072, max_length=514, type_vocab_size=1,
          norm_epsilon=1e-5, pad_token_id=1, reference_params=124_697_433,
          **_TEXT)
@register('roberta_large', vocab_size=50265, hidden_size=1024,
          num_layers=24, num_heads=16, mlp_dim=4096, max_length=514,
          type_vocab_size=1, norm_epsilon=1e-5, pad_token_id=1,
          reference_params=355_412_057, **_TEXT)
class Encoder(nn.Module):
  """Masked-LM or class logits of a bidirectional transformer.

  Input: int token ids (batch, length), length at most the positions the
  model has (`max_length`, less RoBERTa's offset); `mask` (batch, length),
  True (1) for real tokens, False for padding, which no token attends to;
  `segments` (batch, length): BERT's token type ids (default 0). Output:
  (batch, length, vocab_size) masked-LM logits with num_classes=0, else
  (batch, num_classes). `train=True` turns dropout on (the 'dropout' rng
  collection).

  Options:
    max_length: rows of the learned position table.
    type_vocab_size: rows of the segment table (BERT 2, RoBERTa 1).
    pad_token_id: None: positions 0, 1, 2, ... (BERT); an id (RoBERTa's
      1): tokens other than it numbered from pad_token_id + 1, itself at
      pad_token_id.
    norm_epsilon: of every layer norm (BERT 1e-12, RoBERTa 1e-5).
    num_classes: 0: the masked-LM head; N: the pooler and a classifier.
    dropout_rate: on the embeddings, each residual branch and the pooled
      features (0.1 in both papers; attention dropout has no counterpart).
    remat: recompute each block in the backward pass (less memory).
  """

  vocab_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  mlp_dim: int
  max_length: int = 512
  type_vocab_size: int = 2
  pad_token_id: int | None = None
  norm_epsilon: float = 1e-12
  num_classes: int = 0
  dropout_rate: float = 0.0
  remat: bool = False
  attention_impl: str | None = 'auto'
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, tokens, train: bool = False, mask=None, segments=None):
    self._check(tokens)
    layer = dict(dtype=self.dtype, param_dtype=self.param_dtype)

    def table(name, rows, names):
      return self.param(name, named(_INIT, names),
                        (rows, self.hidden_size), self.param_dtype)

    words = table('token_embedding', self.vocab_size, ('vocab', 'embed'))
    if self.pad_token_id is None:
      positions = jnp.arange(tokens.shape[1])[None]
    else:
      real = (tokens != self.pad_token_id).astype(jnp.int32)
      positions = jnp.cumsum(real, axis=1) * real + self.pad_token_id
    if segments is None:
      segments = jnp.zeros_like(tokens)
    x = sum(jnp.take(t, i, axis=0).astype(self.dtype) for t, i in (
        (words, tokens),
        (table('position_embedding', self.max_length, ('seq', 'embed')),
         positions),
        (table('segment_embedding', self.type_vocab_size, (None, 'embed')),
         segments)))
    x = layers.layer_norm(epsilon=self.norm_epsilon, name='embedding_norm',
                          **layer)(x)
    x = nn.with_logical_constraint(x, TOKENS)
    x = nn.Dropout(self.dropout_rate)(x, not train)
    block_cls = nn.remat(EncoderBlock) if self.remat else EncoderBlock
    for i in range(self.num_layers):
      x = block_cls(self.num_heads, self.mlp_dim, self.norm_epsilon,
                    self.dropout_rate, self.attention_impl,
                    deterministic=not train, name=f'block{i}',
                    **layer)(x, mask)
    if self.num_classes:
      pooled = nn.tanh(layers.dense(self.hidden_size, ('embed', 'mlp'),
                                    kernel_init=_INIT, name='pooler',
                                    **layer)(x[:, 0]))
      pooled = nn.Dropout(self.dropout_rate)(pooled, not train)
      return layers.dense(self.num_classes, ('mlp', 'classes'),
                          kernel_init=_INIT, name='classifier',
                          **layer)(pooled)
    h = nn.gelu(layers.dense(self.hidden_size, ('embed', 'mlp'),
                             kernel_init=_INIT, name='mlm_dense',
                             **layer)(x), approximate=False)
    h = layers.layer_norm(epsilon=self.norm_epsilon, name='mlm_norm',
                          **layer)(h)
    bias = self.param('mlm_bias', named(initializers.zeros_init(),
                                        ('vocab',)),
                      (self.vocab_size,), self.param_dtype)
    logits = jnp.einsum('btd,vd->btv', h, words.astype(self.dtype))
    logits = logits + bias.astype(self.dtype)
    return nn.with_logical_constraint(logits, ('batch', 'seq', 'vocab'))

  def _check(self, tokens):
    layers.check_rate('dropout_rate', self.dropout_rate)
    layers.check_classes(self.num_classes)
    # RoBERTa's positions start after its padding id.
    offset = 0 if self.pad_token_id is None else self.pad_token_id + 1
    layers.check_tokens('an Encoder', tokens, self.max_length - offset)
    if self.hidden_size % self.num_heads:
      raise ValueError(f'{self.hidden_size} features do not split into '
                       f'{self.num_heads} heads.')

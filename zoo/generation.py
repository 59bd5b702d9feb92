"""Continuations of prompts by a `Decoder`: greedy or sampled, with a
key/value cache.

    from zoo import generation
    new, counts = generation.generate(
        model, variables, tokens, lengths, max_new_tokens=32,
        sampling=generation.Sampling(temperature=0.8, top_p=0.95),
        eos_id=eos, rng=jax.random.key(0))

The prompts are right-padded: `tokens` (batch, width) holds each row's
`lengths[i]` prompt tokens first, then anything. One forward pass over the
prompts fills the cache (`Decoder.init_cache`, width + max_new_tokens
positions), then each step feeds every row's last token and picks the next
from its logits, each row at its own position. The whole generation is one
`jax.jit` program (the steps in a `lax.while_loop`, which ends once every
row has ended), compiled once per batch size, width, max_new_tokens and
sampling (not per EOS or padding token: those are traced).

Picking the next token follows transformers' `generate`: the logits
(float32) divided by the temperature, then top-k, then top-p (nucleus)
filtering, then a draw; temperature 0 is greedy (argmax, top-k and top-p
unused). A row ends at its EOS token (kept in the output); after it, the
row holds `pad_id`.
"""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax


@dataclasses.dataclass(frozen=True)
class Sampling:
  """How the next token is picked.

  temperature: divides the logits; 0: greedy (the most likely token).
  top_k: draw only from the k most likely tokens; 0: from all.
  top_p: draw only from the fewest most likely tokens whose probabilities
    sum to at least top_p (Holtzman et al. 2019); 1: from all.
  """

  temperature: float = 0.0
  top_k: int = 0
  top_p: float = 1.0

  def __post_init__(self):
    if not (math.isfinite(self.temperature) and self.temperature >= 0):
      raise ValueError(f'temperature {self.temperature} must be a number, 0 '
                       '(greedy) or more.')
    if not (isinstance(self.top_k, int) and self.top_k >= 0):
      raise ValueError(f'top_k {self.top_k} must be 0 (all tokens) or more.')
    if not 0 < self.top_p <= 1:
      raise ValueError(f'top_p {self.top_p} must be in (0, 1].')


def next_token(logits, sampling: Sampling, rng):
  """The next token of each row.

  Args:
    logits: (batch, vocab) the last position's logits.
    sampling: how to pick.
    rng: a PRNG key (unused when greedy).

  Returns:
    (batch,) int32 token ids.
  """
  logits = logits.astype(jnp.float32)
  if sampling.temperature == 0:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  logits = logits / sampling.temperature
  if 0 < sampling.top_k < logits.shape[-1]:
    kth = lax.top_k(logits, sampling.top_k)[0][:, -1:]
    logits = jnp.where(logits < kth, -jnp.inf, logits)
  if sampling.top_p < 1:
    ranked = -jnp.sort(-logits, axis=-1)  # Most likely first.
    probabilities = jax.nn.softmax(ranked, axis=-1)
    before = jnp.cumsum(probabilities, axis=-1) - probabilities
    # The least likely kept: the most likely one is always kept.
    lowest = jnp.min(jnp.where(before < sampling.top_p, ranked, jnp.inf),
                     axis=-1, keepdims=True)
    logits = jnp.where(logits < lowest, -jnp.inf, logits)
  return jax.random.categorical(rng, logits, axis=-1).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=('model', 'max_new_tokens',
                                             'sampling'))
def generate(model, variables, tokens, lengths, *, max_new_tokens: int,
             sampling: Sampling = Sampling(), eos_id: int | None = None,
             pad_id: int = 0, rng=None):
  """Up to `max_new_tokens` tokens after each prompt.

  Args:
    model: a `zoo.decoder.Decoder`.
    variables: its {'params': ...}.
    tokens: (batch, width) int right-padded prompts.
    lengths: (batch,) each prompt's tokens, at least 1.
    max_new_tokens: the most tokens generated per row (1 or more); the
      model must have positions for width + max_new_tokens - 1 tokens.
    sampling: how each token is picked (default: greedy).
    eos_id: the token that ends a row; None: rows end after
      max_new_tokens.
    pad_id: what follows a row's end in the output.
    rng: a PRNG key for sampling (each step draws with the key folded with
      the step number); None: key 0.

  Returns:
    (new tokens (batch, max_new_tokens) int32, each row's count (batch,)
    int32: the tokens it generated, its EOS included).
  """
  rng = jax.random.key(0) if rng is None else rng
  batch, width = tokens.shape
  lengths = jnp.asarray(lengths, jnp.int32)
  cache = model.init_cache(batch, width + max_new_tokens)
  logits, cache = model.apply(variables, tokens,
                              mask=jnp.arange(width) < lengths[:, None],
                              cache=cache)
  last = jnp.take_along_axis(logits, lengths[:, None, None] - 1, axis=1)

  def pick(logits, step):
    return next_token(logits[:, -1], sampling, jax.random.fold_in(rng, step))

  token = pick(last, 0)
  out = jnp.full((batch, max_new_tokens), pad_id, jnp.int32)
  out = out.at[:, 0].set(token)
  ended = (token == eos_id if eos_id is not None
           else jnp.zeros((batch,), bool))
  counts = jnp.ones((batch,), jnp.int32)

  def unfinished(carry):
    step, _, ended, *_ = carry
    return (step < max_new_tokens) & ~ended.all()

  def step_once(carry):
    step, token, ended, counts, out, cache = carry
    logits, cache = model.apply(variables, token[:, None], cache=cache)
    token = jnp.where(ended, pad_id, pick(logits, step))
    out = lax.dynamic_update_slice_in_dim(out, token[:, None], step, axis=1)
    counts = counts + ~ended
    if eos_id is not None:
      ended = ended | (token == eos_id)
    return step + 1, token, ended, counts, out, cache

  *_, counts, out, _ = lax.while_loop(
      unfinished, step_once, (1, token, ended, counts, out, cache))
  return out, counts

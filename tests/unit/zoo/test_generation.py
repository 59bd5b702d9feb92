"""Cached decoding and generation (zoo/generation.py) against the Decoder's
own full forward pass: the cache changes no logit, greedy is the argmax of
full passes, sampling is reproducible. (Against transformers' `generate`:
tests/unit/zoo/convert/test_generate_transformers.py.)"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo import generation

pytestmark = pytest.mark.usefixtures('fast_compiles')

# Right-padded prompts of 6, 3 and 1 tokens in a batch of width 6.
LENGTHS = (6, 3, 1)
WIDTH, NEW = 6, 7
NEVER = 1000  # An EOS id the vocabulary of 97 never gives.


@functools.cache
def _model(name):
  model = zoo.create(name, **zoo.spec(name).test_kwargs)
  tokens = jax.random.randint(jax.random.PRNGKey(1), (len(LENGTHS), WIDTH),
                              0, 97)
  variables = nn.meta.unbox(jax.jit(functools.partial(
      model.init, train=False))(jax.random.PRNGKey(0), tokens))
  return model, variables, tokens


def _full(model):
  """A full forward pass (jitted once) over right-padded rows of WIDTH + NEW
  tokens: causal, so what follows a position changes nothing there."""
  return jax.jit(model.apply)


@pytest.mark.parametrize('name', ['gpt2', 'llama3_2_1b'])
def test_cached_logits_equal_the_full_forward_at_every_step(name):
  model, variables, tokens = _model(name)
  step = jax.jit(lambda v, t, c, m=None: model.apply(v, t, mask=m, cache=c))
  lengths = jnp.array(LENGTHS)
  cache = model.init_cache(len(LENGTHS), WIDTH + NEW)
  logits, cache = step(variables, tokens,
                       cache, jnp.arange(WIDTH) < lengths[:, None])
  np.testing.assert_array_equal(cache['index'], LENGTHS)
  cached = [np.asarray(logits)[np.arange(len(LENGTHS)), lengths - 1]]
  feed = jax.random.randint(jax.random.PRNGKey(2), (NEW, len(LENGTHS)), 0, 97)
  for t in range(NEW - 1):
    logits, cache = step(variables, feed[t][:, None], cache)
    cached.append(np.asarray(logits)[:, 0])
  np.testing.assert_array_equal(cache['index'], np.array(LENGTHS) + NEW - 1)
  # Each row whole: its prompt, then the tokens fed, then padding.
  rows = np.zeros((len(LENGTHS), WIDTH + NEW), np.int32)
  for i, n in enumerate(LENGTHS):
    rows[i, :n + NEW] = np.concatenate([tokens[i, :n], feed[:, i]])
  full = np.asarray(_full(model)(variables, rows))
  for t, logits in enumerate(cached):
    for i, n in enumerate(LENGTHS):
      expected = full[i, n - 1 + t]
      assert (np.abs(logits[i] - expected).max() <=
              1e-5 * np.abs(expected).max()), (t, i)


def test_greedy_is_the_argmax_of_full_forward_passes_and_stops_at_eos():
  model, variables, tokens = _model('llama3_2_1b')
  new, counts = generation.generate(model, variables, tokens,
                                    jnp.array(LENGTHS), max_new_tokens=NEW,
                                    eos_id=NEVER, pad_id=-1)
  np.testing.assert_array_equal(counts, [NEW] * len(LENGTHS))
  full, expected = _full(model), []
  for i, n in enumerate(LENGTHS):
    row = np.zeros((1, WIDTH + NEW), np.int32)
    row[0, :n] = tokens[i, :n]
    for t in range(n, n + NEW):
      row[0, t] = np.argmax(full(variables, row)[0, t - 1])
    expected.append(list(row[0, n:n + NEW]))
  np.testing.assert_array_equal(new, expected)
  # The second row's third token as EOS: that row ends there, padded with
  # -1; the others go on.
  eos = expected[1][2]
  new, counts = generation.generate(model, variables, tokens,
                                    jnp.array(LENGTHS), max_new_tokens=NEW,
                                    eos_id=eos, pad_id=-1)
  for i, row in enumerate(expected):
    end = row.index(eos) + 1 if eos in row else NEW
    assert counts[i] == end
    np.testing.assert_array_equal(new[i], row[:end] + [-1] * (NEW - end))


def test_sampling_is_reproducible_and_a_cold_temperature_is_greedy():
  model, variables, tokens = _model('llama3_2_1b')
  run = functools.partial(generation.generate, model, variables, tokens,
                          jnp.array(LENGTHS), max_new_tokens=NEW,
                          eos_id=NEVER, pad_id=-1)
  warm = generation.Sampling(temperature=1.5, top_k=50, top_p=0.9)
  first = run(sampling=warm, rng=jax.random.key(3))[0]
  np.testing.assert_array_equal(run(sampling=warm, rng=jax.random.key(3))[0],
                                first)
  assert not np.array_equal(run(sampling=warm, rng=jax.random.key(4))[0],
                            first)
  np.testing.assert_array_equal(
      run(sampling=generation.Sampling(temperature=1e-6),
          rng=jax.random.key(3))[0], run()[0])


def test_top_k_and_top_p_keep_the_most_likely_tokens():
  logits = jnp.log(jnp.array([[0.5, 0.05, 0.3, 0.15]]))
  keys = jax.random.split(jax.random.key(0), 400)

  def drawn(sampling):
    return set(np.asarray(jax.vmap(lambda k: generation.next_token(
        logits, sampling, k))(keys)).ravel())

  assert drawn(generation.Sampling(1.0)) == {0, 1, 2, 3}
  assert drawn(generation.Sampling(1.0, top_k=2)) == {0, 2}
  assert drawn(generation.Sampling(1.0, top_p=0.8)) == {0, 2}  # 0.5 + 0.3.
  assert drawn(generation.Sampling(1.0, top_p=0.81)) == {0, 2, 3}
  assert drawn(generation.Sampling(1.0, top_p=0.1)) == {0}
  for bad in (dict(temperature=-1.0), dict(temperature=float('nan')),
              dict(top_p=0.0), dict(top_p=1.5), dict(top_k=-1)):
    with pytest.raises(ValueError):
      generation.Sampling(**bad)

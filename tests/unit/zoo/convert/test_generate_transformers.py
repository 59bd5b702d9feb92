"""Greedy generation (zoo/generation.py) of converted transformers models
gives the token ids of transformers' own `generate(do_sample=False)`.

A tiny GPT2LMHeadModel and LlamaForCausalLM with random weights, written
with `save_pretrained` and converted; a batch of prompts of different
lengths (left-padded with an attention mask for transformers, as its
`generate` wants; right-padded for ours), an EOS token that some rows reach.
Needs torch and transformers (the convert-test extra); skipped without them.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from tests.convert_helpers import originals
from tests.helpers import slow_after

torch, transformers = originals('torch', 'transformers')
# Compared with the originals: the whole suite's tier, not the fast one.
pytestmark = pytest.mark.slow

# pylint: disable=wrong-import-position
import zoo
from tests.unit.zoo.convert.test_convert_transformers_decoder import _original
from zoo import convert, generation

LENGTHS = (7, 4, 2)
NEW = 10
PAD = 0


def _prompts(vocab: int) -> list[list[int]]:
  rng = np.random.default_rng(5)
  return [list(rng.integers(3, vocab, n)) for n in LENGTHS]


def _theirs(model, prompts, eos: int) -> list[list[int]]:
  """transformers' greedy continuations, each cut after its EOS."""
  width = max(map(len, prompts))
  ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
  mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p)
                       for p in prompts])
  with torch.no_grad():
    out = model.generate(ids, attention_mask=mask, do_sample=False,
                         num_beams=1, max_new_tokens=NEW, eos_token_id=eos,
                         pad_token_id=PAD).numpy()[:, width:]
  rows = []
  for row in out.tolist():
    rows.append(row[:row.index(eos) + 1] if eos in row else row)
  return rows


def _ours(converted, prompts, eos: int) -> list[list[int]]:
  model = zoo.create(converted.name, **converted.kwargs)
  width = max(map(len, prompts))
  tokens = np.array([p + [PAD] * (width - len(p)) for p in prompts])
  new, counts = generation.generate(
      model, converted.variables, jnp.asarray(tokens, jnp.int32),
      jnp.array(LENGTHS), max_new_tokens=NEW, eos_id=eos, pad_id=PAD)
  return [list(map(int, row[:n])) for row, n in zip(np.asarray(new),
                                                   np.asarray(counts))]


# The same generation loop for both: Llama's in the whole suite.
@pytest.mark.parametrize('name', slow_after(1, ['gpt2', 'llama3_2_1b']))
def test_greedy_ids_equal_transformers_generate(name, tmp_path):
  model = _original(name).eval()
  model.save_pretrained(tmp_path, safe_serialization=True)
  converted = convert.load(tmp_path / 'model.safetensors', 'transformers',
                           name)
  prompts = _prompts(model.config.vocab_size)
  # Without an EOS reached: every token of every row.
  never = model.config.vocab_size + 1
  theirs = _theirs(model, prompts, never)
  assert [len(row) for row in theirs] == [NEW] * len(LENGTHS)
  assert _ours(converted, prompts, never) == theirs
  # A token that one row generates early as EOS: that row ends there.
  eos = theirs[1][3]
  theirs = _theirs(model, prompts, eos)
  assert len(theirs[1]) <= 4
  assert _ours(converted, prompts, eos) == theirs

"""Prompts for zero-shot classification: templates, canonical texts, and
token ids ended with EOS and padded as SigLIP was trained.
(tests/unit/recipes/test_zero_shot.py compares them with transformers'
SiglipTokenizer.)"""

import numpy as np
import pytest

from recipes.data.text import prompts
from recipes.data.text.tokenizer import Tokenizer
from recipes.runtime.errors import UserError


def _tokenizer(eos=1, pad=None):
  """Each word one id: its length (a tokenizer simple to check)."""
  return Tokenizer('words', 'test', 50, None, eos, pad,
                   lambda texts: [[len(w) + 10 for w in t.split()]
                                  for t in texts], str)


def test_templates_and_filling():
  assert prompts.templates(prompts.DEFAULT) == ['a photo of a {}.']
  found = prompts.templates('a photo of a {}. | a {} |{}')
  assert found == ['a photo of a {}.', 'a {}', '{}']
  assert prompts.fill(found[:2], ['cat', 'dog']) == [
      'a photo of a cat.', 'a cat', 'a photo of a dog.', 'a dog']


@pytest.mark.parametrize('spec', ['a photo', 'a {} and a {}', 'a {}|', ''])
def test_a_template_without_one_place_is_one_line(spec):
  with pytest.raises(UserError, match='must hold one {}') as e:
    prompts.templates(spec)
  assert '\n' not in str(e.value)


def test_canonical_texts():
  assert prompts.canonical('  A Photo of a\tGolden-Retriever!  ') == (
      'a photo of a goldenretriever')


def test_ids_end_with_eos_and_are_padded():
  ids = prompts.token_ids(_tokenizer(eos=1, pad=None), ['A cat.', ''], 5)
  assert ids.dtype == np.int32
  # 'a' -> 11, 'cat' -> 13, then EOS; padded with EOS without a pad id.
  assert ids.tolist() == [[11, 13, 1, 1, 1], [1, 1, 1, 1, 1]]
  ids = prompts.token_ids(_tokenizer(eos=1, pad=0), ['a b c d e f g'], 4)
  assert ids.tolist() == [[11, 11, 11, 1]]  # Cut, the EOS kept.
  ids = prompts.token_ids(_tokenizer(eos=1, pad=0), ['a'], 4)
  assert ids.tolist() == [[11, 1, 0, 0]]
  with pytest.raises(UserError, match='no end-of-text token'):
    prompts.token_ids(_tokenizer(eos=None), ['a'], 4)

"""Class names put into prompt templates, as the token ids of the fixed
length a SigLIP text tower was trained on.

    templates = prompts.templates('a photo of a {}.|a {}.')
    texts = prompts.fill(templates, ['cat', 'golden retriever'])
    ids = prompts.token_ids(tokenizer, texts, 64)  # int32 (4, 64)

Each text is canonicalized as big_vision's zero-shot evaluator
(evaluators/proj/image_text/prompt_engineering.py) and transformers'
SiglipTokenizer do: lowercase, punctuation removed, runs of whitespace one
space. Its ids end with EOS, which stays when a long text is cut (big_vision's
eos='sticky', transformers' truncation), and padding fills it up to the
tower's length: transformers' SiglipProcessor with padding='max_length'.
The padding id is the tokenizer's (SigLIP's tokenizer_config.json names
'</s>', the EOS, as big_vision's pad_value=1 is), else the EOS.
"""

import re
import string
from typing import Sequence

import numpy as np

from recipes.data.text.tokenizer import Tokenizer
from recipes.runtime.errors import UserError

DEFAULT = 'a photo of a {}.'  # CLIP's and SigLIP's plain prompt.
_PUNCTUATION = str.maketrans('', '', string.punctuation)


def templates(spec: str) -> list[str]:
  """The templates of `spec`: several separated by '|', each with one '{}'
  where a class name goes.

  Raises:
    UserError: an empty template, or one without '{}' or with two.
  """
  found = [t.strip() for t in spec.split('|')]
  for template in found:
    if template.count('{}') != 1:
      raise UserError(f'prompt template {template!r} must hold one {{}} '
                      "where the class name goes, e.g. 'a photo of a {}.'; "
                      "separate several with '|'.")
  return found


def fill(templates: Sequence[str], classes: Sequence[str]) -> list[str]:
  """Every class in every template: the class's texts one after the other
  (len(classes) * len(templates) texts)."""
  return [t.replace('{}', c) for c in classes for t in templates]


def canonical(text: str) -> str:
  """`text` lowercased, without punctuation, its whitespace single
  spaces."""
  return re.sub(r'\s+', ' ', text.lower().translate(_PUNCTUATION)).strip()


def token_ids(tokenizer: Tokenizer, texts: Sequence[str],
              length: int) -> np.ndarray:
  """The texts' ids, canonicalized, ended with EOS and padded to `length`.

  Args:
    tokenizer: the model's tokenizer.
    texts: the texts.
    length: the text tower's length (its max_length: 64 for SigLIP).

  Returns:
    int32 (len(texts), length).

  Raises:
    UserError: the tokenizer has no EOS token.
  """
  eos = tokenizer.eos_id
  if eos is None:
    raise UserError(f'tokenizer {tokenizer.path} has no end-of-text token, '
                    "which SigLIP's texts end with; give the model's own "
                    'tokenizer.')
  pad = eos if tokenizer.pad_id is None else tokenizer.pad_id
  ids = np.full((len(texts), length), pad, np.int32)
  encoded = tokenizer.encode_batch([canonical(t) for t in texts])
  for row, text_ids in zip(ids, encoded):
    text_ids = list(text_ids[:length - 1]) + [eos]
    row[:len(text_ids)] = text_ids
  return ids

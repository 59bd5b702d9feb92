"""A tokenizer and a corpus for the text tests: a byte-level BPE trained on
a few sentences (a tenth of a second), and JSONL documents."""

import json

import pytest


WORDS = ('the model reads packed sequences of tokens and every document '
         'ends with an end of text token so that attention stays inside '
         'one document while the loss skips the boundary').split()


def documents(count: int, seed: int = 0) -> list[str]:
  """`count` documents of 0 to 40 words (one in 7 is empty), some with
  non-ASCII text."""
  import random  # pylint: disable=g-import-not-at-top
  rng = random.Random(seed)
  texts = []
  for i in range(count):
    words = [rng.choice(WORDS) for _ in range(rng.randrange(0, 41))]
    if i % 5 == 1:
      words.append('naïve café 東京')
    texts.append(' '.join(words) if i % 7 != 3 else '')
  return texts


def write_jsonl(path, texts, column='text'):
  with open(path, 'w', encoding='utf-8') as f:
    for text in texts:
      f.write(json.dumps({column: text, 'id': len(text or '')}) + '\n')
  return path


@pytest.fixture(scope='session')
def bpe_file(tmp_path_factory):
  """tokenizer.json of a byte-level BPE with '<|endoftext|>' (id 0) and
  '<pad>' (id 1)."""
  tokenizers = pytest.importorskip('tokenizers')
  from tokenizers import (decoders, models, pre_tokenizers,  # pylint: disable=g-import-not-at-top
                          trainers)
  bpe = tokenizers.Tokenizer(models.BPE())
  bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  bpe.decoder = decoders.ByteLevel()
  bpe.train_from_iterator(documents(200), trainers.BpeTrainer(
      vocab_size=400, special_tokens=['<|endoftext|>', '<pad>'],
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
  path = tmp_path_factory.mktemp('tokenizer') / 'tokenizer.json'
  bpe.save(str(path))
  return str(path)


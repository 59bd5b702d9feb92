"""Tokenizers loaded from a model's files give the ids of the libraries'
own classes (and of transformers', where it is installed) loading the same
files: a BPE and a SentencePiece model trained here on a text sample.

The SentencePiece reference in transformers is its SentencePiece-backed
class: its fast tokenizers converted from a .model file (T5Tokenizer or
LlamaTokenizer.from_pretrained in transformers 5.25) give other ids than the
model itself for unknown characters and leading spaces.

Importing transformers starts a process (ldconfig, through torch), so its
comparisons are in the slow tier."""

import io
import json
import os

import pytest

from recipes.data.text import tokenizer as tokenizer_lib
from recipes.runtime.errors import UserError

tokenizers = pytest.importorskip('tokenizers')

SAMPLE = """The quick brown fox jumps over the lazy dog. Packing documents
into sequences keeps every token; an end-of-text token marks where one
document stops and the next begins. Naïve café owners sell crème brûlée,
jalapeños and 東京 sushi for 12.50 € — prices rose 3% in 2025!
Tabs\tand  double  spaces, new
lines, and ünïcödé stay as they are.""".splitlines() * 20

CHECKED = ['The lazy fox packs documents.', 'crème brûlée in 東京 for 3 €',
           '  leading spaces and\ttabs\n', 'unseen: zyxwvut QQQ 9876', '']


# As models name their special tokens (null: none).
CONFIG = {'bos_token': '<s>', 'eos_token': '</s>', 'pad_token': None}


def _bpe(folder, config=CONFIG):
  """A byte-level BPE trained on SAMPLE, saved as FOLDER/tokenizer.json."""
  from tokenizers import (decoders, models, pre_tokenizers,  # pylint: disable=g-import-not-at-top
                          trainers)
  bpe = tokenizers.Tokenizer(models.BPE())
  bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  bpe.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
      vocab_size=300, special_tokens=['<pad>', '<s>', '</s>'],
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  bpe.train_from_iterator(SAMPLE, trainer)
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, 'tokenizer.json')
  bpe.save(path)
  if config is not None:
    with open(os.path.join(folder, 'tokenizer_config.json'), 'w') as f:
      json.dump(config, f)
  return path


def _sentencepiece_model(folder, model_type='unigram'):
  sentencepiece = pytest.importorskip('sentencepiece')
  model = io.BytesIO()
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(SAMPLE), model_writer=model, vocab_size=120,
      model_type=model_type, hard_vocab_limit=False, pad_id=3,
      character_coverage=1.0, minloglevel=2)
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, 'tokenizer.model')
  with open(path, 'wb') as f:
    f.write(model.getvalue())
  return path


def test_bpe_gives_the_ids_of_the_tokenizers_library(tmp_path):
  path = _bpe(tmp_path / 'model')
  ours = tokenizer_lib.load(path)
  theirs = tokenizers.Tokenizer.from_file(path)
  for text in CHECKED:
    ids = ours.encode(text)
    assert ids == theirs.encode(text, add_special_tokens=False).ids
    assert ours.decode(ids) == text  # Byte-level: every text comes back.
  assert ours.encode_batch(CHECKED) == [ours.encode(t) for t in CHECKED]
  assert ours.kind == 'tokenizers'
  assert ours.vocab_size == theirs.get_vocab_size()
  # As tokenizer_config.json names them; its null pad token is none.
  assert (ours.bos_id, ours.eos_id, ours.pad_id) == (1, 2, None)


@pytest.mark.slow
def test_bpe_gives_the_ids_of_transformers(tmp_path):
  transformers = pytest.importorskip(
      'transformers', reason='transformers is in the convert-test extra')
  path = _bpe(tmp_path / 'model')
  ours = tokenizer_lib.load(tmp_path / 'model')  # The model's folder.
  theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / 'model'))
  for text in CHECKED:
    assert ours.encode(text) == theirs(text, add_special_tokens=False
                                       )['input_ids']
  assert ours.eos_id == theirs.eos_token_id and ours.path == str(path)


def test_without_a_config_the_usual_names_are_special(tmp_path):
  ours = tokenizer_lib.load(_bpe(tmp_path, config=None))
  assert (ours.bos_id, ours.eos_id, ours.pad_id) == (1, 2, 0)


def test_a_config_may_name_tokens_as_added_tokens(tmp_path):
  # Older configs: {"__type": "AddedToken", "content": ...}.
  ours = tokenizer_lib.load(_bpe(tmp_path, config={
      'eos_token': {'__type': 'AddedToken', 'content': '<s>'}}))
  assert (ours.bos_id, ours.eos_id, ours.pad_id) == (1, 1, 0)


@pytest.mark.parametrize('model_type', ['unigram', 'bpe'])
def test_sentencepiece_gives_the_ids_of_sentencepiece(tmp_path, model_type):
  path = _sentencepiece_model(tmp_path, model_type)
  import sentencepiece  # pylint: disable=g-import-not-at-top
  theirs = sentencepiece.SentencePieceProcessor(model_file=path)
  ours = tokenizer_lib.load(path)
  for text in CHECKED:
    ids = ours.encode(text)
    assert ids == theirs.encode(text)
    assert ours.decode(ids) == theirs.decode(ids)
  assert ours.kind == 'sentencepiece'
  assert ours.vocab_size == theirs.get_piece_size()
  assert (ours.bos_id, ours.eos_id, ours.pad_id) == (1, 2, 3)


def test_a_config_names_a_sentencepiece_models_special_tokens(tmp_path):
  # SigLIP's folders: the model's own padding is '<pad>', the config's
  # '</s>' (what SigLIP was trained padding with).
  path = _sentencepiece_model(tmp_path)
  with open(tmp_path / 'tokenizer_config.json', 'w') as f:
    json.dump({'pad_token': '</s>', 'bos_token': None,
               'eos_token': {'content': 'no such piece'}}, f)
  ours = tokenizer_lib.load(path)
  assert (ours.bos_id, ours.eos_id, ours.pad_id) == (None, None, 2)


@pytest.mark.slow
@pytest.mark.parametrize('model_type', ['unigram', 'bpe'])
def test_sentencepiece_gives_the_ids_of_transformers(tmp_path, model_type):
  transformers = pytest.importorskip(
      'transformers', reason='transformers is in the convert-test extra')
  path = _sentencepiece_model(tmp_path, model_type)
  theirs = transformers.SentencePieceBackend(vocab_file=path)
  ours = tokenizer_lib.load(path)
  for text in CHECKED:
    assert ours.encode(text) == theirs(text, add_special_tokens=False
                                       )['input_ids'], text


def test_a_folder_prefers_tokenizer_json(tmp_path):
  _sentencepiece_model(tmp_path)
  _bpe(tmp_path)
  assert tokenizer_lib.load(tmp_path).kind == 'tokenizers'


@pytest.mark.parametrize('name, content, says', [
    ('missing.json', None, 'there is no tokenizer file'),
    ('tokenizer.json', b'{"version": "1.0", "model": {', 'cannot be read'),
    ('tokenizer.json', b'\xff\xfe not json', 'cannot be read'),
    ('tokenizer.model', b'\x00\x01 not a model', 'cannot be read'),
    ('tokenizer.model', b'', 'cannot be read'),
])
def test_a_missing_or_damaged_file_is_one_line(tmp_path, name, content, says):
  if name.endswith('.model'):
    pytest.importorskip('sentencepiece')
  path = tmp_path / name
  if content is not None:
    path.write_bytes(content)
  with pytest.raises(UserError, match=says) as error:
    tokenizer_lib.load(path)
  assert '\n' not in str(error.value) and str(path) in str(error.value)


def test_a_folder_without_a_tokenizer_is_one_line(tmp_path):
  with pytest.raises(UserError, match='holds none of tokenizer.json'):
    tokenizer_lib.load(tmp_path)


def test_bytes_are_utf8_with_one_end_of_text_id():
  tokenizer = tokenizer_lib.load(tokenizer_lib.BYTES)
  assert (tokenizer.vocab_size, tokenizer.eos_id, tokenizer.bos_id,
          tokenizer.pad_id, tokenizer.sha256) == (257, 256, None, None, None)
  for text in CHECKED + SAMPLE[:5]:
    ids = tokenizer.encode(text)
    assert ids == list(text.encode('utf-8'))
    assert tokenizer.decode(ids + [256]) == text
  assert tokenizer.encode_batch(['é', 'a']) == [[0xc3, 0xa9], [0x61]]
  assert tokenizer.decode([0xc3]) == '\ufffd'  # A cut character.

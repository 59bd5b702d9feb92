"""A model's own tokenizer, from its files: Hugging Face `tokenizers`
(tokenizer.json) or SentencePiece (a .model file), whichever the model
ships.

Text is encoded without the special tokens a tokenizer's post-processor
would add (a BOS for Llama, [CLS]/[SEP] for BERT): packing adds the document
boundaries itself (recipes/data/text/packing.py). So `encode` gives the ids
of `tokenizers.Tokenizer.encode(text, add_special_tokens=False)`, of
transformers' `tokenizer(text, add_special_tokens=False)` loading the same
file, and of `SentencePieceProcessor.encode(text)`.

Which tokens are BOS, EOS and padding: models name them in
tokenizer_config.json beside the tokenizer, which is read when present. A
tokenizer.json does not say, so without that file the usual names are
looked up ('</s>', '<|endoftext|>', ...); a SentencePiece model records its
own ids, which the config overrides where it names others (SigLIP pads with
'</s>', not its model's '<pad>').

`bytes` is the one tokenizer without files: a document's UTF-8 bytes are its
ids (0-255), and 256 ends a document, so 257 ids in all. It needs no
model's files and no library, which suits a small model trained from
scratch (configs/text_fortunes.py); its perplexity is per byte.

Both libraries are the `text` extra (`pip install 'jax-model-zoo[text]'`),
imported only when a tokenizer of their kind is loaded.
"""

import dataclasses
import json
import os
from typing import Any, Callable, Sequence

from recipes.runtime.errors import UserError, describe

# Looked up, in order, when tokenizer_config.json does not name the tokens.
_BOS = ('<s>', '<|begin_of_text|>', '<bos>', '<|startoftext|>', '[CLS]')
_EOS = ('</s>', '<|endoftext|>', '<|end_of_text|>', '<eos>', '[SEP]')
_PAD = ('<pad>', '[PAD]', '<|pad|>', '<|padding|>')
# The files of a model's folder, in the order they are tried.
BYTES = 'bytes'  # load(BYTES): UTF-8 bytes, without files.
_FILES = ('tokenizer.json', 'tokenizer.model', 'spiece.model',
          'sentencepiece.bpe.model')


@dataclasses.dataclass(frozen=True)
class Tokenizer:
  """Text to ids and back; the special ids are None where the tokenizer has
  no such token."""

  path: str  # The file it was loaded from; BYTES for bytes.
  kind: str  # 'tokenizers', 'sentencepiece' or 'bytes'.
  vocab_size: int
  bos_id: int | None
  eos_id: int | None
  pad_id: int | None
  _encode: Callable[[Sequence[str]], list[list[int]]]
  _decode: Callable[[Sequence[int]], str]

  @property
  def sha256(self) -> str | None:
    """The checksum of its file; None for bytes, which has none."""
    from recipes.data.sources import array_records  # pylint: disable=g-import-not-at-top
    return None if self.kind == BYTES else array_records.sha256(self.path)

  def encode(self, text: str) -> list[int]:
    """The ids of `text`, without special tokens."""
    return self._encode([text])[0]

  def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
    """The ids of each of `texts` (in parallel where the library can)."""
    return self._encode(list(texts))

  def decode(self, ids: Sequence[int]) -> str:
    """The text of `ids` (special tokens left out)."""
    return self._decode([int(i) for i in ids])


def load(path: str | os.PathLike) -> Tokenizer:
  """The tokenizer in `path`.

  Args:
    path: a tokenizer.json, a SentencePiece .model file, or a model's folder
      holding one (tokenizer.json is preferred, as transformers' fast
      tokenizers prefer it); or BYTES.

  Returns:
    The tokenizer.

  Raises:
    UserError: no such file, a folder without a tokenizer, a damaged file,
      or the library for it not installed; one line naming the file.
  """
  if os.fspath(path) == BYTES:
    return _bytes()
  path = os.path.abspath(os.path.expanduser(os.fspath(path)))
  if os.path.isdir(path):
    found = [os.path.join(path, name) for name in _FILES
             if os.path.isfile(os.path.join(path, name))]
    if not found:
      raise UserError(f'tokenizer folder {path} holds none of '
                      f'{", ".join(_FILES)}; give the model\'s tokenizer '
                      'file.')
    path = found[0]
  elif not os.path.isfile(path):
    raise UserError(f'there is no tokenizer file {path}; give a '
                    'tokenizer.json, a SentencePiece .model file, the '
                    f"model's folder, or {BYTES}.")
  if path.endswith('.json'):
    return _hugging_face(path)
  return _sentencepiece(path)


def _hugging_face(path: str) -> Tokenizer:
  try:
    import tokenizers  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise _missing('tokenizers', e) from None
  try:
    tokenizer = tokenizers.Tokenizer.from_file(path)
  except Exception as e:  # pylint: disable=broad-except
    # Rust's errors (bad JSON, an unknown model) come as `Exception`.
    raise _damaged(path, e) from None
  names = _configured_names(os.path.dirname(path))
  vocab = tokenizer.get_vocab(with_added_tokens=True)

  def find(key: str, usual: Sequence[str]) -> int | None:
    if key in names:  # Named by the model, or null: it has none.
      return vocab.get(names[key]) if names[key] is not None else None
    return next((vocab[n] for n in usual if n in vocab), None)

  def encode(texts):
    return [e.ids for e in tokenizer.encode_batch(texts,
                                                  add_special_tokens=False)]

  return Tokenizer(path, 'tokenizers', tokenizer.get_vocab_size(True),
                   find('bos_token', _BOS), find('eos_token', _EOS),
                   find('pad_token', _PAD), encode,
                   lambda ids: tokenizer.decode(ids, skip_special_tokens=True))


def _bytes() -> Tokenizer:
  end = 256  # After the 256 byte values.

  def encode(texts):
    return [list(text.encode('utf-8')) for text in texts]

  def decode(ids):
    return bytes(i for i in ids if 0 <= i < end).decode('utf-8', 'replace')

  return Tokenizer(BYTES, BYTES, end + 1, None, end, None, encode, decode)


def _configured_names(folder: str) -> dict[str, str | None]:
  """bos_token, eos_token, pad_token as the model's tokenizer_config.json
  names them (a string, or a dict with 'content'); {} without that file."""
  try:
    with open(os.path.join(folder, 'tokenizer_config.json'),
              encoding='utf-8') as f:
      config: Any = json.load(f)
  except (OSError, ValueError):
    return {}
  names = {}
  for key in ('bos_token', 'eos_token', 'pad_token'):
    value = config.get(key) if isinstance(config, dict) else None
    if isinstance(value, dict):
      value = value.get('content')
    if isinstance(value, str) or (value is None and key in config):
      names[key] = value
  return names


def _sentencepiece(path: str) -> Tokenizer:
  try:
    import sentencepiece  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise _missing('sentencepiece', e) from None
  processor = sentencepiece.SentencePieceProcessor()
  try:
    processor.Load(path)
  except Exception as e:  # pylint: disable=broad-except
    raise _damaged(path, e) from None

  names = _configured_names(os.path.dirname(path))

  def special(key: str, i: int) -> int | None:
    if key in names:  # Named by the model, or null: it has none.
      name = names[key]
      i = processor.PieceToId(name) if name is not None else -1
      if name is not None and processor.IdToPiece(i) != name:
        i = -1  # PieceToId gives the unknown token's id for any other.
    return i if i >= 0 else None  # -1: the model has no such token.

  return Tokenizer(path, 'sentencepiece', processor.GetPieceSize(),
                   special('bos_token', processor.bos_id()),
                   special('eos_token', processor.eos_id()),
                   special('pad_token', processor.pad_id()),
                   lambda texts: processor.Encode(list(texts)),
                   processor.Decode)


def _missing(package: str, error: ImportError) -> UserError:
  return UserError(f'this tokenizer needs the `{package}` package ({error}): '
                   "pip install 'jax-model-zoo[text]'.")


def _damaged(path: str, error: BaseException) -> UserError:
  return UserError(f'tokenizer file {path} cannot be read ({describe(error)}'
                   '); it is damaged or not a tokenizer: give the model\'s '
                   'tokenizer.json or SentencePiece .model file.')

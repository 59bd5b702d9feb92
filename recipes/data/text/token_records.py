"""Packed token sequences in ArrayRecord shards: what `python -m
recipes.data.prepare SRC DST --tokenizer=FILE --seq_len=N` writes, and how
it is read back.

Each record is one packed sequence (recipes/data/text/packing.py has the
rule): its seq_len + 1 token ids, then their seq_len + 1 segment ids, as
little-endian int32, 8 * (seq_len + 1) bytes. Raw arrays rather than a
tf.train.Example: a reader decodes them with one `np.frombuffer`, without
TensorFlow.

The prepared directory is the one images have (recipes/data/sources/
array_records.py: shards, manifest.json with each shard's sha256, --verify,
a stopped prepare continued), with a "tokens" object in its manifest
(tokenizer, tokenizer_sha256, text_column, seq_len, vocab_size, bos_id,
eos_id, pad_id). A shard packs the documents [k * examples_per_shard,
(k + 1) * examples_per_shard) of its split on their own, so it is a pure
function of them (a stopped prepare rewrites only unfinished shards), at
the cost of one padded record per shard.
"""

import dataclasses
from typing import Any, Iterator, Sequence

import numpy as np

from recipes.data.sources import array_records
from recipes.data.sources.texts import TextSource
from recipes.data.text import packing
from recipes.data.text.tokenizer import Tokenizer
from recipes.runtime import storage
from recipes.runtime.errors import UserError

_DTYPE = np.dtype('<i4')
_TOKENIZE_CHUNK = 256  # Documents tokenized at once (in parallel).


def encode(tokens: np.ndarray, segments: np.ndarray) -> bytes:
  """One record: a packed sequence's tokens and segment ids ([seq_len + 1]
  each)."""
  return np.stack([tokens, segments]).astype(_DTYPE).tobytes()


def decode(record: bytes, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
  """(tokens, segments) of a record, int32 [seq_len + 1] each.

  Raises:
    ValueError: a record of another size.
  """
  size = 2 * (seq_len + 1) * _DTYPE.itemsize
  if len(record) != size:
    raise ValueError(f'{len(record)} bytes, not the {size} of a sequence of '
                     f'{seq_len} tokens')
  both = np.frombuffer(record, _DTYPE).reshape(2, seq_len + 1)
  return both[0].astype(np.int32), both[1].astype(np.int32)


class Packer:
  """The packed sequences of a text source, shard by shard: what the
  prepare command writes (its `Contents`)."""

  unit = 'documents'

  def __init__(self, source: TextSource, tokenizer: Tokenizer, seq_len: int):
    """
    Args:
      source: the documents.
      tokenizer: their tokenizer; it must have an end-of-text token.
      seq_len: the model's sequence length.

    Raises:
      UserError: seq_len < 1, or a tokenizer without an end-of-text token.
    """
    check_seq_len(seq_len)
    if tokenizer.eos_id is None:
      raise UserError(
          f'tokenizer {tokenizer.path} has no end-of-text token to separate '
          'documents (none is named eos_token in tokenizer_config.json '
          'beside it, nor is one of the usual ones, such as </s> or '
          '<|endoftext|>, in its vocabulary); add eos_token to '
          "the model's tokenizer_config.json.")
    self.name = source.name
    self._source, self._tokenizer, self._seq_len = source, tokenizer, seq_len
    self.sizes = {split: len(texts) for split, texts in source.splits.items()}
    self.fields = {'tokens': {
        'tokenizer': tokenizer.path,
        'tokenizer_sha256': tokenizer.sha256,
        'text_column': source.column, 'seq_len': seq_len,
        'vocab_size': tokenizer.vocab_size, 'bos_id': tokenizer.bos_id,
        'eos_id': tokenizer.eos_id,
        'pad_id': (tokenizer.eos_id if tokenizer.pad_id is None
                   else tokenizer.pad_id)}}

  def records(self, split: str, start: int, stop: int
              ) -> Iterator[tuple[int, list[bytes]]]:
    """The records packed from documents [start, stop) of `split`: yields
    (documents read, records) as it goes, the records at the end."""
    texts = self._source.splits[split]
    documents = []
    for first in range(start, stop, _TOKENIZE_CHUNK):
      indices = list(range(first, min(stop, first + _TOKENIZE_CHUNK)))
      documents += self._tokenizer.encode_batch(texts.read(indices))
      yield len(indices), []
    tokens = self.fields['tokens']
    packed = packing.pack(documents, self._seq_len, tokens['eos_id'],
                          tokens['pad_id'], tokens['bos_id'])
    yield 0, [encode(t, s) for t, s in zip(*packed)]


def check_seq_len(seq_len: int):
  if not isinstance(seq_len, int) or seq_len < 1:
    raise UserError(f'--seq_len={seq_len} must be a positive number of '
                    'tokens, e.g. 1024.')


class Sequences(array_records.ShardedRecords):
  """One split of packed sequences, by index."""

  def __init__(self, shards: Sequence[tuple[str, int]], where: str,
               seq_len: int):
    super().__init__(shards, where)
    self.seq_len = seq_len

  def read(self, indices: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, segments) of the records at `indices`, int32
    [len(indices), seq_len + 1] each.

    Raises:
      UserError: a record could not be read or is damaged; names it.
    """
    indices = [int(i) for i in indices]
    tokens = np.empty([len(indices), self.seq_len + 1], np.int32)
    segments = np.empty_like(tokens)
    for i, (index, record) in enumerate(zip(indices,
                                            self.records(indices))):
      try:
        tokens[i], segments[i] = decode(record, self.seq_len)
      except ValueError as e:
        raise UserError(f'{self.describe(index)} is damaged ({e}); prepare '
                        'the data again.') from None
    return tokens, segments

  def inputs(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
    """The model inputs of the records at `indices`
    (`packing.model_inputs`)."""
    return packing.model_inputs(*self.read(indices))


@dataclasses.dataclass(frozen=True)
class TokenRecords:
  """A prepared directory of token sequences."""

  name: str
  tokens: dict[str, Any]  # The manifest's "tokens": tokenizer, seq_len, ids.
  splits: dict[str, Any]  # Sequences; labelled_records.Documents.
  class_names: tuple[str, ...] = ()  # Labelled text's classes.

  @property
  def seq_len(self) -> int:
    return self.tokens['seq_len']


def open(path: str) -> TokenRecords:  # pylint: disable=redefined-builtin
  """The prepared directory of token sequences `path`; reads no record.

  Raises:
    UserError: as `array_records.open_prepared`, or a directory of images.
  """
  manifest, shards = array_records.open_prepared(path)
  where = f'the prepared directory {storage.path(path)}'
  if 'tokens' not in manifest:
    raise UserError(f'{where} holds images, not token sequences; prepare '
                    'text with: python -m recipes.data.prepare SRC DST '
                    '--tokenizer=FILE --seq_len=N.')
  seq_len = manifest['tokens']['seq_len']
  return TokenRecords(where, manifest['tokens'], {
      split: Sequences(files, where, seq_len)
      for split, files in shards.items()})

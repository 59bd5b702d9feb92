"""Labelled text as ArrayRecord records, one per document: what `python -m
recipes.data.prepare SRC DST --tokenizer=FILE --seq_len=N
--label_column=C` writes for a text classifier, and how it is read back.

Each document becomes `[start] ids [end]`, truncated to seq_len (its ids
cut, the start and end kept) and padded to seq_len with the padding id. The
start is the tokenizer's BOS ([CLS] for BERT, <s> for RoBERTa), the end its
EOS ([SEP], </s>); `--tokenizer=bytes` has no BOS, so its end-of-text id
(256) starts the document too: `[256] bytes [256]`, the start the
classifier pools. Padding is the tokenizer's padding id, else EOS.

A record is the document's class id, its length (tokens before the
padding) and its seq_len ids, as little-endian int32: 4 * (seq_len + 2)
bytes, decoded with one `np.frombuffer`. The manifest is that of token
sequences (recipes/data/sources/array_records.py) with "label_column" and
"start_id" in its "tokens" and the class names in "class_names"; each
shard holds one record per document.
"""

from typing import Any, Iterator, Sequence

import numpy as np

from recipes.data.sources import array_records
from recipes.data.sources.labelled_texts import LabelledText
from recipes.data.text import token_records
from recipes.data.text.tokenizer import Tokenizer
from recipes.runtime import storage
from recipes.runtime.errors import UserError

_DTYPE = np.dtype('<i4')
_TOKENIZE_CHUNK = 256  # Documents tokenized at once (in parallel).


def is_labelled(manifest: dict[str, Any] | None) -> bool:
  """Whether a prepared directory's manifest is one of labelled text."""
  return 'label_column' in (manifest or {}).get('tokens', {})


def example(ids: Sequence[int], seq_len: int, start_id: int, end_id: int,
            pad_id: int) -> tuple[np.ndarray, int]:
  """(`[start] ids [end]` cut or padded to seq_len, its length before the
  padding)."""
  kept = [start_id, *ids[:max(seq_len - 2, 0)], end_id][:seq_len]
  row = np.full([seq_len], pad_id, np.int32)
  row[:len(kept)] = kept
  return row, len(kept)


def encode(label: int, length: int, row: np.ndarray) -> bytes:
  """One record: a document's class, length and ids."""
  return np.concatenate([[label, length], row]).astype(_DTYPE).tobytes()


def decode(record: bytes, seq_len: int) -> tuple[int, int, np.ndarray]:
  """(label, length, ids [seq_len]) of a record.

  Raises:
    ValueError: a record of another size or an impossible length.
  """
  size = (seq_len + 2) * _DTYPE.itemsize
  if len(record) != size:
    raise ValueError(f'{len(record)} bytes, not the {size} of a document of '
                     f'{seq_len} tokens')
  values = np.frombuffer(record, _DTYPE)
  if not 1 <= values[1] <= seq_len:
    raise ValueError(f'a length of {values[1]}')
  return int(values[0]), int(values[1]), values[2:].astype(np.int32)


class Labeller:
  """The records of labelled text, shard by shard: what the prepare
  command writes (its `Contents`)."""

  unit = 'documents'

  def __init__(self, source: LabelledText, tokenizer: Tokenizer,
               seq_len: int):
    """
    Args:
      source: the documents and their classes.
      tokenizer: their tokenizer; it must have an end-of-text token.
      seq_len: the model's sequence length, at least 2.

    Raises:
      UserError: seq_len < 2, or a tokenizer without an end-of-text token.
    """
    token_records.check_seq_len(seq_len)
    if seq_len < 2:
      raise UserError(f'--seq_len={seq_len} leaves no room for the start '
                      'and end tokens of a document; give 2 or more, e.g. '
                      '128.')
    if tokenizer.eos_id is None:
      raise UserError(
          f'tokenizer {tokenizer.path} has no end-of-text token to end a '
          'document (none is named eos_token in tokenizer_config.json '
          "beside it, nor is [SEP] or </s> in its vocabulary); add "
          "eos_token to the model's tokenizer_config.json.")
    self.name = source.name
    self._source, self._tokenizer, self._seq_len = source, tokenizer, seq_len
    self.sizes = {split: len(texts) for split, texts in source.splits.items()}
    start = tokenizer.eos_id if tokenizer.bos_id is None else tokenizer.bos_id
    self.fields = {'tokens': {
        'tokenizer': tokenizer.path,
        'tokenizer_sha256': tokenizer.sha256,
        'text_column': source.column, 'seq_len': seq_len,
        'vocab_size': tokenizer.vocab_size, 'bos_id': tokenizer.bos_id,
        'eos_id': tokenizer.eos_id,
        'pad_id': (tokenizer.eos_id if tokenizer.pad_id is None
                   else tokenizer.pad_id),
        'start_id': start, 'label_column': source.label_column},
                   'class_names': list(source.class_names)}

  def records(self, split: str, start: int, stop: int
              ) -> Iterator[tuple[int, list[bytes]]]:
    """The records of documents [start, stop) of `split`, in order: yields
    (documents read, their records) as it goes."""
    texts, labels = self._source.splits[split], self._source.labels[split]
    tokens = self.fields['tokens']
    for first in range(start, stop, _TOKENIZE_CHUNK):
      indices = list(range(first, min(stop, first + _TOKENIZE_CHUNK)))
      records = []
      for index, ids in zip(indices, self._tokenizer.encode_batch(
          texts.read(indices))):
        row, length = example(ids, self._seq_len, tokens['start_id'],
                              tokens['eos_id'], tokens['pad_id'])
        records.append(encode(int(labels[index]), length, row))
      yield len(indices), records


class Documents(array_records.ShardedRecords):
  """One split of labelled documents, by index."""

  def __init__(self, shards: Sequence[tuple[str, int]], where: str,
               seq_len: int, num_classes: int):
    super().__init__(shards, where)
    self.seq_len, self.num_classes = seq_len, num_classes

  def inputs(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
    """The batch of the documents at `indices`: `tokens` (int32) and `mask`
    (bool, false on padding) [len(indices), seq_len], `label` (int32)
    [len(indices)].

    Raises:
      UserError: a record could not be read or is damaged; names it.
    """
    indices = [int(i) for i in indices]
    tokens = np.empty([len(indices), self.seq_len], np.int32)
    lengths = np.empty([len(indices)], np.int32)
    labels = np.empty([len(indices)], np.int32)
    for i, (index, record) in enumerate(zip(indices,
                                            self.records(indices))):
      try:
        labels[i], lengths[i], tokens[i] = decode(record, self.seq_len)
        if not 0 <= labels[i] < self.num_classes:
          raise ValueError(f'class {labels[i]} of {self.num_classes}')
      except ValueError as e:
        raise UserError(f'{self.describe(index)} is damaged ({e}); prepare '
                        'the data again.') from None
    return {'tokens': tokens,
            'mask': np.arange(self.seq_len) < lengths[:, None],
            'label': labels}


def open(path: str) -> token_records.TokenRecords:  # pylint: disable=redefined-builtin
  """The prepared directory of labelled text `path`; reads no record.

  Raises:
    UserError: as `array_records.open_prepared`.
  """
  manifest, shards = array_records.open_prepared(path)
  where = f'the prepared directory {storage.path(path)}'
  seq_len = manifest['tokens']['seq_len']
  names = tuple(manifest['class_names'])
  return token_records.TokenRecords(where, manifest['tokens'], {
      split: Documents(files, where, seq_len, len(names))
      for split, files in shards.items()}, names)

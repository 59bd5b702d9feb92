"""Documents packed into sequences of one length, and the model's inputs of
a packed sequence.

The rule. Each document becomes [BOS] + its ids + [EOS] (BOS only where
the tokenizer has one other than EOS, as Llama's; GPT-2's end-of-text token
is both). The documents are concatenated into one stream, each token
tagged with its document, and the stream is cut into records of
seq_len + 1 tokens that overlap by one: record i holds stream tokens
[i * seq_len, (i + 1) * seq_len], so every token after the first is a
target exactly once, and a model reads inputs = record[:-1] and
targets = record[1:]. The last record is filled with the pad id (the
tokenizer's, else EOS), tagged 0. Nothing is dropped: a document longer
than seq_len continues in the next record.

Within a record the documents are numbered 1, 2, ... in order (segment
ids; 0 is padding) and each token's position counts from 0 at its
document's first token in the record (a document continued from the
record before starts again at 0). A model that attends only within equal
segment ids keeps documents apart. The loss mask is true where the target
is a real token of the same document as its input: not across a boundary
(EOS to the next document's first token), not into padding.
"""

from typing import Iterable, Sequence

import numpy as np


def pack(documents: Iterable[Sequence[int]], seq_len: int, eos_id: int,
         pad_id: int | None = None, bos_id: int | None = None
         ) -> tuple[np.ndarray, np.ndarray]:
  """Packs `documents` (token ids each) by the rule above.

  Args:
    documents: the ids of each document, without special tokens; at least
      one.
    seq_len: the model's sequence length; records hold seq_len + 1 tokens.
    eos_id: the end-of-text token, after every document.
    pad_id: fills the last record; None: `eos_id`.
    bos_id: put before every document unless None or `eos_id`.

  Returns:
    (tokens, segments), int32 [records, seq_len + 1] each.
  """
  if seq_len < 1:
    raise ValueError(f'seq_len {seq_len} must be at least 1')
  start = [bos_id] if bos_id is not None and bos_id != eos_id else []
  parts, tags = [], []
  for number, ids in enumerate(documents, 1):
    parts.append(np.asarray(start + list(ids) + [eos_id], np.int32))
    tags.append(np.full(len(parts[-1]), number, np.int32))
  if not parts:
    raise ValueError('no documents to pack')
  stream, tagged = np.concatenate(parts), np.concatenate(tags)
  count = max(1, -(-(len(stream) - 1) // seq_len))  # ceil((T - 1) / L)
  size = count * seq_len + 1
  pad = eos_id if pad_id is None else pad_id
  stream = np.concatenate([stream, np.full(size - len(stream), pad,
                                           np.int32)])
  tagged = np.concatenate([tagged, np.zeros(size - len(tagged), np.int32)])
  rows = np.arange(count)[:, None] * seq_len + np.arange(seq_len + 1)
  tokens, segments = stream[rows], tagged[rows]
  # Documents numbered from 1 in each record: the first one's tag is the
  # smallest, since tags grow along the stream.
  segments = np.where(segments > 0, segments - segments[:, :1] + 1, 0)
  return tokens, segments.astype(np.int32)


def positions(segments: np.ndarray) -> np.ndarray:
  """Each token's position in its document within its record: 0 at the
  record's start and wherever the segment id changes (padding: 0).

  Args:
    segments: int [..., n] segment ids.

  Returns:
    int32 [..., n].
  """
  index = np.broadcast_to(np.arange(segments.shape[-1]), segments.shape)
  changes = np.ones(segments.shape, bool)
  changes[..., 1:] = segments[..., 1:] != segments[..., :-1]
  starts = np.maximum.accumulate(np.where(changes, index, 0), axis=-1)
  return np.where(segments > 0, index - starts, 0).astype(np.int32)


def model_inputs(tokens: np.ndarray, segments: np.ndarray
                 ) -> dict[str, np.ndarray]:
  """What a model trains on from packed records.

  Args:
    tokens: int [..., seq_len + 1] packed records (`pack`).
    segments: their segment ids, the same shape.

  Returns:
    `inputs` and `targets` (int32, the records shifted by one),
    `segment_ids` and `positions` of the inputs (int32), and `mask` (bool:
    where the target counts in the loss), each [..., seq_len].
  """
  return {'inputs': tokens[..., :-1].astype(np.int32),
          'targets': tokens[..., 1:].astype(np.int32),
          'segment_ids': segments[..., :-1].astype(np.int32),
          'positions': positions(segments[..., :-1]),
          'mask': (segments[..., 1:] == segments[..., :-1])
                  & (segments[..., 1:] > 0)}

"""Packing: every token kept, in order, once as a target; documents kept
apart by segment ids, positions and the loss mask."""

import numpy as np
import pytest

from recipes.data.text import packing

EOS, PAD, BOS = 0, 99, 1


def test_a_small_example_by_hand():
  tokens, segments = packing.pack([[5, 6, 7], [8], [9, 10]], seq_len=4,
                                  eos_id=EOS, pad_id=PAD)
  # The stream 5 6 7 E 8 E 9 10 E, cut into 5-token records overlapping by 1.
  np.testing.assert_array_equal(tokens, [[5, 6, 7, EOS, 8],
                                         [8, EOS, 9, 10, EOS]])
  np.testing.assert_array_equal(segments, [[1, 1, 1, 1, 2], [1, 1, 2, 2, 2]])
  got = packing.model_inputs(tokens, segments)
  np.testing.assert_array_equal(got['inputs'], [[5, 6, 7, EOS],
                                               [8, EOS, 9, 10]])
  np.testing.assert_array_equal(got['targets'], [[6, 7, EOS, 8],
                                                [EOS, 9, 10, EOS]])
  np.testing.assert_array_equal(got['segment_ids'], [[1, 1, 1, 1],
                                                    [1, 1, 2, 2]])
  np.testing.assert_array_equal(got['positions'], [[0, 1, 2, 3],
                                                  [0, 1, 0, 1]])
  # Not EOS -> the next document's first token.
  np.testing.assert_array_equal(got['mask'], [[1, 1, 1, 0], [1, 0, 1, 1]])


def test_the_last_record_is_padded_and_masked():
  tokens, segments = packing.pack([[5, 6]], seq_len=4, eos_id=EOS,
                                  pad_id=PAD)
  np.testing.assert_array_equal(tokens, [[5, 6, EOS, PAD, PAD]])
  np.testing.assert_array_equal(segments, [[1, 1, 1, 0, 0]])
  got = packing.model_inputs(tokens, segments)
  np.testing.assert_array_equal(got['mask'], [[1, 1, 0, 0]])
  np.testing.assert_array_equal(got['positions'], [[0, 1, 2, 0]])
  # Without a pad id, EOS pads.
  assert packing.pack([[5]], 3, EOS)[0].tolist() == [[5, EOS, EOS, EOS]]


def test_bos_starts_each_document_unless_it_is_eos():
  tokens, _ = packing.pack([[5], [6]], seq_len=8, eos_id=EOS, pad_id=PAD,
                           bos_id=BOS)
  assert tokens[0].tolist()[:6] == [BOS, 5, EOS, BOS, 6, EOS]
  tokens, _ = packing.pack([[5], [6]], seq_len=8, eos_id=EOS, bos_id=EOS)
  assert tokens[0].tolist()[:4] == [5, EOS, 6, EOS]


@pytest.mark.parametrize('seq_len', [1, 3, 7, 64])
def test_every_token_is_a_target_once_in_order(seq_len):
  rng = np.random.default_rng(seq_len)
  documents = [list(rng.integers(2, 50, rng.integers(0, 20)))
               for _ in range(30)]
  tokens, segments = packing.pack(documents, seq_len, EOS, PAD)
  assert tokens.shape == segments.shape == (len(tokens), seq_len + 1)
  assert tokens.dtype == segments.dtype == np.int32
  got = packing.model_inputs(tokens, segments)
  real = segments[:, 1:] > 0
  stream = [t for d in documents for t in d + [EOS]]
  assert [tokens[0, 0]] + list(got['targets'][real]) == stream
  # Each pair of neighbours of the stream is an (input, target) once; the
  # mask leaves out the pairs across the len - 1 boundaries.
  assert got['mask'].sum() == len(stream) - 1 - (len(documents) - 1)
  inputs_doc, targets_doc = segments[:, :-1], segments[:, 1:]
  np.testing.assert_array_equal(
      got['mask'], (inputs_doc == targets_doc) & (targets_doc > 0))
  # Positions count tokens of a document within its record.
  for row, pos in zip(got['segment_ids'], got['positions']):
    for segment in set(row[row > 0].tolist()):
      np.testing.assert_array_equal(pos[row == segment],
                                    np.arange((row == segment).sum()))


def test_a_long_document_continues_in_the_next_record():
  tokens, segments = packing.pack([list(range(2, 12))], seq_len=4,
                                  eos_id=EOS)
  assert tokens.tolist() == [[2, 3, 4, 5, 6], [6, 7, 8, 9, 10],
                             [10, 11, EOS, EOS, EOS]]
  assert segments.tolist() == [[1] * 5, [1] * 5, [1, 1, 1, 0, 0]]


def test_bad_arguments():
  with pytest.raises(ValueError, match='seq_len 0'):
    packing.pack([[1]], 0, EOS)
  with pytest.raises(ValueError, match='no documents'):
    packing.pack([], 4, EOS)

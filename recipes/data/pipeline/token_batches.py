"""Batches of packed token sequences, streamed by index in the order of
every dataset read by index (recipes/data/pipeline/random_access.py).

The global batch at step s is a pure function of (seed, s): epoch e visits
the sequences in the permutation of (seed, e) that images use, and each
process reads only its own rows of each global batch. So 1, 2 or 4
processes see the same global batches, and a run resumed at step s reads
nothing before it. Each batch holds, per row, the model inputs of
recipes/data/text/packing.py: `inputs`, `targets`, `segment_ids`,
`positions` (int32) and `mask` (bool), each [rows, seq_len]; evaluation
pads its last batch with rows whose mask is false.

Labelled text for a classifier (recipes/data/text/labelled_records.py) is
read the same way, one document a row: `tokens` and `mask` (false on
padding) [rows, seq_len], and `label` [rows]; its classes are the
manifest's.
"""

from typing import Iterator, Sequence

import numpy as np

from recipes.data.pipeline import in_memory, random_access
from recipes.data.pipeline.dataset import Batch, process_slice
from recipes.data.sources import array_records
from recipes.data.text import labelled_records, token_records
from recipes.runtime.errors import UserError


class TokenDataset:
  """A training split and evaluation splits of packed token sequences,
  batched for this process; the first evaluation split is the main one.
  It is a `Dataset` (recipes/data/pipeline/dataset.py) whose examples are
  sequences: no classes (labelled text: the documents' classes), and
  `image_shape` is the model's input shape, (seq_len,)."""

  files = {}  # The Dataset interface's: no files to check.

  def __init__(self, train: token_records.Sequences,
               evals: dict[str, token_records.Sequences], threads: int = 0,
               tokens: dict | None = None, class_names: tuple[str, ...] = ()):
    """
    Args:
      train: the training split (labelled_records.Documents for labelled
        text).
      evals: the evaluation splits by name, the main one first.
      threads: batches made at once; 0: random_access.default_threads().
      tokens: the manifest's "tokens" (tokenizer, vocab_size, ids), if
        known.
      class_names: labelled text's classes; (): packed sequences.
    """
    self.train, self.evals = train, evals
    self.seq_len = train.seq_len
    self.threads = threads or random_access.default_threads()
    self.tokens = tokens or {}
    self.class_names = tuple(class_names)

  @property
  def vocab_size(self) -> int | None:
    """The tokenizer's vocabulary size: every id is below it (None if not
    known)."""
    return self.tokens.get('vocab_size')

  @property
  def num_classes(self) -> int:
    """Labelled text's classes; 0 for packed sequences, whose outputs the
    model's vocabulary sets."""
    return len(self.class_names)

  @property
  def image_shape(self) -> tuple[int, ...]:
    """The shape of one example as the model sees it: (seq_len,) ids."""
    return (self.seq_len,)

  @property
  def num_eval(self) -> int:
    """Sequences in the first evaluation split."""
    return len(next(iter(self.evals.values())))

  @property
  def num_train(self) -> int:
    """Sequences in the training split."""
    return len(self.train)

  @property
  def eval_sizes(self) -> dict[str, int]:
    """Sequences in each evaluation split, in the order given."""
    return {split: len(sequences) for split, sequences in self.evals.items()}

  def train_batches(self, *, batch_size: int, seed: int, start_step: int,
                    num_steps: int) -> Iterator[Batch]:
    """This process's rows of the global batches of steps [start_step,
    num_steps) (`batch_size` is global), as in `Dataset.train_batches`."""
    if in_memory.steps_per_epoch(len(self.train), batch_size) < 1:
      raise UserError(f'the training split has {len(self.train):,} '
                      f'sequences, fewer than a batch of {batch_size}; '
                      'prepare more text or use a smaller batch.')
    start, stop = process_slice(batch_size)
    order = random_access.EpochOrders(len(self.train), seed)

    def make(step: int) -> Batch:
      rows = order.rows(step, batch_size, start, stop)
      return self.train.inputs(rows)

    return random_access.stream(start_step, num_steps, make, self.threads)

  def eval_batches(self, *, batch_size: int, split: str | None = None
                   ) -> Iterator[Batch]:
    """One pass over evaluation split `split` (None: the first), in order,
    padded to whole batches with rows whose mask is false."""
    sequences = self.evals[in_memory.eval_split(self.evals, split)]
    n = len(sequences)
    start, stop = process_slice(batch_size)

    def make(step: int) -> Batch:
      positions = step * batch_size + np.arange(start, stop)
      batch = sequences.inputs(np.minimum(positions, n - 1))
      batch['mask'] &= (positions < n)[:, None]
      return batch

    return random_access.stream(0, in_memory.num_eval_steps(n, batch_size),
                                make, self.threads)


def open(path: str, train_split: str = 'train',  # pylint: disable=redefined-builtin
         eval_splits: Sequence[str] = (), threads: int = 0) -> TokenDataset:
  """The prepared token sequences in `path` as a TokenDataset.

  Args:
    path: a directory of `python -m recipes.data.prepare SRC DST
      --tokenizer=FILE --seq_len=N`.
    train_split: the training split, a whole split's name.
    eval_splits: the evaluation splits; empty: the training split.
    threads: batches made at once; 0: automatic.

  Raises:
    UserError: as token_records.open, or a split that is not there.
  """
  labelled = labelled_records.is_labelled(array_records.read_manifest(path))
  records = (labelled_records if labelled else token_records).open(path)
  splits = {}
  for split in (train_split, *eval_splits):
    if split not in records.splits:
      raise UserError(f'{records.name} has no split {split!r} (it has '
                      f'{", ".join(records.splits)}).')
    splits[split] = records.splits[split]
  evals = {s: splits[s] for s in eval_splits or (train_split,)}
  return TokenDataset(splits[train_split], evals, threads, records.tokens,
                      records.class_names)

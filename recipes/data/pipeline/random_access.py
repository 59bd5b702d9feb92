"""Streams encoded examples read by index (image folders, Hugging Face
datasets, ArrayRecord files) with Grain, in the in-memory pipeline's order.

The data-order rule of recipes/data/pipeline/in_memory.py holds here at any size: the
global batch at step s is a pure function of (seed, s). Epoch e visits the
examples in the same permutation of (seed, e) as in memory, each process
reads only its own rows of each global batch, by index, and a resumed run
starts at its step without reading anything before it. So 1, 2 or 4
processes, and a resumed run, see the same global batches bitwise, and a
folder streamed equals the same folder held in memory.

Grain maps steps to batches on `threads` threads, a few batches ahead: each
reads its records and runs one TensorFlow function that decodes and augments
the whole batch (recipes/data/images/decoding.py); TensorFlow releases the GIL, so
the threads use the cores.
"""

import os
import threading
from typing import Callable, Iterator

import numpy as np

from recipes.data.images import decoding
from recipes.data.images.preprocess import Preprocessing
from recipes.data.pipeline import in_memory
from recipes.data.pipeline.dataset import Batch, process_slice
from recipes.data.sources.examples import Examples


def default_threads() -> int:
  """Batches made at once: two per core (one reads while another
  decodes: 1.3-1.5x the images/s of one per core on small PNGs, as fast on
  JPEGs), up to 16 (each holds a batch in memory)."""
  return min(2 * len(os.sched_getaffinity(0)), 16)


class EpochOrders:
  """The permutation of each epoch, computed once (a resumed run computes
  only its own epoch's): the order of every dataset read by index, of
  images as of token sequences (recipes/data/pipeline/token_batches.py)."""

  def __init__(self, n: int, seed: int):
    self.n, self.seed = n, seed
    self._lock = threading.Lock()
    self._cache: dict[int, np.ndarray] = {}

  def rows(self, step: int, batch_size: int, start: int, stop: int
           ) -> np.ndarray:
    """The examples of rows [start, stop) of the global batch of `step`
    (the last incomplete batch of each epoch is dropped)."""
    epoch, within = divmod(step, in_memory.steps_per_epoch(self.n,
                                                           batch_size))
    return self(epoch)[within * batch_size + start:
                       within * batch_size + stop]

  def __call__(self, epoch: int) -> np.ndarray:
    with self._lock:
      if epoch not in self._cache:
        if len(self._cache) > 1:  # Threads work on at most two epochs.
          self._cache.pop(min(self._cache))
        self._cache[epoch] = in_memory.epoch_order(
            self.n, np.int64(self.seed), np.int64(epoch)).numpy()
      return self._cache[epoch]


class RandomAccessDataset:
  """The splits of a source of encoded examples, streamed: a Dataset
  (recipes/data/pipeline/dataset.py); the first of `evals` is the main split."""

  def __init__(self, train: Examples, evals: dict[str, Examples],
               num_classes: int, preprocessing: Preprocessing, channels: int,
               stored_shape: tuple[int, ...], threads: int = 0,
               class_names: tuple[str, ...] = (), files: dict | None = None):
    """
    Args:
      train: the training split.
      evals: the evaluation splits, by split string, the main one first.
      num_classes: labels run from 0 to num_classes - 1.
      preprocessing: how images become model inputs.
      channels: 1 or 3, the decoded images' channels.
      stored_shape: the first training image's decoded shape [H, W, C];
        every image must have it unless the preset resizes.
      threads: batches made at once; 0: default_threads().
      class_names: the name of each label, if the source has them.
      files: see Dataset.files.
    """
    self.class_names = tuple(class_names)
    self.files = files or {}
    self.train, self.evals = train, evals
    self.num_classes = num_classes
    self.preprocessing = preprocessing
    self.channels = channels
    self.stored_shape = (tuple(stored_shape) if preprocessing.keeps_size
                         else None)
    self.threads = threads or default_threads()
    self._functions = {
        train: decoding.batch_function(preprocessing, channels,
                                       tuple(stored_shape), train)
        for train in (True, False)}

  @property
  def num_train(self) -> int:
    """Examples in the training split."""
    return len(self.train)

  @property
  def eval_sizes(self) -> dict[str, int]:
    """Examples in each evaluation split, in the order given."""
    return {split: len(examples) for split, examples in self.evals.items()}

  @property
  def num_eval(self) -> int:
    """Examples in the first evaluation split."""
    return len(next(iter(self.evals.values())))

  @property
  def image_shape(self) -> tuple[int, ...]:
    """The model's input: the stored shape, or the preset's resize of it."""
    shape = self.preprocessing.image_shape(self.stored_shape or
                                           (None, None, self.channels))
    return tuple(shape)

  def _batch(self, examples: Examples, indices: np.ndarray, seeds, train):
    encoded, labels = examples.read([int(i) for i in indices])
    return decoding.run(self._functions[train], examples, indices, encoded,
                        seeds, channels=self.channels,
                        stored_shape=self.stored_shape), labels

  def _stream(self, first: int, stop: int, make: Callable) -> Iterator[Batch]:
    return stream(first, stop, make, self.threads)

  def train_batches(self, *, batch_size: int, seed: int, start_step: int,
                    num_steps: int) -> Iterator[Batch]:
    """See `Dataset.train_batches`: the same batches as an in-memory
    dataset of the same examples."""
    start, stop = process_slice(batch_size)
    order = EpochOrders(len(self.train), seed)

    def make(step: int) -> Batch:
      rows = order.rows(step, batch_size, start, stop)
      positions = step * batch_size + np.arange(start, stop, dtype=np.int64)
      seeds = np.stack([np.full_like(positions, seed), positions], axis=1)
      image, label = self._batch(self.train, rows, seeds, train=True)
      return {'image': image, 'label': label.astype(np.int32)}

    return self._stream(start_step, num_steps, make)

  def eval_batches(self, *, batch_size: int, split: str | None = None
                   ) -> Iterator[Batch]:
    """See `Dataset.eval_batches`."""
    examples = self.evals[in_memory.eval_split(self.evals, split)]
    n = len(examples)
    start, stop = process_slice(batch_size)

    def make(step: int) -> Batch:
      positions = step * batch_size + np.arange(start, stop, dtype=np.int64)
      rows = np.minimum(positions, n - 1)
      image, label = self._batch(examples, rows, np.zeros([len(rows), 2]),
                                 train=False)
      return {'image': image, 'label': label.astype(np.int32),
              'mask': positions < n}

    return self._stream(0, in_memory.num_eval_steps(n, batch_size), make)


def stream(first: int, stop: int, make: Callable[[int], Batch],
           threads: int) -> Iterator[Batch]:
  """make(step) for steps [first, stop), in order, made on `threads`
  threads a few steps ahead."""
  # Imported here: it takes a quarter of a second (its metrics client) that
  # runs whose data are not read by index need not spend.
  import grain  # pylint: disable=g-import-not-at-top

  steps = grain.MapDataset.range(first, stop).map(make)
  return iter(steps.to_iter_dataset(grain.ReadOptions(
      # Each thread's batch, and one more: a streamed batch of large images
      # is tens of MB.
      num_threads=threads, prefetch_buffer_size=threads + 1)))

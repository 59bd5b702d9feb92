"""tf.data pipelines over an in-memory split, with a fixed data order.

The data-order rule: the global batch at step s is a pure function of
(seed, s) -- the same whatever the number of processes and devices -- and each
process reads only its own contiguous slice of every global batch. That makes
a 2-host run equal to a 1-host run, and lets a resumed run continue exactly:
it just starts the same sequence at a later step. Random augmentation is
seeded by (seed, position of the example in the whole sequence), so it obeys
the same rule.

Epoch e visits the examples in a permutation drawn from (seed, e); the last
incomplete batch of each epoch is dropped. Evaluation visits every example
exactly once: the last batch is padded and the padding has `mask` False.

Batches come out as numpy dicts with a leading local-batch axis: `image`
float32 (see recipes/data/images/preprocess.py), `label` int32, and `mask` bool for
evaluation. Placing them on devices is the strategy's job. InMemoryDataset
offers the splits of a dataset this way (recipes/data/pipeline/dataset.py).
"""

import dataclasses
import math
from typing import Iterator

import tensorflow as tf

from recipes.data.images.preprocess import Preprocessing
from recipes.data.pipeline.dataset import Batch, process_slice
from recipes.runtime.errors import UserError


def steps_per_epoch(num_examples: int, batch_size: int) -> int:
  """Whole batches in one epoch (the last incomplete one is dropped).

  Args:
    num_examples: examples in the training split.
    batch_size: the global batch.

  Returns:
    The number of training steps per epoch.
  """
  return num_examples // batch_size


def num_eval_steps(num_examples: int, batch_size: int) -> int:
  """Batches in one evaluation pass, the last one padded.

  Args:
    num_examples: examples in the evaluation split.
    batch_size: the global batch.

  Returns:
    The number of evaluation steps.
  """
  return math.ceil(num_examples / batch_size)


def hide_accelerators_from_tensorflow():
  """tf.data runs on the host: TensorFlow must not take GPU/TPU memory."""
  for kind in ('GPU', 'TPU'):
    tf.config.set_visible_devices([], kind)


def as_numpy(ds: tf.data.Dataset) -> Iterator[Batch]:
  """The batches of `ds` as numpy, prefetched, without tf.data autotuning.

  Args:
    ds: a dataset of batches.

  Returns:
    An iterator of numpy dicts.
  """
  # Without tf.data's autotuning thread: deleting an iterator waits for it,
  # which after a stop by SIGTERM of a multi-process run took up to a minute
  # (a scheduler's SIGKILL came first). AUTOTUNE then means a thread per core
  # for `map` and a prefetch buffer that grows while the consumer waits.
  options = tf.data.Options()
  options.autotune.enabled = False
  return ds.with_options(options).prefetch(
      tf.data.AUTOTUNE).as_numpy_iterator()


def epoch_order(n: int, seed, epoch):
  """The order in which epoch `epoch` visits examples 0..n-1: a
  permutation that depends on (seed, epoch) only, so any step's batch can be
  recomputed without history (argsort of stateless uniforms).

  Args:
    n: the examples in the split.
    seed: the run's seed, an int64 scalar (tensor).
    epoch: the epoch, an int64 scalar (tensor).

  Returns:
    int32 [n], the examples' indices in visiting order.
  """
  noise = tf.random.stateless_uniform(
      [n], seed=tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)]))
  return tf.argsort(noise, stable=True)


def train_batches(split: Batch, *, batch_size: int, seed: int,
                  start_step: int, num_steps: int,
                  preprocessing: Preprocessing = Preprocessing()
                  ) -> Iterator[Batch]:
  """This process's slices of the global batches for steps [start, num_steps).

  Args:
    split: `image` uint8 [N, H, W, C] and `label` [N] of the training split.
    batch_size: the global batch; a multiple of the process count.
    seed: the run's seed: each epoch's order and the augmentation.
    start_step: the first step to feed (a resumed run's step).
    num_steps: the step to stop before.
    preprocessing: how images become model inputs.

  Returns:
    An iterator of this process's rows of each global batch: `image`
    float32 and `label` int32.
  """
  n = len(split['label'])
  per_epoch = steps_per_epoch(n, batch_size)
  start, stop = process_slice(batch_size)
  images, labels = tf.constant(split['image']), tf.constant(split['label'])
  seed = tf.constant(seed, tf.int64)

  # The map functions here and in streaming.py are traced as they are, not
  # through autograph: their Python branches test settings, never tensors,
  # and converting them cost seconds each time a pipeline was built.
  @tf.autograph.experimental.do_not_convert
  def epoch_indices(epoch):
    order = epoch_order(n, seed, epoch)[:per_epoch * batch_size]
    order = tf.reshape(order, [per_epoch, batch_size])[:, start:stop]
    return tf.data.Dataset.from_tensor_slices(order)

  @tf.autograph.experimental.do_not_convert
  def batch(step, indices):
    image = tf.gather(images, indices)
    if preprocessing.is_random:
      positions = step * batch_size + tf.range(start, stop, dtype=tf.int64)
      seeds = tf.stack([tf.fill([stop - start], seed), positions], axis=1)
      image = preprocessing.train_batch(image, seeds)
    else:
      image = preprocessing.eval(image)  # Deterministic: the whole batch.
    return {'image': image, 'label': tf.cast(tf.gather(labels, indices),
                                             tf.int32)}

  first_epoch = start_step // per_epoch
  last_epoch = math.ceil(num_steps / per_epoch)
  ds = (tf.data.Dataset.range(first_epoch, last_epoch)
        .flat_map(epoch_indices)
        .skip(start_step - first_epoch * per_epoch)
        .take(num_steps - start_step)
        .enumerate(start_step)
        .map(batch, num_parallel_calls=tf.data.AUTOTUNE))
  return as_numpy(ds)


def eval_batches(split: Batch, *, batch_size: int,
                 preprocessing: Preprocessing = Preprocessing()
                 ) -> Iterator[Batch]:
  """One pass over every example; padding examples have mask False.

  Args:
    split: `image` uint8 [N, H, W, C] and `label` [N] of the split.
    batch_size: the global batch; a multiple of the process count.
    preprocessing: how images become model inputs (its eval part).

  Returns:
    An iterator of this process's rows of each global batch: `image`
    float32, `label` int32 and `mask` bool.
  """
  n = len(split['label'])
  start, stop = process_slice(batch_size)
  images, labels = tf.constant(split['image']), tf.constant(split['label'])

  @tf.autograph.experimental.do_not_convert
  def batch(step):
    positions = step * batch_size + tf.range(start, stop, dtype=tf.int64)
    indices = tf.minimum(positions, n - 1)
    return {'image': preprocessing.eval(tf.gather(images, indices)),
            'label': tf.cast(tf.gather(labels, indices), tf.int32),
            'mask': positions < n}

  ds = tf.data.Dataset.range(num_eval_steps(n, batch_size)).map(
      batch, num_parallel_calls=tf.data.AUTOTUNE)
  return as_numpy(ds)


@dataclasses.dataclass(frozen=True)
class InMemoryDataset:
  """The splits as numpy arrays: `image` uint8 [N, H, W, C], `label` [N];
  `evals` maps each evaluation split string to its arrays, the main one
  first."""

  train: Batch
  evals: dict[str, Batch]
  num_classes: int
  preprocessing: Preprocessing = Preprocessing()
  class_names: tuple[str, ...] = ()  # Label i's name, if the source has them.
  files: dict = dataclasses.field(default_factory=dict)  # Dataset.files.

  def __post_init__(self):
    if not self.evals:
      raise ValueError('InMemoryDataset needs at least one evaluation split.')
    # A label outside the classes gives a NaN loss, which looks like a bad
    # learning rate: say what it is instead.
    splits = [('training', self.train)] + [
        (f'evaluation {name!r}', arrays) for name, arrays in self.evals.items()]
    for split, arrays in splits:
      labels = arrays['label']
      if len(labels) and not 0 <= labels.min() <= labels.max() < (
          self.num_classes):
        raise UserError(
            f'the {split} split has labels from {labels.min()} to '
            f'{labels.max()}, but the dataset has {self.num_classes} classes '
            f'(labels 0 to {self.num_classes - 1}); check its label files or '
            '--config.data_dir.')

  @property
  def eval(self) -> Batch:
    """The first evaluation split."""
    return next(iter(self.evals.values()))

  @property
  def image_shape(self) -> tuple[int, ...]:
    """The model's input: the stored shape, or the preset's resize of it."""
    return self.preprocessing.image_shape(self.train['image'].shape[1:])

  @property
  def num_train(self) -> int:
    """Examples in the training split."""
    return len(self.train['label'])

  @property
  def num_eval(self) -> int:
    """Examples in the first evaluation split."""
    return len(self.eval['label'])

  @property
  def eval_sizes(self) -> dict[str, int]:
    """Examples in each evaluation split, in the order given."""
    return {name: len(arrays['label']) for name, arrays in self.evals.items()}

  def train_batches(self, *, batch_size: int, seed: int, start_step: int,
                    num_steps: int) -> Iterator[Batch]:
    """See `Dataset.train_batches`."""
    return train_batches(self.train, batch_size=batch_size, seed=seed,
                         start_step=start_step, num_steps=num_steps,
                         preprocessing=self.preprocessing)

  def eval_batches(self, *, batch_size: int, split: str | None = None
                   ) -> Iterator[Batch]:
    """See `Dataset.eval_batches`."""
    return eval_batches(self.evals[eval_split(self.evals, split)],
                        batch_size=batch_size,
                        preprocessing=self.preprocessing)


def eval_split(splits, split: str | None) -> str:
  """`split`, or the first of `splits` for None; one of `splits`.

  Args:
    splits: the loaded evaluation splits, in order (a dict's keys will do).
    split: the split asked for; None: the first.

  Returns:
    The split string.

  Raises:
    ValueError: if `split` was not loaded.
  """
  if split is None:
    return next(iter(splits))
  if split not in splits:
    raise ValueError(f'no evaluation split {split!r} was loaded; the '
                     f'dataset has {", ".join(map(repr, splits))}.')
  return split

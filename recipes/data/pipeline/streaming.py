"""Streams TFDS datasets too large for memory (ImageNet-style JPEGs) from
TFRecord files, which can only be read in sequence. (Builds in the
array_record format, and everything else streamed, are read by index in the
in-memory order instead: recipes/data/pipeline/random_access.py;
`python -m recipes.data.prepare` copies a TFRecord build into ArrayRecord.)

Images stay encoded JPEGs for presets that decode them themselves (the
'imagenet' crop decodes only its window); others get decoded images.

What differs from the in-memory pipeline: each process reads its own even
share of the split's files (`tfds.split_for_jax_process`) and shuffles it with
a buffer seeded by the config seed. So the order is reproducible for a given
seed and process count, and a run resumed at step s skips the first s batches
of the same stream (records are skipped before decoding), but the global batch
at step s is not the same for different process counts. Evaluation reads
each process's share once and pads it with masked examples so every process
runs the same number of eval steps.
"""

import dataclasses
from typing import Iterator

import jax
import tensorflow as tf
import tensorflow_datasets as tfds

from recipes.data.images.preprocess import Preprocessing
from recipes.data.pipeline import in_memory
from recipes.data.pipeline.dataset import Batch
from recipes.data.sources import tfds_source

_SHUFFLE_BATCHES = 16  # Shuffle buffer, in local batches.


def _num_examples(builder, split: str) -> int:
  """Examples in `split`, a TFDS split string ('train[:99%]')."""
  if builder.info.splits:
    return tfds_source.num_examples(builder, split)
  # Builders without split metadata (e.g. under tfds.testing.mock_data).
  ds = builder.as_dataset(split=split,
                          decoders={'image': tfds.decode.SkipDecoding()})
  return int(ds.reduce(0, lambda count, _: count + 1))


@dataclasses.dataclass
class StreamingDataset:
  """The splits of a prepared TFDS builder, read from its files; the first
  of `eval_splits` is the main one."""

  builder: tfds.core.DatasetBuilder
  train_split: str
  eval_splits: tuple[str, ...]
  num_classes: int
  preprocessing: Preprocessing
  class_names: tuple[str, ...] = ()
  files: dict = dataclasses.field(default_factory=dict)  # Dataset.files.

  def __post_init__(self):
    self.num_train = _num_examples(self.builder, self.train_split)
    self.eval_sizes = {split: _num_examples(self.builder, split)
                       for split in self.eval_splits}

  @property
  def num_eval(self) -> int:
    """Examples in the first evaluation split."""
    return next(iter(self.eval_sizes.values()))

  @property
  def image_shape(self) -> tuple[int, ...]:
    """The model's input: the stored shape, or the preset's resize of it."""
    return self.preprocessing.image_shape(
        tfds_source.stored_image_shape(self.builder))

  def _read(self, split: str, seed: int | None) -> tf.data.Dataset:
    read_config = tfds.ReadConfig(shuffle_seed=seed)
    jpeg = self.preprocessing.takes_jpeg
    return self.builder.as_dataset(
        split=tfds.split_for_jax_process(split), shuffle_files=seed is not None,
        read_config=read_config,
        decoders={'image': tfds.decode.SkipDecoding()} if jpeg else None)

  def train_batches(self, *, batch_size: int, seed: int, start_step: int,
                    num_steps: int) -> Iterator[Batch]:
    """See `Dataset.train_batches`; the order is reproducible for the same
    seed and process count only."""
    local = batch_size // jax.process_count()
    # Distinct augmentation seeds on every process and example.
    offset = jax.process_index() << 40
    prep = self.preprocessing

    @tf.autograph.experimental.do_not_convert
    def example(index, ex):
      label = tf.cast(ex['label'], tf.int32)
      if not prep.is_random:
        return {'image': prep.eval(ex['image']), 'label': label}
      seed_pair = tf.stack([tf.constant(seed, tf.int64), offset + index])
      return {**prep.augment_example(ex['image'], seed_pair), 'label': label}

    @tf.autograph.experimental.do_not_convert
    def finish(batch):  # The rest of the augmentation, on the whole batch.
      return {'image': prep.finish(batch['pixels'], batch.get('draws')),
              'label': batch['label']}

    ds = (self._read(self.train_split, seed).repeat()
          .shuffle(_SHUFFLE_BATCHES * local, seed=seed)
          .skip(start_step * local)
          .take((num_steps - start_step) * local)
          .enumerate(start_step * local)
          .map(example, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(local, drop_remainder=True))
    if prep.is_random:
      ds = ds.map(finish, num_parallel_calls=tf.data.AUTOTUNE)
    return in_memory.as_numpy(ds)

  def eval_batches(self, *, batch_size: int, split: str | None = None
                   ) -> Iterator[Batch]:
    """See `Dataset.eval_batches`."""
    split = in_memory.eval_split(self.eval_sizes, split)
    local = batch_size // jax.process_count()
    steps = in_memory.num_eval_steps(self.eval_sizes[split], batch_size)

    @tf.autograph.experimental.do_not_convert
    def example(ex):
      return {'image': self.preprocessing.eval(ex['image']),
              'label': tf.cast(ex['label'], tf.int32),
              'mask': tf.constant(True)}

    padding = tf.data.Dataset.from_tensors({
        'image': tf.zeros(self.image_shape, tf.float32),
        'label': tf.constant(0, tf.int32), 'mask': tf.constant(False)})
    ds = (self._read(split, seed=None)
          .map(example, num_parallel_calls=tf.data.AUTOTUNE)
          .concatenate(padding.repeat())
          .take(steps * local)
          .batch(local))
    return in_memory.as_numpy(ds)

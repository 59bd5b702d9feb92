"""Encoded examples to model inputs, a batch at a time, and the one-line
errors that name the image at fault.

One TensorFlow function per dataset decodes and preprocesses a whole batch
(the streamed reader calls it from several threads; TensorFlow releases the
GIL while it runs). Images are decoded, then go through exactly the
preprocessing of an in-memory dataset (recipes/data/images/preprocess.py), with the
same per-example seeds, so both paths give the same batches.
"""

from typing import Callable, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from recipes.data.images import image_codec
from recipes.data.images.preprocess import Preprocessing
from recipes.data.sources.examples import Examples
from recipes.runtime.errors import UserError

_CHUNK = 1024  # Examples read and decoded at once when loading into memory.


def _decoded(preprocessing: Preprocessing, channels: int) -> Callable:
  """encoded bytes -> what the preset takes (bytes for JPEG presets)."""
  if preprocessing.takes_jpeg:
    return lambda encoded: encoded
  return lambda encoded: image_codec.decode(encoded, channels)


def batch_function(preprocessing: Preprocessing, channels: int,
                   stored_shape: tuple[int, ...], train: bool) -> Callable:
  """A compiled function of (encoded [B] strings, seeds [B, 2] int64) to
  model inputs [B, ...] float32: training (per-example random
  augmentation, as `Preprocessing.train_batch`) or evaluation.

  Args:
    preprocessing: the config's preprocessing.
    channels: 1 or 3, the decoded images' channels.
    stored_shape: [H, W, C] of every decoded image when the preset keeps
      the stored size (ignored otherwise).
    train: training (random) or evaluation (seeds ignored).
  """
  decode = _decoded(preprocessing, channels)
  inputs = preprocessing.image_shape(stored_shape)
  signature = (tf.TensorSpec([None], tf.string),
               tf.TensorSpec([None, 2], tf.int64))

  if train and preprocessing.is_random:
    pixels = {'pixels': tf.TensorSpec(
        inputs, tf.float32 if preprocessing.augmentation.resizes
        else tf.uint8)}
    if preprocessing.randaugment_layers:
      pixels['draws'] = tf.TensorSpec([preprocessing.randaugment_layers, 4],
                                      tf.float32)

    def augment(encoded, seeds):
      out = tf.map_fn(
          lambda x: preprocessing.augment_example(decode(x[0]), x[1]),
          (encoded, seeds), fn_output_signature=pixels)
      return preprocessing.finish(out['pixels'], out.get('draws'))
    return _as_in_tf_data(augment, signature)

  def evaluate(encoded, seeds):
    del seeds
    if not preprocessing.keeps_size:
      return tf.map_fn(lambda x: preprocessing.eval(decode(x)), encoded,
                       fn_output_signature=tf.TensorSpec(inputs, tf.float32))
    # The stored size: decode, then the preset on the whole batch, as an
    # in-memory dataset does.
    images = tf.map_fn(decode, encoded,
                       fn_output_signature=tf.TensorSpec(stored_shape,
                                                         tf.uint8))
    return preprocessing.eval(images)
  return _as_in_tf_data(evaluate, signature)


def _as_in_tf_data(function: Callable, signature) -> Callable:
  """`function` run inside a tf.data pipeline, as the in-memory pipeline
  runs the same ops: tf.data's graph rewrites differ from tf.function's
  (x / 255 may become x * (1 / 255)), and the two paths must agree bitwise.
  Traced once: a new pipeline per batch cost 30-60 ms of Python."""
  # One thread per op, as tf.data runs a map: the batches of Grain's threads
  # run side by side, and splitting each op over the cores as well cost a
  # third more time per image (the imagenet crop: 1.7 -> 1.2 ms).
  options = tf.data.Options()
  options.threading.max_intra_op_parallelism = 1

  # Without autograph, as the pipelines' map functions (in_memory.py).
  @tf.function(input_signature=signature, autograph=False)
  def in_tf_data(encoded, seeds):
    return tf.data.Dataset.from_tensors((encoded, seeds)).with_options(
        options).map(function).get_single_element()
  return in_tf_data


def run(function: Callable, examples: Examples, indices: Sequence[int],
        encoded: list[bytes], seeds: np.ndarray, *, channels: int,
        stored_shape: tuple[int, ...] | None) -> np.ndarray:
  """`function(encoded, seeds)` as numpy; a damaged image or one of another
  size becomes a UserError naming it."""
  try:
    # np.asarray shares the tensor's memory (as tf.data's numpy iterator
    # does); .numpy() would copy it: 60 ms for a batch of 128 375x500 images.
    return np.asarray(function(tf.constant(encoded, tf.string),
                               tf.constant(seeds, tf.int64)))
  except tf.errors.InvalidArgumentError:
    for index, data in zip(indices, encoded):
      check(examples, index, data, channels, stored_shape)
    raise


def check(examples: Examples, index: int, encoded: bytes, channels: int,
          stored_shape: tuple[int, ...] | None):
  """UserError if example `index` does not decode, or (when
  `stored_shape` is given) decodes to another shape."""
  try:
    shape = tuple(image_codec.decode(encoded, channels).shape)
  except tf.errors.InvalidArgumentError as e:
    raise UserError(
        f'image {examples.describe(index)} is damaged or not a JPEG or PNG '
        f'({_first_line(e.message)}); replace or remove it, or set '
        '--config.skip_bad_images=true to leave such images out.') from None
  if stored_shape is not None and shape != tuple(stored_shape):
    raise UserError(
        f'image {examples.describe(index)} is {_size(shape)}, but the first '
        f'training image is {_size(stored_shape)}; images of mixed sizes '
        'need a preset that resizes: --config.augment=finetune (or '
        f'imagenet for JPEGs) with --config.image_size={min(shape[:2])}.')


def _size(shape) -> str:
  return f'{shape[1]}x{shape[0]} pixels'


def _first_line(message: str) -> str:
  return message.strip().splitlines()[0][:200] if message.strip() else '?'


def _chunks(examples: Examples):
  """(indices, encoded images, labels) of every example, _CHUNK at a
  time."""
  for start in range(0, len(examples), _CHUNK):
    indices = range(start, min(start + _CHUNK, len(examples)))
    yield (indices, *examples.read(indices))


def decode_all(examples: Examples, channels: int) -> dict[str, np.ndarray]:
  """Every example decoded, for an in-memory dataset: `image` uint8 [N, H,
  W, channels] and `label` int64 [N].

  Raises:
    UserError: a damaged image, or images of different sizes (naming one).
  """
  images, labels, shape = [], [], None
  decode = tf.autograph.experimental.do_not_convert(  # As in in_memory.py.
      lambda e: image_codec.decode(e, channels))
  for indices, encoded, chunk_labels in _chunks(examples):
    ds = tf.data.Dataset.from_tensor_slices(tf.constant(encoded, tf.string))
    try:  # One batch: iterating image by image cost more than decoding.
      decoded = list(ds.map(decode,
                            num_parallel_calls=tf.data.AUTOTUNE,
                            deterministic=True).batch(len(encoded))
                     .get_single_element().numpy())
    except tf.errors.InvalidArgumentError:  # Damaged, or of mixed sizes.
      decoded = None
    if decoded is None or any(d.shape != (shape or decoded[0].shape)
                              for d in decoded):
      first = shape or image_codec.decode(encoded[0], channels).shape
      for index, data in zip(indices, encoded):
        check(examples, index, data, channels, tuple(first))
      if decoded is None:  # Each decodes alone: decode them one by one.
        decoded = [image_codec.decode(e, channels).numpy() for e in encoded]
    shape = shape or decoded[0].shape
    images += decoded
    labels.append(chunk_labels)
  return {'image': np.stack(images),
          'label': np.concatenate(labels).astype(np.int64)}


class Subset:
  """Some of the examples of `examples`, by index (the images that decode,
  with skip_bad_images)."""

  def __init__(self, examples: Examples, kept: Sequence[int]):
    self.examples, self.kept = examples, np.asarray(kept, np.int64)

  def __len__(self) -> int:
    return len(self.kept)

  def read(self, indices):
    return self.examples.read([int(self.kept[i]) for i in indices])

  def describe(self, index: int) -> str:
    return self.examples.describe(int(self.kept[index]))


def without_bad_images(examples: Examples, channels: int, split: str
                       ) -> Examples:
  """`examples` less those that do not decode, which are counted in the
  log (with skip_bad_images)."""
  kept, bad = [], []
  for indices, encoded, _ in _chunks(examples):
    for index, data in zip(indices, encoded):
      try:
        image_codec.decode(data, channels)
        kept.append(index)
      except tf.errors.InvalidArgumentError:
        bad.append(index)
  if bad:
    logging.warning('Skipped %d damaged images of split %r (e.g. %s), as '
                    'skip_bad_images asks.', len(bad), split,
                    examples.describe(bad[0]))
  return Subset(examples, kept) if bad else examples

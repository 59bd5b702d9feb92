"""Per-example image preprocessing for tf.data: presets found by name.

Augmentations (`config.augment`), in AUGMENTATIONS:
- 'none': images scaled to [0, 1].
- 'cifar': training images padded by 4 pixels, randomly cropped back and
  randomly flipped left-right (the standard CIFAR augmentation).
- 'imagenet': encoded JPEGs, so streamed datasets only; training takes an
  Inception-style random-resized crop (area 8%-100%, aspect 3/4-4/3) decoded
  straight from the JPEG, resized to `image_size`, randomly flipped;
  evaluation resizes and takes the central crop (image_size / (image_size +
  32) of the shorter side).
Normalizations (`config.normalize`), in MEAN_STD: a per-channel mean to
subtract and std to divide by, after the augmentation.

Where the images come from is the dataset's business (recipes/data/
datasets.py); a preset only says whether it takes decoded or JPEG images.
Every random choice uses stateless ops seeded per example, so augmentation is
a pure function of (seed, example position) like the data order itself.
"""

import dataclasses
from typing import Callable

import tensorflow as tf

from recipes.errors import UserError

MEAN_STD = {
    'cifar10': ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    'imagenet': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
_EVAL_CROP_PADDING = 32


def scale(image, image_size=None):
  """uint8 to [0, 1], for one image or a batch; keeps the size."""
  del image_size
  return tf.cast(image, tf.float32) / 255.0


def normalize(image, name: str):
  if not name:
    return image
  mean, std = MEAN_STD[name]
  return (image - tf.constant(mean)) / tf.constant(std)


def cifar_train(image, seed, image_size=None):
  """Pad 4, random crop to the original size, random horizontal flip."""
  del image_size
  shape = tf.shape(image)
  padded = tf.pad(image, [[4, 4], [4, 4], [0, 0]])
  seeds = tf.random.experimental.stateless_split(seed, 2)
  image = tf.image.stateless_random_crop(padded, shape, seed=seeds[0])
  return scale(tf.image.stateless_random_flip_left_right(image, seeds[1]))


def imagenet_train(jpeg, seed, image_size: int):
  """Random-resized crop decoded from the JPEG, resize, random flip."""
  seeds = tf.random.experimental.stateless_split(seed, 2)
  begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
      tf.io.extract_jpeg_shape(jpeg),
      bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
      seed=seeds[0], min_object_covered=0.1,
      aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0),
      max_attempts=10, use_image_if_no_bounding_boxes=True)
  window = tf.stack([begin[0], begin[1], size[0], size[1]])
  image = tf.io.decode_and_crop_jpeg(jpeg, window, channels=3)
  image = tf.image.resize(image, [image_size, image_size], 'bicubic')
  image = tf.clip_by_value(image, 0, 255) / 255.0
  return tf.image.stateless_random_flip_left_right(image, seeds[1])


def imagenet_eval(jpeg, image_size: int):
  """Central crop of the JPEG, resized to image_size x image_size."""
  shape = tf.io.extract_jpeg_shape(jpeg)
  side = tf.cast(tf.cast(tf.minimum(shape[0], shape[1]), tf.float32)
                 * image_size / (image_size + _EVAL_CROP_PADDING), tf.int32)
  window = tf.stack([(shape[0] - side + 1) // 2, (shape[1] - side + 1) // 2,
                     side, side])
  image = tf.io.decode_and_crop_jpeg(jpeg, window, channels=3)
  image = tf.image.resize(image, [image_size, image_size], 'bicubic')
  return tf.clip_by_value(image, 0, 255) / 255.0


@dataclasses.dataclass(frozen=True)
class Augmentation:
  """One preset: how stored images become float32 model inputs."""

  # (image, seed, image_size) -> image; None: training images get `eval`,
  # which is deterministic and so can run on whole batches.
  train: Callable | None
  # (image, image_size) -> image; also on a batch unless takes_jpeg.
  eval: Callable
  # Takes encoded JPEG bytes, which only streamed datasets keep, and
  # returns image_size x image_size crops; others keep the stored size.
  takes_jpeg: bool = False


AUGMENTATIONS = {
    'none': Augmentation(train=None, eval=scale),
    'cifar': Augmentation(train=cifar_train, eval=scale),
    'imagenet': Augmentation(train=imagenet_train, eval=imagenet_eval,
                             takes_jpeg=True),
}


def check(augment: str, normalize: str):
  if augment not in AUGMENTATIONS:
    raise UserError(f'unknown augment {augment!r}; choose one of '
                    f'{", ".join(AUGMENTATIONS)}.')
  if normalize and normalize not in MEAN_STD:
    raise UserError(f'unknown normalize {normalize!r}; choose one of '
                    f'{", ".join(MEAN_STD)} or "" for none.')


@dataclasses.dataclass(frozen=True)
class Preprocessing:
  """The config's preprocessing, applied per example or per batch."""

  augment: str = 'none'
  normalize: str = ''
  image_size: int = 0  # Output side for presets that take JPEGs.

  def __post_init__(self):
    check(self.augment, self.normalize)

  @property
  def augmentation(self) -> Augmentation:
    return AUGMENTATIONS[self.augment]

  @property
  def is_random(self) -> bool:
    return self.augmentation.train is not None

  @property
  def takes_jpeg(self) -> bool:
    return self.augmentation.takes_jpeg

  def image_shape(self, stored: tuple[int | None, ...]
                  ) -> tuple[int | None, ...]:
    """The shape of the model inputs made from images of shape `stored`
    (None: a dimension that varies)."""
    if self.takes_jpeg:
      return (self.image_size, self.image_size, 3)
    return tuple(stored)

  def train(self, image, seed):
    """One training example; `seed` is a [2] int tensor."""
    if not self.is_random:
      return self.eval(image)
    image = self.augmentation.train(image, seed, self.image_size)
    return normalize(image, self.normalize)

  def eval(self, image):
    """One evaluation example, or a batch unless the preset takes JPEGs."""
    return normalize(self.augmentation.eval(image, self.image_size),
                     self.normalize)

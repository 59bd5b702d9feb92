"""Per-example image preprocessing for tf.data: presets found by name.

Augmentations (`config.augment`), in AUGMENTATIONS:
- 'none': images scaled to [0, 1].
- 'cifar': training images padded by 4 pixels, randomly cropped back and
  randomly flipped left-right (the standard CIFAR augmentation).
- 'imagenet': encoded JPEGs, so streamed datasets only; training takes an
  Inception-style random-resized crop decoded straight from the JPEG
  (`crop_window`: by default the Flax ImageNet example's, 10%-100% of the
  area, aspect 3/4-4/3), resized bicubically to `image_size`, randomly
  flipped; evaluation resizes and takes the central crop (image_size /
  (image_size + 32) of the shorter side).
- 'finetune': decoded images of any size (CIFAR's 32x32 in memory, or a
  streamed dataset's) at a pre-trained model's resolution, as
  google-research/vision_transformer fine-tunes (vit_jax/input_pipeline.py
  at c6de1e53, lines 197-213): training takes a random crop of 5%-100% of
  the area (aspect 0.75-1.33, TF's default), resized bilinearly to
  `image_size`, randomly flipped; evaluation resizes the whole image to
  `image_size` x `image_size`.
The random crops of both take `crop_area_min` (`config.crop_area_min`): the
smallest crop as a fraction of the image's area, from there to 100% as
big_vision's inception_crop and vision_transformer draw it; 0, the preset's
own.
RandAugment (`config.randaugment_layers`, `config.randaugment_magnitude`;
recipes/data/images/randaugment.py) follows the augmentation on training images, on
pixel values before scaling; with layers > 0 training is random even for
'none'.
Normalizations (`config.normalize`), in MEAN_STD: a per-channel mean to
subtract and std to divide by, after scaling to [0, 1]; one value serves
every channel ('minus_one_to_one': [-1, 1], big_vision's value_range(-1, 1)),
otherwise the image needs as many channels as there are values.
Channels (`config.image_channels`): scaled images become grey (1) or RGB (3)
before normalization, grey ones by repeating the channel (what pretrained
weights of RGB images take), RGB ones by their luma; 0 keeps them as stored.

Where the images come from is the dataset's business (recipes/data/
datasets.py); a preset only says whether it takes decoded or JPEG images.
Every random choice uses stateless ops seeded per example, so augmentation is
a pure function of (seed, example position) like the data order itself.
"""

import dataclasses
from typing import Callable

import tensorflow as tf

from recipes.data.images import randaugment
from recipes.runtime.errors import UserError

MEAN_STD = {
    'cifar10': ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    'imagenet': ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    'minus_one_to_one': ((0.5,), (0.5,)),  # 2x - 1, for any channel count.
}
_EVAL_CROP_PADDING = 32


def scale(image, image_size=None):
  """Pixel values (uint8, or float in [0, 255]) to [0, 1], for one image or a
  batch; keeps the size.

  Args:
    image: an image [H, W, C] or a batch [N, H, W, C].
    image_size: ignored (the presets' common signature).

  Returns:
    The image(s) as float32 in [0, 1].
  """
  del image_size
  return tf.cast(image, tf.float32) / 255.0


def check_channels(name: str, channels: int | None):
  """UserError unless normalization `name` fits images of `channels`.

  Args:
    name: a key of MEAN_STD, or '' for none.
    channels: the images' channel count; None: unknown, not checked.

  Raises:
    UserError: if the statistics are for another number of channels.
  """
  if not name or channels is None:
    return
  mean, _ = MEAN_STD[name]
  if len(mean) != 1 and len(mean) != channels:
    fits = ', '.join(repr(n) for n, (m, _) in MEAN_STD.items()
                     if len(m) in (1, channels))
    raise UserError(
        f'normalize={name!r} has statistics for {len(mean)} channels but '
        f'the images have {channels}; use {fits or "none"} or "" instead.')


def normalize(image, name: str):
  """(image - mean) / std with the statistics of `name`.

  Args:
    image: an image or batch in [0, 1], channels last.
    name: a key of MEAN_STD, or '' for none (the image as it is).

  Returns:
    The normalized image(s).

  Raises:
    UserError: if the statistics do not fit the channel count.
  """
  if not name:
    return image
  check_channels(name, image.shape[-1])
  mean, std = MEAN_STD[name]
  return (image - tf.constant(mean)) / tf.constant(std)


def cifar_crop_flip(image, seed, image_size=None, crop_area_min=None):
  """Pad 4, random crop to the original size, random horizontal flip; keeps
  the pixel values and dtype.

  Args:
    image: one image [H, W, C].
    seed: a [2] integer tensor, the example's own.
    image_size: ignored (the presets' common signature).
    crop_area_min: ignored, likewise.

  Returns:
    The augmented image, [H, W, C].
  """
  del image_size, crop_area_min
  shape = tf.shape(image)
  padded = tf.pad(image, [[4, 4], [4, 4], [0, 0]])
  seeds = tf.random.experimental.stateless_split(seed, 2)
  cropped = tf.image.stateless_random_crop(padded, shape, seed=seeds[0])
  cropped = tf.ensure_shape(cropped, image.shape)  # Static, for RandAugment.
  return tf.image.stateless_random_flip_left_right(cropped, seeds[1])


def cifar_train(image, seed, image_size=None):
  """The CIFAR augmentation, scaled to [0, 1].

  Args:
    image: one image [H, W, C].
    seed: a [2] integer tensor, the example's own.
    image_size: ignored (the presets' common signature).

  Returns:
    The augmented image as float32 in [0, 1].
  """
  return scale(cifar_crop_flip(image, seed, image_size))


def _encoded_shape(encoded):
  """[H, W, C] of a JPEG from its header, or of any other image decoded."""
  return tf.cond(tf.io.is_jpeg(encoded),
                 lambda: tf.io.extract_jpeg_shape(encoded),
                 lambda: tf.shape(_decode_rgb(encoded)))


def _decode_rgb(encoded):
  image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
  image.set_shape([None, None, 3])
  return image


def _decode_window(encoded, window):
  """The window [y, x, height, width] of the image, as RGB: a JPEG decodes
  only the window; other images (PNG) decode whole."""
  return tf.cond(
      tf.io.is_jpeg(encoded),
      lambda: tf.io.decode_and_crop_jpeg(encoded, window, channels=3),
      lambda: _decode_rgb(encoded)[window[0]:window[0] + window[2],
                                   window[1]:window[1] + window[3]])


# The finetune preset's smallest crop, a fraction of the image's area.
FINETUNE_CROP_AREA_MIN = 0.05


def crop_window(shape, seed, area_min: float = 0.0):
  """A random crop's window of an image of `shape`, as
  tf.image.stateless_sample_distorted_bounding_box gives it.

  Args:
    shape: the image's [H, W, C], an int32 tensor.
    seed: a [2] integer tensor.
    area_min: the smallest crop as a fraction of the image's area, drawn
      from there to 100% with TF's defaults otherwise (aspect 0.75-1.33,
      100 attempts), as big_vision's inception_crop and vision_transformer
      call it; 0: the Flax ImageNet example's crop, 8%-100% of the area
      covering at least 10% of the image (so 10%-100%), aspect 3/4-4/3, 10
      attempts.

  Returns:
    (begin, size): [y, x, 0] and [height, width, -1], int32.
  """
  if area_min:
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape, bounding_boxes=tf.zeros([0, 0, 4], tf.float32), seed=seed,
        min_object_covered=0, area_range=(area_min, 1.0),
        use_image_if_no_bounding_boxes=True)
  else:
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape, bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0],
                                          shape=[1, 1, 4]),
        seed=seed, min_object_covered=0.1,
        aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0),
        max_attempts=10, use_image_if_no_bounding_boxes=True)
  return begin, size


def imagenet_crop_flip(jpeg, seed, image_size: int,
                       crop_area_min: float = 0.0):
  """Random-resized crop decoded from the JPEG (or PNG), resize, random
  flip; float32 pixel values in [0, 255].

  Args:
    jpeg: the encoded JPEG (or PNG) bytes (a scalar string tensor).
    seed: a [2] integer tensor, the example's own.
    image_size: the output side, in pixels.
    crop_area_min: the crop's smallest area (see `crop_window`); 0: the
      Flax ImageNet example's crop.

  Returns:
    The image [image_size, image_size, 3].
  """
  seeds = tf.random.experimental.stateless_split(seed, 2)
  begin, size = crop_window(_encoded_shape(jpeg), seeds[0], crop_area_min)
  window = tf.stack([begin[0], begin[1], size[0], size[1]])
  image = _decode_window(jpeg, window)
  image = tf.image.resize(image, [image_size, image_size], 'bicubic')
  image = tf.clip_by_value(image, 0, 255)
  return tf.image.stateless_random_flip_left_right(image, seeds[1])


def imagenet_eval(jpeg, image_size: int):
  """Central crop of the JPEG (or PNG), resized to image_size x image_size.

  Args:
    jpeg: the encoded JPEG (or PNG) bytes (a scalar string tensor).
    image_size: the output side, in pixels.

  Returns:
    The image [image_size, image_size, 3] as float32 in [0, 1].
  """
  shape = _encoded_shape(jpeg)
  side = tf.cast(tf.cast(tf.minimum(shape[0], shape[1]), tf.float32)
                 * image_size / (image_size + _EVAL_CROP_PADDING), tf.int32)
  window = tf.stack([(shape[0] - side + 1) // 2, (shape[1] - side + 1) // 2,
                     side, side])
  image = _decode_window(jpeg, window)
  image = tf.image.resize(image, [image_size, image_size], 'bicubic')
  return tf.clip_by_value(image, 0, 255) / 255.0


def finetune_crop_flip(image, seed, image_size: int,
                       crop_area_min: float = 0.0):
  """vision_transformer's fine-tuning crop (tf.image.sample_distorted_
  bounding_box over 5-100% of the area, no box to cover), resized bilinearly
  to image_size x image_size, random flip; float32 pixel values in [0, 255].

  Args:
    image: one decoded image [H, W, C], of any size.
    seed: a [2] integer tensor, the example's own.
    image_size: the output side, in pixels.
    crop_area_min: the crop's smallest area, a fraction of the image's; 0:
      FINETUNE_CROP_AREA_MIN.

  Returns:
    The image [image_size, image_size, C].
  """
  seeds = tf.random.experimental.stateless_split(seed, 2)
  begin, size = crop_window(tf.shape(image), seeds[0],
                            crop_area_min or FINETUNE_CROP_AREA_MIN)
  crop = tf.slice(image, begin, size)
  crop.set_shape([None, None, image.shape[-1]])  # tf.slice loses it.
  # Bilinear weights are convex: the values stay in [0, 255].
  crop = tf.image.resize(crop, [image_size, image_size])
  return tf.image.stateless_random_flip_left_right(crop, seeds[1])


def finetune_eval(image, image_size: int):
  """The whole image (or batch) resized bilinearly to image_size x
  image_size, in [0, 1].

  Args:
    image: an image [H, W, C] or a batch [N, H, W, C].
    image_size: the output side, in pixels.

  Returns:
    The resized image(s) as float32.
  """
  return tf.image.resize(scale(image), [image_size, image_size])


@dataclasses.dataclass(frozen=True)
class Augmentation:
  """One preset: how stored images become float32 model inputs."""

  # (image, seed, image_size, crop_area_min) -> pixel values in [0, 255]
  # (the stored dtype, or float32 after a resize); None: the stored image,
  # and training images get `eval` (on whole batches) unless RandAugment
  # makes them random.
  train: Callable | None
  # (image, image_size) -> image in [0, 1]; also on a batch unless
  # takes_jpeg.
  eval: Callable
  # Takes encoded JPEG bytes, which only streamed datasets keep (and makes
  # 3-channel images of them).
  takes_jpeg: bool = False
  # Both functions return image_size x image_size images, as float32; others
  # keep the stored size.
  resizes: bool = False


AUGMENTATIONS = {
    'none': Augmentation(train=None, eval=scale),
    'cifar': Augmentation(train=cifar_crop_flip, eval=scale),
    'imagenet': Augmentation(train=imagenet_crop_flip, eval=imagenet_eval,
                             takes_jpeg=True, resizes=True),
    'finetune': Augmentation(train=finetune_crop_flip, eval=finetune_eval,
                             resizes=True),
}


def check(augment: str, normalize: str, randaugment_layers: int = 0,
          randaugment_magnitude: float = randaugment.MAX_LEVEL,
          crop_area_min: float = 0.0):
  """Checks the config's preprocessing fields.

  Args:
    augment: a key of AUGMENTATIONS.
    normalize: a key of MEAN_STD, or '' for none.
    randaugment_layers: RandAugment's operations per image; 0: none.
    randaugment_magnitude: RandAugment's strength, 0 to MAX_LEVEL (10).
    crop_area_min: the random crop's smallest area, a fraction of the
      image's; 0: the preset's own. Presets without one ignore it.

  Raises:
    UserError: for an unknown name or a value out of range.
  """
  if augment not in AUGMENTATIONS:
    raise UserError(f'unknown augment {augment!r}; choose one of '
                    f'{", ".join(AUGMENTATIONS)}.')
  if normalize and normalize not in MEAN_STD:
    raise UserError(f'unknown normalize {normalize!r}; choose one of '
                    f'{", ".join(MEAN_STD)} or "" for none.')
  if (isinstance(randaugment_layers, bool)
      or not isinstance(randaugment_layers, int) or randaugment_layers < 0):
    raise UserError(f'randaugment_layers={randaugment_layers!r} must be a '
                    'whole number >= 0 (0 = no RandAugment).')
  if (isinstance(randaugment_magnitude, bool)
      or not isinstance(randaugment_magnitude, (int, float))
      or not 0 <= randaugment_magnitude <= randaugment.MAX_LEVEL):
    raise UserError(f'randaugment_magnitude={randaugment_magnitude!r} must '
                    f'be a number from 0 to {randaugment.MAX_LEVEL}.')
  if (isinstance(crop_area_min, bool)
      or not isinstance(crop_area_min, (int, float))
      or not 0 <= crop_area_min <= 1):
    raise UserError(f'crop_area_min={crop_area_min!r} must be a number from '
                    "0 to 1 (0 = the preset's own).")


def _to_uint8(image):
  if image.dtype == tf.uint8:
    return image
  return tf.cast(tf.round(tf.clip_by_value(image, 0, 255)), tf.uint8)


@dataclasses.dataclass(frozen=True)
class Preprocessing:
  """The config's preprocessing, applied per example or per batch."""

  augment: str = 'none'
  normalize: str = ''
  image_size: int = 0  # Output side for presets that resize.
  randaugment_layers: int = 0  # 0: no RandAugment.
  randaugment_magnitude: int = randaugment.MAX_LEVEL  # 0-10.
  # The random crop's smallest area, a fraction of the image's; 0: the
  # preset's own.
  crop_area_min: float = 0.0
  channels: int = 0  # The model's input channels, 1 or 3; 0: as stored.

  def __post_init__(self):
    check(self.augment, self.normalize, self.randaugment_layers,
          self.randaugment_magnitude, self.crop_area_min)

  @property
  def augmentation(self) -> Augmentation:
    """The preset named by `augment`."""
    return AUGMENTATIONS[self.augment]

  @property
  def is_random(self) -> bool:
    """Whether training images are augmented at random."""
    return self.augmentation.train is not None or self.randaugment_layers > 0

  @property
  def keeps_size(self) -> bool:
    """Whether model inputs keep the stored images' size (which must then
    be one size)."""
    return not (self.augmentation.resizes or self.takes_jpeg)

  @property
  def takes_jpeg(self) -> bool:
    """Whether the preset takes encoded JPEGs (streamed datasets only)."""
    return self.augmentation.takes_jpeg

  def image_shape(self, stored: tuple[int | None, ...]
                  ) -> tuple[int | None, ...]:
    """The shape of the model inputs made from images of shape `stored`
    (None: a dimension that varies).

    Args:
      stored: the shape of one stored image, [H, W, C].

    Returns:
      The model's input shape: `stored`, or the preset's resize of it.
    """
    shape = self._augmented_shape(stored)
    return (*shape[:-1], self.channels or shape[-1])

  def _augmented_shape(self, stored):
    """The shape of an augmented image: `stored`, or the preset's resize."""
    if not self.augmentation.resizes:
      return tuple(stored)
    channels = 3 if self.takes_jpeg else stored[-1]
    return (self.image_size, self.image_size, channels)

  def check_channels(self, stored: tuple[int | None, ...]):
    """UserError unless the normalization fits images stored as `stored`.

    Args:
      stored: the shape of one stored image, [H, W, C].

    Raises:
      UserError: if the statistics are for another number of channels.
    """
    check_channels(self.normalize, self.image_shape(stored)[-1])

  def augment_example(self, image, seed) -> dict:
    """The per-example random part of training (when is_random): `pixels`
    in [0, 255] and, with RandAugment, its `draws`; `finish` does the rest
    on whole batches.

    Args:
      image: one stored image [H, W, C], or its JPEG bytes if takes_jpeg.
      seed: a [2] integer tensor, the example's own.

    Returns:
      {'pixels': ...} and, with RandAugment, 'draws' [layers, 4].
    """
    if self.augmentation.train is not None:
      image = self.augmentation.train(image, seed, self.image_size,
                                      self.crop_area_min)
    out = {'pixels': image}
    if self.randaugment_layers:
      # Its own seed, so the crops stay those without RandAugment.
      out['draws'] = randaugment.draws(
          tf.random.experimental.stateless_fold_in(seed, 1),
          self.randaugment_layers)
    return out

  def finish(self, pixels, draws=None):
    """Batched `augment_example` outputs to model inputs: RandAugment,
    scaling, normalization.

    Args:
      pixels: the batch's `pixels` [N, H, W, C], in [0, 255].
      draws: the batch's `draws` [N, layers, 4]; None: no RandAugment.

    Returns:
      The model inputs, float32.
    """
    if draws is not None:
      pixels = randaugment.randaugment_batch(
          _to_uint8(pixels), draws, self.randaugment_magnitude)
    return self._normalize(scale(pixels))

  def _normalize(self, image):
    """Images in [0, 1] to model inputs: `channels`, then normalization."""
    if self.channels and image.shape[-1] != self.channels:
      image = (tf.image.grayscale_to_rgb(image) if self.channels == 3
               else tf.image.rgb_to_grayscale(image))
    return normalize(image, self.normalize)

  def train(self, image, seed):
    """One training example; `seed` is a [2] int tensor.

    Args:
      image: one stored image [H, W, C], or its JPEG bytes if takes_jpeg.
      seed: the example's own seed.

    Returns:
      The model input, float32.
    """
    if not self.is_random:
      return self.eval(image)
    augmented = self.augment_example(image, seed)
    return self.finish(**{k: v[None] for k, v in augmented.items()})[0]

  def train_batch(self, images, seeds):
    """Training examples [B, ...] with their seeds [B, 2]; each one as
    `train` makes it, but RandAugment runs on the whole batch.

    Args:
      images: stored images [B, H, W, C].
      seeds: each example's own seed, [B, 2] integers.

    Returns:
      The model inputs [B, ...], float32.
    """
    if not self.is_random:
      return self.eval(images)
    signature = {'pixels': tf.TensorSpec(
        self._augmented_shape(tuple(images.shape[1:])),
        tf.float32 if self.augmentation.resizes else images.dtype)}
    if self.randaugment_layers:
      signature['draws'] = tf.TensorSpec([self.randaugment_layers, 4],
                                         tf.float32)
    augmented = tf.map_fn(lambda x: self.augment_example(*x), (images, seeds),
                          fn_output_signature=signature)
    return self.finish(**augmented)

  def eval(self, image):
    """One evaluation example, or a batch unless the preset takes JPEGs.

    Args:
      image: a stored image [H, W, C] or batch, or JPEG bytes if
        takes_jpeg.

    Returns:
      The model input(s), float32.
    """
    return self._normalize(self.augmentation.eval(image, self.image_size))

"""RandAugment (Cubuk et al. 2019, arXiv:1909.13719) on uint8 images.

Follows big_vision's `randaug(num_layers, magnitude)`, which calls
`distort_image_with_randaugment` in big_vision/pp/autoaugment.py (a fork of
tensorflow/tpu's EfficientNet autoaugment.py, checked at big_vision commit
0127fb6): each of `num_layers` layers picks one of the 16 operations in OPS
uniformly -- Cutout included, as there -- and applies it at the shared
`magnitude` on the 0-10 scale; Rotate, ShearX/Y and TranslateX/Y are negated
with probability 1/2. Magnitude m gives: Rotate m/10 * 30 degrees; ShearX/Y
m/10 * 0.3; TranslateX/Y m/10 * 100 pixels; Cutout a square of side 2 *
int(m/10 * 40); Posterize int(m/10 * 4) bits kept; Solarize threshold
int(m/10 * 256); SolarizeAdd int(m/10 * 110) added below 128; Color,
Contrast, Brightness, Sharpness the PIL enhance factor m/10 * 1.8 + 0.1.
Empty pixels (rotation, shear, translation, cutout) become grey 128.

Written here from those definitions (PIL's ImageOps/ImageEnhance), not
copied, with these differences:
- Every random choice is a stateless function of the [2] seed, so the result
  is a pure function of (seed, image), as the data-order rule needs.
- The pixel constants (translate 100, cutout 40) are the reference's for
  224-pixel images; here they scale with each side (x side / 224), so a
  224x224 image gets the reference's values and a 32x32 CIFAR image is not
  shifted or cut out entirely.
- Contrast blends with the mean grey level, PIL's definition; the reference
  divides the pixel count by 256 instead (a known slip).
- Solarize inverts pixels >= threshold, so threshold 256 (magnitude 10)
  changes nothing, as in PIL; the reference compares uint8 pixels with 256,
  which TensorFlow (2.21) wraps to 0, and so inverts every pixel.
- One-channel (grey) images work: Color is then the identity; the others act
  per channel. The channel count must be known statically.

The operations run on whole batches: `draws` takes each example's random
numbers from its own seed, and `randaugment_batch` applies each operation
once to the examples that drew it, so the cost per example stays small and
each example's result depends only on its image and draws.
"""

import math

import tensorflow as tf

MAX_LEVEL = 10  # The magnitude scale, as in the reference.
FILL = 128  # Grey for empty pixels.
_REFERENCE_SIDE = 224  # The image side the reference's pixel constants fit.
_TRANSLATE = 100  # Pixels at magnitude 10 on a 224-pixel side.
_CUTOUT = 40  # Half the cutout side at magnitude 10 on a 224-pixel side.
_GREY_WEIGHTS = (0.299, 0.587, 0.114)  # PIL's RGB -> L.

# Every operation takes uint8 images [N, H, W, C] and returns the same; a
# per-example argument is a scalar or a vector [N].


def _channels(images) -> int:
  channels = images.shape[-1]
  if channels is None:
    raise ValueError('RandAugment needs images with a known channel count.')
  return channels


def _to_uint8(pixels):
  """Float pixels to uint8, clipped and truncated (as PIL and the reference)."""
  return tf.cast(tf.clip_by_value(pixels, 0.0, 255.0), tf.uint8)


def grey(images):
  """The grey level of each pixel as float32 [N, H, W, 1].

  Args:
    images: uint8 [N, H, W, C].

  Returns:
    float32 [N, H, W, 1] (PIL's L for RGB).
  """
  pixels = tf.cast(images, tf.float32)
  if _channels(images) == 1:
    return pixels
  return tf.reduce_sum(pixels * tf.constant(_GREY_WEIGHTS), -1, keepdims=True)


def blend(degenerate, images, factor):
  """degenerate + factor * (images - degenerate), clipped to uint8: PIL's
  ImageEnhance (factor 0 gives `degenerate`, 1 the image, > 1 extrapolates).

  Args:
    degenerate: the image(s) to blend with, broadcastable to `images`.
    images: uint8 [N, H, W, C].
    factor: a scalar or [N, 1, 1, 1].

  Returns:
    The images, uint8 [N, H, W, C].
  """
  degenerate = tf.cast(degenerate, tf.float32)
  return _to_uint8(degenerate + factor * (tf.cast(images, tf.float32)
                                          - degenerate))


# Pixel-value operations.

def invert(images):
  """255 - each pixel.

  Args:
    images: uint8 [N, H, W, C].

  Returns:
    The images, uint8 [N, H, W, C].
  """
  return 255 - images


def solarize(images, threshold):
  """Inverts the pixels >= threshold (0-256).

  Args:
    images: uint8 [N, H, W, C].
    threshold: 0-256; 256 changes nothing.

  Returns:
    The images, uint8 [N, H, W, C].
  """
  return tf.where(tf.cast(images, tf.int32) < threshold, images, 255 - images)


def solarize_add(images, addition, threshold=128):
  """Adds `addition` (clipped to 0-255) to the pixels < threshold.

  Args:
    images: uint8 [N, H, W, C].
    addition: the amount added, 0-255.
    threshold: pixels below it get the addition.

  Returns:
    The images, uint8 [N, H, W, C].
  """
  pixels = tf.cast(images, tf.int32)
  added = tf.cast(tf.clip_by_value(pixels + addition, 0, 255), tf.uint8)
  return tf.where(pixels < threshold, added, images)


def posterize(images, bits):
  """Keeps the `bits` (0-8) highest bits of every pixel.

  Args:
    images: uint8 [N, H, W, C].
    bits: how many high bits to keep, 0-8.

  Returns:
    The images, uint8 [N, H, W, C].
  """
  mask = (0xFF << (8 - bits)) & 0xFF
  return tf.bitwise.bitwise_and(images, tf.constant(mask, tf.uint8))


def autocontrast(images):
  """Stretches each channel linearly so its min becomes 0 and max 255;
  a constant channel stays as it is.

  Args:
    images: uint8 [N, H, W, C].

  Returns:
    The images, uint8 [N, H, W, C].
  """
  pixels = tf.cast(images, tf.float32)
  low = tf.reduce_min(pixels, axis=[1, 2], keepdims=True)
  high = tf.reduce_max(pixels, axis=[1, 2], keepdims=True)
  # Multiply first: exact in float32, so the brightest value gives 255.
  stretched = (pixels - low) * 255.0 / tf.maximum(high - low, 1.0)
  return tf.where(high > low, _to_uint8(stretched), images)


def equalize(images):
  """PIL's histogram equalization, per channel: with step = (pixels - count
  of the brightest value) // 255, value v maps to (pixels below v + step //
  2) // step; a channel with step 0 stays as it is.

  Args:
    images: uint8 [N, H, W, C].

  Returns:
    The images, uint8 [N, H, W, C].
  """
  channels = _channels(images)
  shape = tf.shape(images)
  values = tf.reshape(tf.cast(images, tf.int32), [shape[0], -1, channels])
  # One 256-bin histogram per example and channel, from a single bincount.
  offsets = tf.reshape(256 * tf.range(shape[0] * channels),
                       [-1, 1, channels])
  bins = 256 * shape[0] * channels
  histogram = tf.reshape(
      tf.math.bincount(values + offsets, minlength=bins, maxlength=bins),
      [-1, channels, 256])
  pixels = shape[1] * shape[2]
  brightest = tf.reduce_max(values, axis=1)  # [N, C]
  step = (pixels - tf.gather(histogram, brightest, batch_dims=2)) // 255
  safe_step = tf.maximum(step, 1)[..., None]
  below = tf.cumsum(histogram, axis=-1, exclusive=True)
  lut = tf.minimum((below + safe_step // 2) // safe_step, 255)
  mapped = tf.gather(tf.reshape(lut, [-1]), values + offsets)
  out = tf.where(step[:, None, :] > 0, mapped, values)
  return tf.reshape(tf.cast(out, tf.uint8), shape)


def color(images, factor):
  """Blend with the grey image (PIL's Color); the identity on grey images.

  Args:
    images: uint8 [N, H, W, C].
    factor: PIL's enhance factor (0: grey, 1: unchanged).

  Returns:
    The images, uint8 [N, H, W, C].
  """
  if _channels(images) == 1:
    return images
  return blend(grey(images), images, factor)


def contrast(images, factor):
  """Blend with a flat image of the mean grey level (PIL's Contrast).

  Args:
    images: uint8 [N, H, W, C].
    factor: PIL's enhance factor (0: flat grey, 1: unchanged).

  Returns:
    The images, uint8 [N, H, W, C].
  """
  mean = tf.round(tf.reduce_mean(grey(images), axis=[1, 2, 3], keepdims=True))
  return blend(mean, images, factor)


def brightness(images, factor):
  """Blend with black (PIL's Brightness).

  Args:
    images: uint8 [N, H, W, C].
    factor: PIL's enhance factor (0: black, 1: unchanged).

  Returns:
    The images, uint8 [N, H, W, C].
  """
  return blend(tf.zeros([], tf.float32), images, factor)


def sharpness(images, factor):
  """Blend with the images smoothed by PIL's SMOOTH kernel, whose border
  pixels stay as they are (PIL's Sharpness).

  Args:
    images: uint8 [N, H, W, C].
    factor: PIL's enhance factor (0: smoothed, 1: unchanged).

  Returns:
    The images, uint8 [N, H, W, C].
  """
  channels = _channels(images)
  kernel = tf.constant([[1, 1, 1], [1, 5, 1], [1, 1, 1]], tf.float32) / 13.0
  kernel = tf.tile(kernel[:, :, None, None], [1, 1, channels, 1])
  # 'SAME' keeps the shape (the border values are not used); 'VALID' keeps
  # the input shape for an empty batch, which breaks the padding back.
  smooth = tf.nn.depthwise_conv2d(tf.cast(images, tf.float32), kernel,
                                  [1, 1, 1, 1], 'SAME')
  shape = tf.shape(images)
  inner = tf.pad(tf.ones([shape[1] - 2, shape[2] - 2], tf.bool),
                 [[1, 1], [1, 1]])[None, :, :, None]
  return blend(tf.where(inner, _to_uint8(smooth), images), images, factor)


# Geometric operations: output pixel (x, y) takes the input pixel nearest to
# (a0 x + a1 y + a2, b0 x + b1 y + b2); outside the image gives FILL.

def _transform(images, row_x, row_y):
  """Each of the six coefficients a scalar or [N]."""
  n = tf.shape(images)[0]
  columns = [tf.broadcast_to(tf.cast(a, tf.float32), [n])
             for a in (*row_x, *row_y)]
  matrices = tf.stack(columns + [tf.zeros([n]), tf.zeros([n])], axis=1)
  out = tf.raw_ops.ImageProjectiveTransformV3(
      images=images, transforms=matrices, output_shape=tf.shape(images)[1:3],
      fill_value=float(FILL), interpolation='NEAREST', fill_mode='CONSTANT')
  return tf.ensure_shape(out, images.shape)


def _sides(images):
  shape = tf.cast(tf.shape(images), tf.float32)
  return shape[1], shape[2]


def rotate(images, degrees):
  """Rotation about the centre by `degrees`, counter-clockwise if positive.

  Args:
    images: uint8 [N, H, W, C].
    degrees: the angle, a scalar or [N].

  Returns:
    The images, uint8 [N, H, W, C].
  """
  height, width = _sides(images)
  radians = tf.cast(degrees, tf.float32) * math.pi / 180.0
  cos, sin = tf.cos(radians), tf.sin(radians)
  x_offset = ((width - 1) - (cos * (width - 1) - sin * (height - 1))) / 2
  y_offset = ((height - 1) - (sin * (width - 1) + cos * (height - 1))) / 2
  return _transform(images, (cos, -sin, x_offset), (sin, cos, y_offset))


def shear_x(images, level):
  """Horizontal shear: output pixel (x, y) takes input (x + level * y, y).

  Args:
    images: uint8 [N, H, W, C].
    level: the shear, a scalar or [N].

  Returns:
    The images, uint8 [N, H, W, C].
  """
  return _transform(images, (1.0, level, 0.0), (0.0, 1.0, 0.0))


def shear_y(images, level):
  """Vertical shear: output pixel (x, y) takes input (x, level * x + y).

  Args:
    images: uint8 [N, H, W, C].
    level: the shear, a scalar or [N].

  Returns:
    The images, uint8 [N, H, W, C].
  """
  return _transform(images, (1.0, 0.0, 0.0), (level, 1.0, 0.0))


def translate_x(images, pixels):
  """Moves the content `pixels` to the left (right if negative).

  Args:
    images: uint8 [N, H, W, C].
    pixels: the shift, a scalar or [N].

  Returns:
    The images, uint8 [N, H, W, C].
  """
  return _transform(images, (1.0, 0.0, pixels), (0.0, 1.0, 0.0))


def translate_y(images, pixels):
  """Moves the content `pixels` up (down if negative).

  Args:
    images: uint8 [N, H, W, C].
    pixels: the shift, a scalar or [N].

  Returns:
    The images, uint8 [N, H, W, C].
  """
  return _transform(images, (1.0, 0.0, 0.0), (0.0, 1.0, pixels))


def cutout(images, half_height, half_width, center_y, center_x):
  """Fills rows [cy - hh, cy + hh) x columns [cx - hw, cx + hw) with FILL;
  the centres are scalars or [N].

  Args:
    images: uint8 [N, H, W, C].
    half_height: half the box's height, in pixels.
    half_width: half the box's width, in pixels.
    center_y: the box's centre row.
    center_x: the box's centre column.

  Returns:
    The images, uint8 [N, H, W, C].
  """
  rows = tf.range(tf.shape(images)[1])[None, :, None, None]
  cols = tf.range(tf.shape(images)[2])[None, None, :, None]
  center_y = tf.reshape(center_y, [-1, 1, 1, 1])
  center_x = tf.reshape(center_x, [-1, 1, 1, 1])
  inside = ((rows >= center_y - half_height) & (rows < center_y + half_height)
            & (cols >= center_x - half_width) & (cols < center_x + half_width))
  return tf.where(inside, tf.constant(FILL, tf.uint8), images)


# The operations at a magnitude: (images, magnitude, sign, uniform) ->
# images, where sign [N] is +-1 and uniform [N, 2] floats in [0, 1)
# (Cutout's centre).

def _fraction(magnitude):
  return magnitude / MAX_LEVEL


def _enhance(magnitude):
  return _fraction(magnitude) * 1.8 + 0.1


def _scaled_pixels(images, magnitude, constant, axis):
  """The reference's `constant` pixels at this magnitude, scaled to the
  images' side along `axis` (0: height, 1: width)."""
  side = _sides(images)[axis]
  return _fraction(magnitude) * constant * side / _REFERENCE_SIDE


def _cutout_at(images, magnitude, uniform):
  height, width = _sides(images)
  # A small epsilon so that a 224 side gives exactly int(m/10 * 40).
  half_h, half_w = (tf.cast(tf.floor(
      _scaled_pixels(images, magnitude, _CUTOUT, axis) + 1e-4), tf.int32)
                    for axis in (0, 1))
  center_y = tf.cast(tf.floor(uniform[:, 0] * height), tf.int32)
  center_x = tf.cast(tf.floor(uniform[:, 1] * width), tf.int32)
  return cutout(images, half_h, half_w, center_y, center_x)


OPS = {
    'AutoContrast': lambda im, m, s, u: autocontrast(im),
    'Equalize': lambda im, m, s, u: equalize(im),
    'Invert': lambda im, m, s, u: invert(im),
    'Rotate': lambda im, m, s, u: rotate(im, s * _fraction(m) * 30.0),
    'Posterize': lambda im, m, s, u: posterize(im, int(_fraction(m) * 4)),
    'Solarize': lambda im, m, s, u: solarize(im, int(_fraction(m) * 256)),
    'Color': lambda im, m, s, u: color(im, _enhance(m)),
    'Contrast': lambda im, m, s, u: contrast(im, _enhance(m)),
    'Brightness': lambda im, m, s, u: brightness(im, _enhance(m)),
    'Sharpness': lambda im, m, s, u: sharpness(im, _enhance(m)),
    'ShearX': lambda im, m, s, u: shear_x(im, s * _fraction(m) * 0.3),
    'ShearY': lambda im, m, s, u: shear_y(im, s * _fraction(m) * 0.3),
    'TranslateX': lambda im, m, s, u: translate_x(
        im, s * _scaled_pixels(im, m, _TRANSLATE, axis=1)),
    'TranslateY': lambda im, m, s, u: translate_y(
        im, s * _scaled_pixels(im, m, _TRANSLATE, axis=0)),
    'Cutout': lambda im, m, s, u: _cutout_at(im, m, u),
    'SolarizeAdd': lambda im, m, s, u: solarize_add(
        im, int(_fraction(m) * 110)),
}


def apply_op(name: str, image, magnitude, sign=1.0, uniform=(0.5, 0.5)):
  """One operation of OPS at `magnitude` (0-10) on one image [H, W, C].

  Args:
    name: a key of OPS.
    image: uint8 [H, W, C].
    magnitude: the strength, 0 to MAX_LEVEL.
    sign: -1.0 to negate a signed operation (Rotate, Shear, Translate).
    uniform: Cutout's centre, as fractions of the height and width.

  Returns:
    The image, uint8 [H, W, C].
  """
  images = tf.convert_to_tensor(image)[None]
  sign = tf.constant([sign], tf.float32)
  uniform = tf.constant([uniform], tf.float32)
  return OPS[name](images, magnitude, sign, uniform)[0]


def draws(seed, num_layers: int):
  """One example's random numbers [num_layers, 4] from its [2] seed: per
  layer the op, the sign of a signed op, and Cutout's centre.

  Args:
    seed: the example's [2] integer seed.
    num_layers: how many operations will be applied.

  Returns:
    float32 [num_layers, 4] in [0, 1).
  """
  return tf.random.stateless_uniform([num_layers, 4], seed=seed)


def randaugment_batch(images, layer_draws, magnitude):
  """RandAugment on uint8 images [N, H, W, C] at `magnitude` (0-10), with
  each example's `draws` in `layer_draws` [N, num_layers, 4].

  Args:
    images: uint8 [N, H, W, C].
    layer_draws: each example's `draws`, [N, num_layers, 4].
    magnitude: the strength, 0 to MAX_LEVEL.

  Returns:
    The images, uint8 [N, H, W, C].

  Raises:
    ValueError: for images that are not uint8 or have an unknown channel
      count.
  """
  images = tf.convert_to_tensor(images)
  if images.dtype != tf.uint8:
    raise ValueError(f'RandAugment takes uint8 images, not {images.dtype}.')
  _channels(images)
  shape = images.shape
  positions = tf.range(tf.shape(images)[0])
  for layer in range(layer_draws.shape[1]):
    drawn = layer_draws[:, layer]
    index = tf.minimum(tf.cast(drawn[:, 0] * len(OPS), tf.int32),
                       len(OPS) - 1)
    sign = tf.where(drawn[:, 1] < 0.5, -1.0, 1.0)
    # Each op once, on the examples that drew it (maybe none).
    parts = [tf.dynamic_partition(x, index, len(OPS))
             for x in (images, sign, drawn[:, 2:], positions)]
    outputs = [op(im, magnitude, s, u) for op, im, s, u in zip(
        OPS.values(), *parts[:3])]
    images = tf.ensure_shape(tf.dynamic_stitch(parts[3], outputs), shape)
  return images


def randaugment(image, seed, num_layers: int, magnitude):
  """`num_layers` operations drawn uniformly from OPS, each at `magnitude`
  (0-10), on one uint8 image [H, W, C]; `seed` is a [2] integer tensor.

  Args:
    image: uint8 [H, W, C].
    seed: the example's own seed.
    num_layers: how many operations to apply.
    magnitude: the strength, 0 to MAX_LEVEL.

  Returns:
    The image, uint8 [H, W, C].
  """
  return randaugment_batch(tf.convert_to_tensor(image)[None],
                           draws(seed, num_layers)[None], magnitude)[0]

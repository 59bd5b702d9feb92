"""Encoded images (JPEG, PNG) to uint8 pixels, in TensorFlow ops so that
tf.data and the streamed reader decode them alike.

Any mode becomes the channels asked for: grey, grey+alpha, RGB, RGBA and
palette PNGs to 1 (grey) or 3 (RGB) channels, alpha dropped; 16-bit PNGs keep
their top 8 bits.
"""

import tensorflow as tf

from recipes.runtime.errors import UserError

CHANNELS = (0, 1, 3)  # config.image_channels; 0: as the data is stored.


def decode(encoded, channels: int):
  """One image's pixels.

  Args:
    encoded: the file's bytes, a scalar string tensor.
    channels: 1 or 3.

  Returns:
    uint8 [H, W, channels].
  """
  image = tf.io.decode_image(encoded, channels=channels, dtype=tf.uint8,
                             expand_animations=False)
  image.set_shape([None, None, channels])
  return image


def stored_channels(encoded: bytes) -> int:
  """The channels an image of unknown mode is trained with: 1 if it is
  grey (with or without alpha), else 3.

  Raises:
    tf.errors.InvalidArgumentError: not a JPEG or PNG, or damaged.
  """
  stored = int(tf.io.decode_image(encoded, expand_animations=False).shape[-1])
  return 1 if stored <= 2 else 3


def check_channels(channels):
  """UserError unless `channels` is one of CHANNELS."""
  if isinstance(channels, bool) or channels not in CHANNELS:
    raise UserError(f'image_channels={channels!r} must be 1 (grey), 3 (RGB) '
                    'or 0 (as the images are stored).')

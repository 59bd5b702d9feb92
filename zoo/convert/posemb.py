"""A ViT's learned position embedding, from a file's layout to the zoo's.

The zoo's ViT adds one embedding per token after the class token is
prepended: (1, 1 + h*w, width) with a class token, (1, h*w, width) without
(pool='gap'). Files put it in one of two ways: with an entry for the class
token (timm; Google's original ViT code, vit_jax), or only for the patches,
added before the class token is prepended (big_vision since 2022; timm with
no_embed_class), which is the zoo's layout with a zero class-token entry.
When the image size changes, the grid of patch entries is resized bilinearly
with the corners aligned (scipy.ndimage.zoom with order=1, as vit_jax's and
big_vision's `resample_posemb` do), the class token's entry kept apart.
"""

import math

import numpy as np

from zoo.convert.transfer import ConversionError


def split(posemb: np.ndarray, has_class_token: bool,
          name: str) -> tuple[int, int]:
  """(entries before the grid: 0 or 1, grid side) of a file's (1, n, width)
  embedding `name`.

  Args:
    posemb: the file's position embedding.
    has_class_token: whether the file's model has a class token (then the
      embedding may or may not have an entry for it).
    name: the tensor's name, for error messages.

  Returns:
    (prefix, side): 1 if the first entry is the class token's, else 0; and
    the side of the square grid of patch entries.

  Raises:
    ConversionError: the embedding is not (1, tokens, width), or its
      entries are not a square grid (after a class token's entry).
  """
  if posemb.ndim != 3 or posemb.shape[0] != 1:
    raise ConversionError(f'position embedding {name!r} has shape '
                          f'{posemb.shape}, not (1, tokens, width).')
  n = posemb.shape[1]
  for prefix in ((1, 0) if has_class_token else (0,)):
    side = math.isqrt(n - prefix)
    if side > 0 and side * side == n - prefix:
      return prefix, side
  raise ConversionError(f'position embedding {name!r} has {n} entries, '
                        'not a square grid of patches (and a class token).')


def arrange(posemb: np.ndarray, prefix: int, class_token: bool,
            side: int) -> np.ndarray:
  """The zoo's embedding for a `side` x `side` grid (with a class token's
  entry if `class_token`) from a file's, whose first `prefix` entries are
  not of the grid.

  Args:
    posemb: the file's embedding, (1, prefix + old_side**2, width).
    prefix: 1 if its first entry is the class token's, else 0 (see
      `split`).
    class_token: whether the zoo model has a class token; without an entry
      for it in the file, its entry is zero.
    side: the model's grid side, in patches (image size / patch size).

  Returns:
    (1, [1 +] side * side, width): the grid resized bilinearly if its side
    changes, the class token's entry first.
  """
  width = posemb.shape[-1]
  grid = posemb[0, prefix:]
  old = math.isqrt(grid.shape[0])
  grid = resize(grid.reshape(old, old, width), side).reshape(1, -1, width)
  if not class_token:
    return grid
  first = posemb[:, :1] if prefix else np.zeros((1, 1, width), posemb.dtype)
  return np.concatenate([first, grid], axis=1)


def resize(grid: np.ndarray, side: int) -> np.ndarray:
  """(h, w, width) -> (side, side, width), bilinear with aligned corners.

  Args:
    grid: the embedding per patch, (h, w, width).
    side: the new height and width, in patches.

  Returns:
    The resized grid, float32; `grid` itself if its sides are already
    `side`.
  """
  for axis in (0, 1):
    grid = _interpolate(grid, axis, side)
  return grid


def _interpolate(x: np.ndarray, axis: int, new: int) -> np.ndarray:
  old = x.shape[axis]
  if old == new:
    return x
  if old == 1 or new == 1:
    return np.repeat(np.take(x, [0], axis), new, axis)
  coords = np.arange(new, dtype=np.float64) * ((old - 1) / (new - 1))
  low = np.minimum(np.floor(coords).astype(int), old - 2)
  frac = (coords - low).reshape([new if a == axis else 1
                                 for a in range(x.ndim)])
  x = x.astype(np.float64)
  out = np.take(x, low, axis) * (1 - frac) + np.take(x, low + 1, axis) * frac
  return out.astype(np.float32)

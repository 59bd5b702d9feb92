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
  embedding `name`."""
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
  not of the grid."""
  width = posemb.shape[-1]
  grid = posemb[0, prefix:]
  old = math.isqrt(grid.shape[0])
  grid = resize(grid.reshape(old, old, width), side).reshape(1, -1, width)
  if not class_token:
    return grid
  first = posemb[:, :1] if prefix else np.zeros((1, 1, width), posemb.dtype)
  return np.concatenate([first, grid], axis=1)


def resize(grid: np.ndarray, side: int) -> np.ndarray:
  """(h, w, width) -> (side, side, width), bilinear with aligned corners."""
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

"""Reads datasets stored as IDX files (the MNIST family's original format).

Debian's `dataset-fashion-mnist` package installs Fashion-MNIST this way. TFDS's
own builder rejects these files (their gzip bytes differ from the registered
checksums), so they are read here and handed to the same pipeline as TFDS data,
with the same features: `image` uint8 [N, H, W, 1] and `label` int64 [N].
Splits take TFDS's syntax ('train[:99%]', 'test[:1000]', 'train+test'),
resolved by TFDS's own ReadInstruction, so a slice selects the same examples
here as in TFDS.
"""

import gzip
import io
import os
from typing import Sequence

import numpy as np
from PIL import Image

from recipes.data.sources import splits as splits_lib
from recipes.data.sources.examples import EncodedSource
from recipes.runtime import storage
from recipes.runtime.errors import UserError

FASHION_MNIST_DIR = '/usr/share/datasets/fashion-mnist'
FASHION_MNIST_CLASSES = ('T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat',
                         'Sandal', 'Shirt', 'Sneaker', 'Bag', 'Ankle boot')
_WHERE = 'an IDX dataset'
_SPLIT_PREFIX = {'train': 'train', 'test': 't10k'}
# IDX type codes (third byte of the magic number) and their big-endian dtypes.
_DTYPES = {0x08: '>u1', 0x09: '>i1', 0x0B: '>i2', 0x0C: '>i4', 0x0D: '>f4',
           0x0E: '>f8'}


def read_idx(path: str | os.PathLike) -> np.ndarray:
  """Returns the array stored in an IDX file (optionally gzip-compressed).

  Args:
    path: the file; a name ending in '.gz' is decompressed first.

  Returns:
    The array, in native byte order.

  Raises:
    UserError: if the file is not complete gzip, not IDX, or truncated.
  """
  data = storage.path(path).read_bytes()
  if os.fspath(path).endswith('.gz'):
    try:
      data = gzip.decompress(data)
    except (OSError, EOFError) as e:  # Not gzip, or cut short.
      raise UserError(f'{path} is not a complete gzip file ({e}); reinstall '
                      'the dataset package.') from e
  if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _DTYPES:
    raise UserError(f'{path} is not an IDX file (bad magic number); '
                    'reinstall the dataset package.')
  dtype, ndim = np.dtype(_DTYPES[data[2]]), data[3]
  header = 4 + 4 * ndim
  shape = tuple(int(d) for d in np.frombuffer(data[4:header], '>u4'))
  if len(data) - header != np.prod(shape) * dtype.itemsize:
    raise UserError(f'{path} is truncated: its header says shape {shape}; '
                    'reinstall the dataset package.')
  return np.frombuffer(data, dtype, offset=header).reshape(shape).astype(
      dtype.newbyteorder('='))


def load_split(data_dir: str | None, split: str) -> dict[str, np.ndarray]:
  """Loads `split` ('train', 'test', or a TFDS slice of them).

  Args:
    data_dir: the folder of the four IDX .gz files; None: FASHION_MNIST_DIR.
    split: the split string.

  Returns:
    `image` uint8 [N, H, W, 1] and `label` int64 [N].

  Raises:
    UserError: for a bad split string, or missing or broken files.
  """
  return load_splits(data_dir, [split])[0]


def load_splits(data_dir: str | None, splits: Sequence[str]
                ) -> list[dict[str, np.ndarray]]:
  """Loads each of `splits` (TFDS syntax over 'train' and 'test'), reading
  each file once.

  Args:
    data_dir: the folder of the four IDX .gz files; None: FASHION_MNIST_DIR.
    splits: the split strings.

  Returns:
    For each split in order, `image` uint8 [N, H, W, 1] and `label` int64
    [N].

  Raises:
    UserError: for a bad split string, or missing or broken files.
  """
  # The files the splits read, found by resolving them against huge splits.
  any_size = dict.fromkeys(_SPLIT_PREFIX, 2**40)
  files = {}
  for split in splits:
    for name, _, _ in splits_lib.resolve(split, any_size, _WHERE):
      if name not in files:
        files[name] = _load_files(data_dir, name)
  sizes = {name: len(arrays['label']) for name, arrays in files.items()}
  loaded = []
  for split in splits:
    parts = splits_lib.resolve(split, sizes, _WHERE)
    loaded.append({
        k: np.concatenate([files[name][k][start:stop]
                           for name, start, stop in parts])
        for k in ('image', 'label')})
  return loaded


def _load_files(data_dir: str | None, split: str) -> dict[str, np.ndarray]:
  """The whole split 'train' or 'test'."""
  data_dir = data_dir or FASHION_MNIST_DIR
  prefix = _SPLIT_PREFIX[split]
  paths = [storage.path(data_dir) / f'{prefix}-{kind}-idx{n}-ubyte.gz'
           for kind, n in (('images', 3), ('labels', 1))]
  missing = [str(p) for p in paths if not p.exists()]
  if missing:
    raise UserError(
        f'Fashion-MNIST files not found: {", ".join(missing)}. Install them '
        'with `apt-get install -y dataset-fashion-mnist` (Debian; with sudo '
        'unless root) or set --config.data_dir to a folder holding the four '
        'IDX .gz files.')
  images, labels = (read_idx(p) for p in paths)
  if len(images) != len(labels):
    raise UserError(f'{paths[0]} has {len(images)} images but {paths[1]} has '
                    f'{len(labels)} labels; reinstall the dataset package.')
  return {'image': images[..., None].astype(np.uint8),
          'label': labels.astype(np.int64)}


def encoded(data_dir: str | None, splits: Sequence[str] = ()
            ) -> EncodedSource:
  """The IDX files as encoded images (each a PNG, lossless), for
  `python -m recipes.data.prepare fashion_mnist_idx DST`.

  Args:
    data_dir: the folder of the four IDX .gz files; None: FASHION_MNIST_DIR.
    splits: the whole splits to read ('train', 'test'); empty: both.

  Returns:
    The splits, and Fashion-MNIST's class names.

  Raises:
    UserError: for another split, or missing or broken files.
  """
  for split in splits:
    if split not in _SPLIT_PREFIX:
      raise UserError(f'fashion_mnist_idx has no split {split!r} (it has '
                      f'{", ".join(_SPLIT_PREFIX)}).')
  names = [s for s in _SPLIT_PREFIX if s in splits or not splits]
  where = data_dir or FASHION_MNIST_DIR
  return EncodedSource('fashion_mnist_idx', FASHION_MNIST_CLASSES, {
      name: _PngImages(arrays['image'][..., 0], arrays['label'],
                       f'{where} ({name})')
      for name, arrays in zip(names, load_splits(data_dir, names))})


class _PngImages:
  """IDX images, each encoded as a PNG when read."""

  def __init__(self, images: np.ndarray, labels: np.ndarray, where: str):
    self._images, self._labels, self._where = images, labels, where

  def __len__(self) -> int:
    return len(self._labels)

  def read(self, indices: Sequence[int]) -> tuple[list[bytes], np.ndarray]:
    encoded = []
    for i in indices:
      buffer = io.BytesIO()
      Image.fromarray(self._images[i], 'L').save(buffer, 'PNG')
      encoded.append(buffer.getvalue())
    return encoded, self._labels[np.asarray(indices, np.int64)].astype(
        np.int64)

  def describe(self, index: int) -> str:
    return f'image {index} of the IDX files in {self._where}'

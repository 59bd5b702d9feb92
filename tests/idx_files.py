"""Fashion-MNIST-shaped IDX files of random images, written with numpy
alone: conftest.py needs them, and pytest-xdist's controlling process loads
conftest.py before it starts the workers, so this module keeps it from
loading TensorFlow and the recipes it does not use."""

import gzip
import os

import numpy as np


def write_idx(path: str, array: np.ndarray):
  """Writes `array` (uint8) as a gzip-compressed IDX file."""
  header = bytes([0, 0, 0x08, array.ndim]) + np.asarray(
      array.shape, '>u4').tobytes()
  with gzip.open(path, 'wb') as f:
    f.write(header + array.astype(np.uint8).tobytes())


def write_fashion_mnist(data_dir: str, num_train: int, num_test: int,
                        seed: int = 0):
  """Random 28x28 IDX files named like Fashion-MNIST's; returns the arrays."""
  rng = np.random.default_rng(seed)
  arrays = {}
  for prefix, n in (('train', num_train), ('t10k', num_test)):
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, (n,), dtype=np.uint8)
    write_idx(os.path.join(data_dir, f'{prefix}-images-idx3-ubyte.gz'), images)
    write_idx(os.path.join(data_dir, f'{prefix}-labels-idx1-ubyte.gz'), labels)
    arrays[prefix] = (images, labels)
  return arrays

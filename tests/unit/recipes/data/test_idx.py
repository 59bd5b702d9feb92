import gzip
import os

import numpy as np
import pytest

from recipes.data import datasets
from recipes.data.sources import idx
from recipes.runtime.errors import UserError
from tests.idx_files import write_fashion_mnist, write_idx


def test_reads_back_what_was_written(tmp_path):
  arrays = write_fashion_mnist(str(tmp_path), num_train=12, num_test=5)
  for split, prefix in (('train', 'train'), ('test', 't10k')):
    images, labels = arrays[prefix]
    got = idx.load_split(str(tmp_path), split)
    assert got['image'].shape == (len(labels), 28, 28, 1)
    assert got['image'].dtype == np.uint8 and got['label'].dtype == np.int64
    np.testing.assert_array_equal(got['image'][..., 0], images)
    np.testing.assert_array_equal(got['label'], labels)


def test_multibyte_types_are_big_endian(tmp_path):
  path = str(tmp_path / 'x.idx')
  values = np.arange(6).reshape(2, 3) * 1000
  with open(path, 'wb') as f:
    f.write(bytes([0, 0, 0x0C, 2]) + np.array([2, 3], '>u4').tobytes()
            + values.astype('>i4').tobytes())
  np.testing.assert_array_equal(idx.read_idx(path), values)


def test_dataset_gives_tfds_style_examples(tmp_path):
  write_fashion_mnist(str(tmp_path), num_train=12, num_test=5)
  data = datasets.load('fashion_mnist_idx', str(tmp_path))
  assert data.num_classes == 10 and data.image_shape == (28, 28, 1)
  assert len(data.train['label']) == 12 and len(data.eval['label']) == 5


def test_missing_files_say_how_to_install(tmp_path):
  with pytest.raises(UserError, match='apt-get install -y dataset-fashion'):
    idx.load_split(str(tmp_path), 'train')


def test_truncated_file_is_a_clear_error(tmp_path):
  path = str(tmp_path / 'bad-idx3-ubyte.gz')
  write_idx(path, np.zeros((4, 2, 2), np.uint8))
  with gzip.open(path, 'rb') as f:
    data = f.read()
  with gzip.open(path, 'wb') as f:
    f.write(data[:-3])
  with pytest.raises(UserError, match='truncated'):
    idx.read_idx(path)


@pytest.mark.skipif(not os.path.exists(idx.FASHION_MNIST_DIR),
                    reason='Debian package dataset-fashion-mnist not installed')
def test_debian_fashion_mnist_files():
  test = idx.load_split(None, 'test')
  assert test['image'].shape == (10_000, 28, 28, 1)
  assert np.bincount(test['label']).tolist() == [1000] * 10

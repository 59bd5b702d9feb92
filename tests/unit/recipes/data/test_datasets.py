"""The dataset's name picks its source; the preprocessing never does."""

import tempfile

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from recipes.data import datasets
from recipes.data.images import preprocess
from recipes.data.images.preprocess import AUGMENTATIONS, Preprocessing
from recipes.data.pipeline import in_memory, streaming
from recipes.data.pipeline.dataset import Dataset
from recipes.data.sources import idx, tfds_source
from recipes.runtime.errors import UserError
from tests.idx_files import write_fashion_mnist


@pytest.fixture
def mock_tfds(monkeypatch):
  """Fake prepared TFDS datasets of 24 examples, without any network."""
  monkeypatch.setattr(tfds_source, 'first_unreachable_url', lambda b: None)
  with tfds.testing.mock_data(num_examples=24):
    yield


def test_a_builder_leaves_nothing_in_the_temporary_directory(tmp_path,
                                                              monkeypatch):
  scratch = tmp_path / 'tmp'
  scratch.mkdir()
  monkeypatch.setattr(tempfile, 'tempdir', str(scratch))
  data_dir = str(tmp_path / 'data')
  tfds.builder('mnist', data_dir=data_dir)
  (left,) = scratch.iterdir()  # TFDS's own, empty, for a dataset unprepared.
  assert left.name.endswith('tfds') and not list(left.iterdir())
  builder = tfds_source.unprepared_builder('mnist', data_dir)
  assert not builder.is_prepared()
  assert list(scratch.iterdir()) == [left]  # Its own removed, others kept.


@pytest.mark.parametrize('name, source', [
    ('fashion_mnist_idx', 'idx'), ('mnist', 'memory'), ('cifar10', 'memory'),
    ('imagenet2012', 'stream'), ('imagenette/320px:1.0.0', 'stream')])
def test_the_name_picks_the_source(name, source):
  assert datasets.source_for(name) == source


def test_data_source_forces_a_tfds_source_but_not_idx():
  assert datasets.source_for('mnist', 'stream') == 'stream'
  assert datasets.source_for('imagenet2012', 'memory') == 'memory'
  assert datasets.source_for('fashion_mnist_idx', 'memory') == 'idx'
  with pytest.raises(UserError, match='cannot be streamed'):
    datasets.source_for('fashion_mnist_idx', 'stream')
  with pytest.raises(UserError, match="unknown data_source 'disk'; choose "
                     'one of auto, memory, stream.'):
    datasets.source_for('mnist', 'disk')


@pytest.mark.parametrize('augment', ['none', 'cifar'])
def test_idx_files_are_read_whatever_the_augment(tmp_path, augment):
  write_fashion_mnist(str(tmp_path), num_train=20, num_test=6)
  prep = Preprocessing(augment)
  data = datasets.load('fashion_mnist_idx', str(tmp_path), 'train', 'test',
                       prep)
  assert isinstance(data, in_memory.InMemoryDataset)
  assert isinstance(data, Dataset)
  train = idx.load_split(str(tmp_path), 'train')
  got = next(data.train_batches(batch_size=8, seed=1, start_step=0,
                                num_steps=1))
  want = next(in_memory.train_batches(train, batch_size=8, seed=1,
                                      start_step=0, num_steps=1,
                                      preprocessing=prep))
  np.testing.assert_array_equal(got['image'], want['image'])


def test_a_jpeg_preset_on_a_dataset_in_memory_is_one_line(tmp_path):
  prep = Preprocessing('imagenet', image_size=32)
  for name in ('fashion_mnist_idx', 'mnist'):
    with pytest.raises(UserError) as error:
      datasets.load(name, str(tmp_path), preprocessing=prep)
    assert str(error.value).startswith(
        f"augment='imagenet' takes encoded JPEGs, which only a streamed "
        f"dataset keeps, but {name!r} is read into memory")
    assert '\n' not in str(error.value)


@pytest.mark.parametrize('augment', list(AUGMENTATIONS))
def test_a_streamed_name_streams_whatever_the_augment(mock_tfds, augment):
  prep = Preprocessing(augment, image_size=32)
  if not prep.augmentation.resizes:  # ImageNet's images differ in size.
    with pytest.raises(UserError, match='images of varying sizes'):
      datasets.load('imagenet2012', None, 'train', 'validation', prep)
    return
  data = datasets.load('imagenet2012', None, 'train', 'validation', prep)
  assert isinstance(data, streaming.StreamingDataset)
  assert isinstance(data, Dataset)
  if not prep.takes_jpeg:  # Decoded images of every size, resized.
    batch = next(data.train_batches(batch_size=4, seed=0, start_step=0,
                                    num_steps=1))
    assert batch['image'].shape == (4, 32, 32, 3)


def test_an_unlisted_tfds_name_is_in_memory_unless_streamed(mock_tfds):
  prep = Preprocessing('cifar', 'cifar10')
  kept = datasets.load('cifar10', None, preprocessing=prep)
  assert isinstance(kept, in_memory.InMemoryDataset)
  streamed = datasets.load('cifar10', None, preprocessing=prep,
                           data_source='stream')
  assert isinstance(streamed, streaming.StreamingDataset)
  assert (streamed.num_train, streamed.num_eval) == (24, 24)
  assert streamed.num_classes == kept.num_classes == 10
  assert streamed.image_shape == kept.image_shape == (32, 32, 3)
  batches = list(streamed.train_batches(batch_size=8, seed=0, start_step=0,
                                        num_steps=2))
  assert [b['image'].shape for b in batches] == [(8, 32, 32, 3)] * 2
  assert all(b['image'].dtype == np.float32 for b in batches)
  evals = list(streamed.eval_batches(batch_size=16))
  assert sum(int(b['mask'].sum()) for b in evals) == 24


def test_finetune_gives_the_model_cifar10_at_its_resolution(mock_tfds):
  prep = Preprocessing('finetune', 'minus_one_to_one', image_size=48)
  data = datasets.load('cifar10', None, 'train', 'test', prep)
  assert isinstance(data, in_memory.InMemoryDataset)
  batch = next(data.train_batches(batch_size=8, seed=0, start_step=0,
                                  num_steps=1))
  assert batch['image'].shape == (8, 48, 48, 3)
  assert next(data.eval_batches(batch_size=8))['image'].shape == (
      8, 48, 48, 3)


def test_the_model_is_built_for_the_finetune_resolution(mock_tfds):
  prep = Preprocessing('finetune', 'minus_one_to_one', image_size=48)
  data = datasets.load('cifar10', None, 'train', 'test', prep)
  assert data.image_shape == (48, 48, 3)


def test_unknown_names_suggest_close_ones():
  with pytest.raises(UserError, match="unknown dataset 'fashon_mnist'; did "
                     "you mean 'fashion_mnist'"):
    datasets.load('fashon_mnist', None)


def test_minus_one_to_one_keeps_grey_images_grey(tmp_path):
  prep = Preprocessing(normalize='minus_one_to_one')
  image = np.zeros((28, 28, 1), np.uint8)
  image[:14] = 255
  out = prep.eval(tf.constant(image)).numpy()
  assert out.shape == (28, 28, 1) and out.dtype == np.float32
  assert (out.min(), out.max()) == (-1.0, 1.0)
  assert set(out.ravel()) == {-1.0, 1.0}
  write_fashion_mnist(str(tmp_path), num_train=16, num_test=4)
  data = datasets.load('fashion_mnist_idx', str(tmp_path), 'train', 'test',
                       Preprocessing('cifar', 'minus_one_to_one'))
  batch = next(data.train_batches(batch_size=8, seed=0, start_step=0,
                                  num_steps=1))
  assert batch['image'].shape == (8, 28, 28, 1)
  assert -1 <= batch['image'].min() and batch['image'].max() <= 1
  evals = next(data.eval_batches(batch_size=4))
  assert evals['image'].shape == (4, 28, 28, 1)


def test_minus_one_to_one_on_colour_images(mock_tfds):
  data = datasets.load('cifar10', None, preprocessing=Preprocessing(
      normalize='minus_one_to_one'))
  batch = next(data.eval_batches(batch_size=8))
  assert batch['image'].shape == (8, 32, 32, 3)
  images = data.eval['image'][:8]
  np.testing.assert_allclose(batch['image'], images / 127.5 - 1, atol=1e-6)


@pytest.mark.parametrize('normalize', ['cifar10', 'imagenet'])
def test_colour_statistics_on_grey_images_are_one_line(tmp_path, mock_tfds,
                                                       normalize):
  prep = Preprocessing(normalize=normalize)
  with pytest.raises(UserError) as error:
    preprocess.normalize(tf.zeros([2, 28, 28, 1]), normalize)
  assert str(error.value).startswith(
      f'normalize={normalize!r} has statistics for 3 channels but the images '
      "have 1; use 'minus_one_to_one' or \"\" instead")
  write_fashion_mnist(str(tmp_path), num_train=8, num_test=4)
  for name in ('fashion_mnist_idx', 'mnist'):  # IDX, TFDS: both grey.
    with pytest.raises(UserError, match='has statistics for 3 channels') as e:
      datasets.load(name, str(tmp_path), preprocessing=prep)
    assert '\n' not in str(e.value)


def test_images_of_varying_sizes_are_not_read_into_memory(mock_tfds):
  prep = Preprocessing('finetune', image_size=32)
  with pytest.raises(UserError, match='cannot be held in memory') as error:
    datasets.load('imagenet2012', None, 'train', 'validation', prep,
                  data_source='memory')
  assert '\n' not in str(error.value)

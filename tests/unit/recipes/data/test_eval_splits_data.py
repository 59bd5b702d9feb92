"""One dataset, several evaluation splits, in TFDS's split syntax for every
source (IDX files, TFDS in memory, TFDS streamed)."""

import os

import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds

from recipes.data import datasets
from recipes.data.images.preprocess import Preprocessing
from recipes.data.pipeline.dataset import Dataset
from recipes.data.sources import idx, tfds_source
from recipes.runtime.errors import UserError
from tests.idx_files import write_idx


class RecipesTestNumbered(tfds.core.GeneratorBasedBuilder):
  """50 training and 30 test examples whose 4x4 image is all its number
  (train 0-49, test 100-129), so any batch says which examples it holds."""

  VERSION = tfds.core.Version('1.0.0')

  def _info(self):
    return self.dataset_info_from_configs(
        features=tfds.features.FeaturesDict({
            'image': tfds.features.Image(shape=(4, 4, 1)),
            'label': tfds.features.ClassLabel(num_classes=10)}))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {'train': self._generate_examples(range(50)),
            'test': self._generate_examples(range(100, 130))}

  def _generate_examples(self, numbers):
    for n in numbers:
      yield n, {'image': np.full((4, 4, 1), n, np.uint8), 'label': n % 10}


@pytest.fixture(scope='module')
def tfds_dir(tmp_path_factory):
  """A prepared copy of the numbered dataset (no network needed)."""
  data_dir = str(tmp_path_factory.mktemp('tfds'))
  tfds.builder('recipes_test_numbered', data_dir=data_dir
               ).download_and_prepare()
  return data_dir


def _stored_order(data_dir, split):
  """The numbers of `split` in the order TFDS stored them (its slices)."""
  ds = tfds.builder('recipes_test_numbered', data_dir=data_dir).as_dataset(
      split=split, shuffle_files=False)
  return np.array([int(x['image'][0, 0, 0]) for x in tfds.as_numpy(ds)])


def write_numbered_idx(data_dir, num_train, num_test):
  """IDX files whose images carry their number in base 256 in pixels (0, 0),
  (0, 1), (0, 2); train 0.., test 100000.."""
  splits = (('train', num_train, 0), ('t10k', num_test, 100_000))
  for prefix, n, first in splits:
    numbers = np.arange(first, first + n)
    images = np.zeros((n, 28, 28), np.uint8)
    images[:, 0, 0], images[:, 0, 1] = numbers % 256, numbers // 256 % 256
    images[:, 0, 2] = numbers // 65536
    write_idx(os.path.join(data_dir, f'{prefix}-images-idx3-ubyte.gz'), images)
    write_idx(os.path.join(data_dir, f'{prefix}-labels-idx1-ubyte.gz'),
              numbers % 10)


def _numbers(images) -> np.ndarray:
  """The numbers of preprocessed (scaled to [0, 1]) numbered images."""
  pixels = np.rint(np.asarray(images) * 255).astype(np.int64)
  if pixels.shape[1:] == (4, 4, 1):
    return pixels[:, 0, 0, 0]
  return pixels[:, 0, 0, 0] + 256 * pixels[:, 0, 1, 0] + 65536 * pixels[
      :, 0, 2, 0]


def _evaluated(data, split, batch_size):
  batches = list(data.eval_batches(batch_size=batch_size, split=split))
  local = batch_size // jax.process_count()
  assert all(len(b['mask']) == local for b in batches)
  numbers = np.concatenate([_numbers(b['image'])[b['mask']] for b in batches])
  return numbers, len(batches)


def _load(name, data_dir, source, train_split, eval_splits):
  return datasets.load(name, data_dir, train_split, eval_splits,
                       Preprocessing(), source)


SOURCES = ['idx', 'memory', 'stream']


def _dataset(source, tmp_path, tfds_dir, train_split, eval_splits):
  """The dataset, and the numbers of its whole train and test splits in
  their stored order, which slices follow."""
  if source == 'idx':
    write_numbered_idx(str(tmp_path), num_train=50, num_test=30)
    return (_load('fashion_mnist_idx', str(tmp_path), 'auto', train_split,
                  eval_splits), np.arange(50), 100_000 + np.arange(30))
  # TFDS stores the examples in an order of its own.
  return (_load('recipes_test_numbered', tfds_dir, source, train_split,
                eval_splits), _stored_order(tfds_dir, 'train'),
          _stored_order(tfds_dir, 'test'))


@pytest.mark.parametrize('source', SOURCES)
def test_several_eval_splits_with_slices(source, tmp_path, tfds_dir):
  splits = ['test', 'train[80%:]', 'test[:7]', 'train[10:13]+test[-2:]']
  data, train, test = _dataset(source, tmp_path, tfds_dir, 'train[:80%]',
                               splits)
  assert isinstance(data, Dataset)
  assert data.num_train == 40 and data.num_eval == 30
  assert data.eval_sizes == {'test': 30, 'train[80%:]': 10, 'test[:7]': 7,
                             'train[10:13]+test[-2:]': 5}
  assert list(data.eval_sizes) == splits  # In the order given.
  want = {'test': test, 'train[80%:]': train[40:], 'test[:7]': test[:7],
          'train[10:13]+test[-2:]': np.r_[train[10:13], test[-2:]]}
  for split, numbers in want.items():
    # Every example exactly once (streamed files may come in another order).
    got, steps = _evaluated(data, split, batch_size=8)
    np.testing.assert_array_equal(np.sort(got), np.sort(numbers))
    assert steps == -(-len(numbers) // 8)
  main, _ = _evaluated(data, None, batch_size=8)  # None: the first split.
  np.testing.assert_array_equal(np.sort(main), np.sort(test))
  # The training split is the rest of train, in memory one permutation per
  # epoch (a stream's shuffle buffer mixes epochs).
  epoch = np.concatenate([_numbers(b['image']) for b in data.train_batches(
      batch_size=8, seed=0, start_step=0, num_steps=5)])
  if source == 'stream':
    assert set(epoch) <= set(train[:40])
  else:
    np.testing.assert_array_equal(np.sort(epoch), np.sort(train[:40]))


def test_streamed_eval_splits_are_shared_by_processes(monkeypatch, tfds_dir):
  data = _load('recipes_test_numbered', tfds_dir, 'stream', 'train',
               ['test', 'train[90%:]'])
  for split, want in (('test', 100 + np.arange(30)),
                      ('train[90%:]', _stored_order(tfds_dir, 'train')[45:])):
    shares, steps = [], set()
    for index in range(2):
      monkeypatch.setattr('jax.process_count', lambda: 2)
      monkeypatch.setattr('jax.process_index', lambda i=index: i)
      numbers, count = _evaluated(data, split, batch_size=4)
      shares.append(numbers)
      steps.add(count)
    assert len(steps) == 1  # The same number of steps on every process.
    np.testing.assert_array_equal(np.sort(np.concatenate(shares)),
                                  np.sort(want))


@pytest.mark.parametrize('source', SOURCES)
def test_one_eval_split_as_a_string_and_repeats(source, tmp_path, tfds_dir):
  data, *_ = _dataset(source, tmp_path, tfds_dir, 'train', 'test[5:9]')
  assert data.eval_sizes == {'test[5:9]': 4} and data.num_eval == 4
  data, *_ = _dataset(source, tmp_path, tfds_dir, 'train',
                      ('test', 'train[:3]', 'test'))
  assert data.eval_sizes == {'test': 30, 'train[:3]': 3}
  with pytest.raises(ValueError, match="no evaluation split 'train'"):
    data.eval_batches(batch_size=8, split='train')


@pytest.mark.parametrize('source', SOURCES)
@pytest.mark.parametrize('split', ['validation', 'test[:abc]', 'test[5:2000]',
                                   'train[:101%]'])
def test_a_bad_split_is_one_line_naming_it(source, split, tmp_path, tfds_dir):
  with pytest.raises(UserError) as error:
    _dataset(source, tmp_path, tfds_dir, 'train', ['test', split])
  message = str(error.value)
  assert repr(split) in message and '\n' not in message, message


@pytest.mark.parametrize('source', SOURCES)
def test_an_empty_split_is_a_user_error(source, tmp_path, tfds_dir):
  with pytest.raises(UserError, match=r"split 'test\[5:5\]' of dataset .* "
                     'has no examples'):
    _dataset(source, tmp_path, tfds_dir, 'train', ['test', 'test[5:5]'])


def test_idx_percent_slices_partition_the_train_split(tmp_path):
  """At the real size: 'train[:99%]' and 'train[99%:]' of 60,000."""
  data_dir = idx.FASHION_MNIST_DIR
  if not os.path.exists(data_dir):
    data_dir = str(tmp_path)
    write_numbered_idx(data_dir, num_train=60_000, num_test=10)
  data = datasets.load('fashion_mnist_idx', data_dir, 'train[:99%]',
                       ['test', 'train[99%:]'])
  whole = idx.load_split(data_dir, 'train')
  assert len(whole['label']) == 60_000
  assert data.num_train == 59_400 and data.eval_sizes['train[99%:]'] == 600
  minival = data.evals['train[99%:]']
  for key in ('image', 'label'):
    np.testing.assert_array_equal(
        np.concatenate([data.train[key], minival[key]]), whole[key])
  numbers, steps = _evaluated(data, 'train[99%:]', batch_size=256)
  assert steps == 3 and len(numbers) == 600


def test_mock_tfds_streamed_split_sizes(monkeypatch):
  """Under tfds.testing.mock_data (no split metadata) sizes are counted."""
  monkeypatch.setattr(tfds_source, 'first_unreachable_url', lambda b: None)
  with tfds.testing.mock_data(num_examples=12):
    data = datasets.load('cifar10', None, 'train[:50%]',
                         ['test', 'train[50%:]'], Preprocessing(),
                         data_source='stream')
    assert data.eval_sizes == {'test': 12, 'train[50%:]': 12}
    evals = list(data.eval_batches(batch_size=8, split='train[50%:]'))
  assert sum(int(b['mask'].sum()) for b in evals) == 12

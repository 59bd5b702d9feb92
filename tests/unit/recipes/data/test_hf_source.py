import importlib
import io
import os
import pathlib
import shutil
import socket
import sys
import time

import datasets
import huggingface_hub.constants
import numpy as np
import PIL.Image
import pytest

from recipes.data import datasets as recipes_datasets
from recipes.data.images.preprocess import Preprocessing
from recipes.data.sources import hf_source
from recipes.runtime.errors import UserError


@pytest.fixture(autouse=True)
def hf_home(tmp_path, monkeypatch):
  """Every cache in the test's own folder: nothing read or written in the
  user's ~/.cache/huggingface."""
  home = tmp_path / 'hf_home'
  monkeypatch.setenv('HF_HOME', str(home))
  monkeypatch.delenv('HF_DATASETS_CACHE', raising=False)
  monkeypatch.delenv('HF_HUB_CACHE', raising=False)
  return home


def pixels(count, seed=0, shape=(5, 7, 3)):
  rng = np.random.default_rng(seed)
  return [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(count)]


def png(array):
  """PNG bytes unlike PIL's defaults: a re-encoding would differ."""
  buffer = io.BytesIO()
  PIL.Image.fromarray(array).save(buffer, format='PNG', compress_level=1)
  return buffer.getvalue()


def decode(data):
  return np.asarray(PIL.Image.open(io.BytesIO(data)))


def image_dataset(arrays, labels, label_feature=None, image='image',
                  label='label'):
  """Images as PNG bytes in an Image column, and labels."""
  dataset = datasets.Dataset.from_dict({
      image: [{'bytes': png(a), 'path': None} for a in arrays],
      label: labels})
  dataset = dataset.cast_column(image, datasets.Image())
  if label_feature is not None:
    dataset = dataset.cast_column(label, label_feature)
  return dataset


def assert_reads(examples, arrays, labels, indices):
  images, got = examples.read(indices)
  assert got.dtype == np.int64
  np.testing.assert_array_equal(got, [labels[i] for i in indices])
  assert len(images) == len(indices)
  for data, i in zip(images, indices):
    np.testing.assert_array_equal(decode(data), arrays[i])


def test_save_to_disk_splits_round_trip_bitwise(tmp_path):
  train, test = pixels(6, seed=1), pixels(3, seed=2)
  names = datasets.ClassLabel(names=['cat', 'dog', 'fox'])
  datasets.DatasetDict({
      'train': image_dataset(train, [0, 1, 2, 2, 1, 0], names),
      'test': image_dataset(test, [2, 0, 1], names),
  }).save_to_disk(str(tmp_path / 'saved'))
  source = hf_source.open(str(tmp_path / 'saved'))
  assert source.class_names == ('cat', 'dog', 'fox')
  assert {s: len(e) for s, e in source.splits.items()} == {'train': 6,
                                                          'test': 3}
  assert_reads(source.splits['train'], train, [0, 1, 2, 2, 1, 0],
               [5, 0, 3, 3])
  assert_reads(source.splits['test'], test, [2, 0, 1], [1, 2, 0])
  # The stored file's bytes themselves, not a re-encoding.
  assert source.splits['test'].read([1])[0] == [png(test[1])]
  images, labels = source.splits['test'].read([])
  assert images == [] and labels.shape == (0,) and labels.dtype == np.int64


def test_one_saved_dataset_keeps_its_split_name_else_train(tmp_path):
  arrays = pixels(2)
  image_dataset(arrays, [0, 1]).save_to_disk(str(tmp_path / 'plain'))
  named = datasets.Dataset.from_dict(
      {'image': [{'bytes': png(arrays[0]), 'path': None}], 'label': [0]},
      split=datasets.Split.TEST)
  named.cast_column('image', datasets.Image()).save_to_disk(
      str(tmp_path / 'named'))
  assert list(hf_source.open(str(tmp_path / 'plain')).splits) == ['train']
  assert list(hf_source.open(str(tmp_path / 'named')).splits) == ['test']


def write_shards(folder):
  """data/train in two shards and data/test in one, as the Hub has them."""
  train, test = pixels(5, seed=3), pixels(2, seed=4)
  (folder / 'data').mkdir(parents=True)
  image_dataset(train[:3], [0, 1, 0]).to_parquet(
      str(folder / 'data/train-00000-of-00002.parquet'))
  image_dataset(train[3:], [1, 1]).to_parquet(
      str(folder / 'data/train-00001-of-00002.parquet'))
  image_dataset(test, [1, 0]).to_parquet(
      str(folder / 'data/test-00000-of-00001.parquet'))
  return train, [0, 1, 0, 1, 1], test, [1, 0]


@pytest.mark.parametrize('where', ['folder', 'glob'])
def test_parquet_shards_split_by_file_name(tmp_path, where):
  train, train_labels, test, test_labels = write_shards(tmp_path / 'pq')
  path = tmp_path / 'pq'
  if where == 'glob':
    path = path / 'data' / '*.parquet'
  source = hf_source.open(str(path))
  assert sorted(source.splits) == ['test', 'train']
  assert source.class_names == ('0', '1')  # Plain ints: '0' to the largest.
  assert_reads(source.splits['train'], train, train_labels, [4, 0, 3, 2])
  assert_reads(source.splits['test'], test, test_labels, [0, 1])


@pytest.mark.parametrize('file_name, split', [('test.parquet', 'test'),
                                              ('images.parquet', 'train')])
def test_one_parquet_file_is_split_by_its_name(tmp_path, file_name, split):
  arrays = pixels(3)
  image_dataset(arrays, [2, 0, 1]).to_parquet(str(tmp_path / file_name))
  source = hf_source.open(str(tmp_path / file_name))
  assert list(source.splits) == [split]
  assert_reads(source.splits[split], arrays, [2, 0, 1], [2, 1, 0])


def test_a_glob_reads_only_the_files_it_matches(tmp_path):
  arrays = pixels(4)
  image_dataset(arrays[:2], [0, 1]).to_parquet(str(tmp_path / 'a.parquet'))
  image_dataset(arrays[2:], [1, 0]).to_parquet(str(tmp_path / 'b.parquet'))
  source = hf_source.open(str(tmp_path / 'b*.parquet'))
  assert {s: len(e) for s, e in source.splits.items()} == {'train': 2}
  assert_reads(source.splits['train'], arrays[2:], [1, 0], [0, 1])


def test_relative_path_and_describe(tmp_path, monkeypatch):
  image_dataset(pixels(3), [0, 1, 0]).save_to_disk(str(tmp_path / 'saved'))
  monkeypatch.chdir(tmp_path)
  source = hf_source.open('saved')
  assert source.name == 'hf:saved'
  assert (source.splits['train'].describe(2) ==
          "row 2 of split 'train' of hf:saved")


def test_select_slices_a_split(tmp_path):
  arrays = pixels(6)
  labels = [0, 1, 2, 3, 4, 5]
  image_dataset(arrays, labels).save_to_disk(str(tmp_path / 'saved'))
  half = hf_source.open(str(tmp_path / 'saved')).select('train[:50%]')
  assert len(half) == 3
  assert_reads(half, arrays, labels, [2, 0, 1])
  with pytest.raises(IndexError):
    half.read([3])


def test_image_paths_are_read_from_their_files(tmp_path):
  arrays = pixels(2)
  paths = []
  for i, array in enumerate(arrays):
    paths.append(str(tmp_path / f'{i}.png'))
    PIL.Image.fromarray(array).save(paths[-1])
  dataset = datasets.Dataset.from_dict({'image': paths, 'label': [1, 0]})
  # to_parquet keeps the paths (save_to_disk would embed the bytes).
  dataset.cast_column('image', datasets.Image()).to_parquet(
      str(tmp_path / 'paths.parquet'))
  examples = hf_source.open(str(tmp_path / 'paths.parquet')).splits['train']
  images, _ = examples.read([1, 0])
  assert images == [pathlib.Path(p).read_bytes()
                    for p in (paths[1], paths[0])]
  os.remove(paths[1])
  with pytest.raises(UserError, match=r"row 1 of split 'train' .*1\.png "
                                      'cannot be read'):
    examples.read([1])


@pytest.mark.parametrize('shape', [(4, 6, 3), (4, 6), (4, 6, 1), (3, 2, 4)])
def test_pixel_arrays_become_lossless_pngs(tmp_path, shape):
  arrays = pixels(3, shape=shape)
  datasets.Dataset.from_dict({
      'img': arrays, 'y': [0, 1, 1]}).save_to_disk(str(tmp_path / 'saved'))
  examples = hf_source.open(str(tmp_path / 'saved'),
                            label_column='y').splits['train']
  images, labels = examples.read([2, 0])
  assert labels.tolist() == [1, 0]
  for data, i in zip(images, [2, 0]):
    assert data.startswith(b'\x89PNG')
    np.testing.assert_array_equal(decode(data),
                                  arrays[i].reshape(decode(data).shape))
    assert decode(data).size == arrays[i].size


def test_fixed_shape_array_column(tmp_path):
  arrays = pixels(2, shape=(3, 3, 3))
  dataset = datasets.Dataset.from_dict({'pixel_values': arrays,
                                        'label': [1, 0]})
  dataset = dataset.cast_column('pixel_values',
                                datasets.Array3D((3, 3, 3), 'uint8'))
  dataset.save_to_disk(str(tmp_path / 'saved'))
  examples = hf_source.open(str(tmp_path / 'saved')).splits['train']
  assert_reads(examples, arrays, [1, 0], [1, 0])


def test_float_pixels_are_refused(tmp_path):
  datasets.Dataset.from_dict({
      'pixel_values': [np.full((2, 2, 3), 0.5, np.float32)],
      'label': [0]}).save_to_disk(str(tmp_path / 'saved'))
  examples = hf_source.open(str(tmp_path / 'saved')).splits['train']
  with pytest.raises(UserError, match='row 0 .*float32 outside the integers'):
    examples.read([0])


def test_string_labels_are_sorted_across_splits(tmp_path):
  arrays = pixels(5)
  datasets.DatasetDict({
      'train': image_dataset(arrays[:3], ['dog', 'cat', 'dog']),
      'test': image_dataset(arrays[3:], ['emu', 'cat']),
  }).save_to_disk(str(tmp_path / 'saved'))
  source = hf_source.open(str(tmp_path / 'saved'))
  assert source.class_names == ('cat', 'dog', 'emu')
  assert source.splits['train'].read([0, 1, 2])[1].tolist() == [1, 0, 1]
  assert source.splits['test'].read([0, 1])[1].tolist() == [2, 0]


def test_int_labels_name_classes_up_to_the_largest(tmp_path):
  image_dataset(pixels(3), [0, 4, 2]).save_to_disk(str(tmp_path / 'saved'))
  source = hf_source.open(str(tmp_path / 'saved'))
  assert source.class_names == ('0', '1', '2', '3', '4')
  assert source.splits['train'].read([1])[1].tolist() == [4]


def test_columns_found_by_type_then_by_name_or_named(tmp_path):
  arrays = pixels(2)
  dataset = image_dataset(arrays, [1, 0], image='photo', label='target')
  dataset = dataset.add_column('category', ['b', 'a'])
  dataset.save_to_disk(str(tmp_path / 'saved'))
  found = hf_source.open(str(tmp_path / 'saved'))  # Image type; 'category'.
  assert found.class_names == ('a', 'b')
  assert_reads(found.splits['train'], arrays, [1, 0], [0, 1])
  named = hf_source.open(str(tmp_path / 'saved'), 'photo', 'target')
  assert named.class_names == ('0', '1')
  assert named.splits['train'].read([1])[1].tolist() == [0]


def test_encoded_bytes_column_found_by_name(tmp_path):
  arrays = pixels(2)
  datasets.Dataset.from_dict({
      'img': [png(a) for a in arrays], 'labels': [0, 1]}).save_to_disk(
          str(tmp_path / 'saved'))
  examples = hf_source.open(str(tmp_path / 'saved')).splits['train']
  assert examples.read([1, 0])[0] == [png(arrays[1]), png(arrays[0])]
  assert_reads(examples, arrays, [0, 1], [1, 0])


def test_reading_a_thousand_rows_is_one_fast_batch(tmp_path):
  arrays = pixels(20, shape=(16, 16, 3))
  pngs = [png(a) for a in arrays]
  dataset = datasets.Dataset.from_dict({
      'image': [{'bytes': pngs[i % 20], 'path': None} for i in range(2000)],
      'label': [i % 20 for i in range(2000)]})
  dataset.cast_column('image', datasets.Image()).save_to_disk(
      str(tmp_path / 'saved'))
  examples = hf_source.open(str(tmp_path / 'saved')).splits['train']
  indices = np.random.default_rng(0).permutation(2000)[:1000]
  start = time.perf_counter()
  images, labels = examples.read(indices)
  seconds = time.perf_counter() - start
  assert images == [pngs[i % 20] for i in indices]
  np.testing.assert_array_equal(labels, indices % 20)
  assert seconds < 0.5, f'1,000 rows took {seconds:.2f} s'


def test_a_name_in_datasets_cache_is_read_offline(tmp_path, monkeypatch,
                                                  hf_home):
  # load_dataset of a folder named tiny_beans caches it as
  # tiny_beans/default/0.0.0/HASH, the layout a Hub download of
  # 'tiny_beans' leaves, which is what offline loads look for.
  arrays = pixels(3)
  (tmp_path / 'tiny_beans').mkdir()
  image_dataset(arrays, [0, 1, 1]).to_parquet(
      str(tmp_path / 'tiny_beans' / 'test.parquet'))
  datasets.load_dataset(str(tmp_path / 'tiny_beans'),
                        cache_dir=str(hf_home / 'datasets'))
  shutil.rmtree(tmp_path / 'tiny_beans')  # Only the cache is left.
  connects = record_connections(monkeypatch)
  flags = (datasets.config, huggingface_hub.constants)
  offline_before = [flag.HF_HUB_OFFLINE for flag in flags]
  source = hf_source.open('tiny_beans')
  assert list(source.splits) == ['test']
  assert_reads(source.splits['test'], arrays, [0, 1, 1], [2, 0, 1])
  assert not connects
  assert [flag.HF_HUB_OFFLINE for flag in flags] == offline_before  # Reset.


def test_a_name_in_the_hub_cache_is_read_offline(monkeypatch, hf_home):
  # The Hub cache's layout, as `hf download user/tiny --repo-type dataset`
  # leaves it: refs/main names the snapshot folder of the repo's files.
  repo = hf_home / 'hub' / 'datasets--user--tiny'
  (repo / 'refs').mkdir(parents=True)
  (repo / 'refs' / 'main').write_text('0123abcd')
  snapshot = repo / 'snapshots' / '0123abcd'
  train, train_labels, test, test_labels = write_shards(snapshot)
  connects = record_connections(monkeypatch)
  source = hf_source.open('user/tiny')
  assert sorted(source.splits) == ['test', 'train']
  assert_reads(source.splits['train'], train, train_labels, [1, 4])
  assert_reads(source.splits['test'], test, test_labels, [1, 0])
  assert not connects


def record_connections(monkeypatch):
  """The hosts looked up or connected to from now on (each refused)."""
  connects = []

  def refuse(address, *args, **kwargs):
    del args, kwargs
    connects.append(address)
    raise OSError(f'no network in this test: {address}')

  monkeypatch.setattr(socket, 'getaddrinfo', refuse)
  monkeypatch.setattr(socket.socket, 'connect',
                      lambda self, address: refuse(address))
  return connects


# Errors: each one line that says what to do.


def test_a_name_not_cached_says_how_to_download_it(monkeypatch, tmp_path):
  monkeypatch.setenv('HF_DATASETS_CACHE', str(tmp_path / 'dcache'))
  connects = record_connections(monkeypatch)
  with pytest.raises(UserError) as error:
    hf_source.open('someone/not_cached')
  message = str(error.value)
  assert '\n' not in message
  assert "datasets.load_dataset('someone/not_cached')" in message
  assert 'hf download someone/not_cached --repo-type dataset' in message
  assert str(tmp_path / 'dcache') in message
  assert str(tmp_path / 'hf_home' / 'hub') in message
  assert not connects


def test_without_datasets_installed(monkeypatch):
  monkeypatch.setitem(sys.modules, 'datasets', None)  # Import fails.
  importlib.reload(hf_source)  # The module itself does not need it.
  with pytest.raises(UserError, match=r"pip install 'jax-model-zoo\[hf\]'"):
    hf_source.open('beans')


def test_a_path_that_does_not_exist(tmp_path):
  with pytest.raises(UserError, match='no file or folder .*missing.parquet'):
    hf_source.open(str(tmp_path / 'missing.parquet'))
  with pytest.raises(UserError, match='no .parquet file matches'):
    hf_source.open(str(tmp_path / 'none-*.parquet'))


def test_no_image_column_names_the_config_fields(tmp_path):
  datasets.Dataset.from_dict({'a': [1, 2], 'label': [0, 1]}).save_to_disk(
      str(tmp_path / 'saved'))
  with pytest.raises(UserError, match=r'its columns: a, label\).*'
                                      '--config.image_column.*'
                                      '--config.label_column'):
    hf_source.open(str(tmp_path / 'saved'))


def test_a_named_column_that_does_not_exist(tmp_path):
  image_dataset(pixels(1), [0]).save_to_disk(str(tmp_path / 'saved'))
  with pytest.raises(UserError, match="no column 'photo' for the images "
                                      r'\(its columns: image, label\)'):
    hf_source.open(str(tmp_path / 'saved'), image_column='photo')
  with pytest.raises(UserError, match="no column 'y' for the labels"):
    hf_source.open(str(tmp_path / 'saved'), label_column='y')


def test_labels_of_the_wrong_type(tmp_path):
  image_dataset(pixels(2), [0.5, 1.5]).save_to_disk(str(tmp_path / 'saved'))
  with pytest.raises(UserError, match="label column 'label' holds .*float64"
                                      '.*must be ints, a ClassLabel or '
                                      'strings'):
    hf_source.open(str(tmp_path / 'saved'))


def test_unlabeled_rows_stop_only_their_split(tmp_path):
  arrays = pixels(4)
  names = datasets.ClassLabel(names=['cat', 'dog'])
  datasets.DatasetDict({
      'train': image_dataset(arrays[:2], [1, 0], names),
      'test': image_dataset(arrays[2:], [-1, -1], names),  # Unlabeled.
  }).save_to_disk(str(tmp_path / 'saved'))
  source = hf_source.open(str(tmp_path / 'saved'))
  assert_reads(source.splits['train'], arrays[:2], [1, 0], [0, 1])
  with pytest.raises(UserError, match=r"split 'test' .* 2 labels outside "
                                      r'0\.\.1, e\.g\. -1 in row 0'):
    source.splits['test'].read([1])


def test_an_unreadable_parquet_file(tmp_path):
  (tmp_path / 'bad.parquet').write_bytes(b'not parquet')
  with pytest.raises(UserError, match='hf:.*bad.parquet could not be read'):
    hf_source.open(str(tmp_path / 'bad.parquet'))


@pytest.mark.parametrize('data_source', ['memory', 'stream'])
def test_hf_trains_through_the_dataset_registry(tmp_path, data_source):
  """--config.dataset=hf:PATH: batches in memory or streamed, the same."""
  train, test = pixels(12, seed=3), pixels(4, seed=4)
  names = datasets.ClassLabel(names=['cat', 'dog'])
  datasets.DatasetDict({
      'train': image_dataset(train, [i % 2 for i in range(12)], names),
      'test': image_dataset(test, [0, 1, 0, 1], names),
  }).save_to_disk(str(tmp_path / 'saved'))
  data = recipes_datasets.load(f'hf:{tmp_path / "saved"}', None,
                               preprocessing=Preprocessing('cifar'),
                               data_source=data_source)
  assert data.class_names == ('cat', 'dog') and data.image_shape == (5, 7, 3)
  batch = next(data.train_batches(batch_size=4, seed=0, start_step=0,
                                  num_steps=1))
  assert batch['image'].shape == (4, 5, 7, 3)
  evals = list(data.eval_batches(batch_size=4))
  np.testing.assert_array_equal(evals[0]['image'],
                                np.stack(test).astype(np.float32) / 255)

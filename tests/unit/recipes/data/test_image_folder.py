"""`--config.dataset=folder:PATH`: layouts, image modes, the in-memory and
streamed paths (bitwise alike, whatever the process count), and every bad
input as one line."""

import io
import os

import numpy as np
import pytest
from absl import logging
from PIL import Image

from recipes.data import datasets
from recipes.data.images.preprocess import Preprocessing
from recipes.data.sources import image_folder
from recipes.runtime.errors import UserError
from tests.helpers import write_png_folder

RNG = np.random.default_rng(0)


def _images(n, shape=(12, 10, 1)):
  return RNG.integers(0, 256, (n, *shape), dtype=np.uint8)


@pytest.fixture(scope='module')
def grey_folder(tmp_path_factory):
  """train: 40 grey 12x10 PNGs of 3 classes; test: 10."""
  folder = str(tmp_path_factory.mktemp('grey'))
  labels = np.arange(50) % 3
  images = _images(50)
  write_png_folder(folder, {'train': (images[:40], labels[:40]),
                            'test': (images[40:], labels[40:])},
                   ('ant', 'bee', 'cat'))
  return folder, images, labels


def _load(folder, preprocessing=Preprocessing(), data_source='auto',
          train='train', evals=('test',), **options):
  return datasets.load(f'folder:{folder}', None, train, list(evals),
                       preprocessing, data_source,
                       datasets.EncodedOptions(**options))


def _train(data, batch_size=8, start_step=0, num_steps=9, seed=5):
  return list(data.train_batches(batch_size=batch_size, seed=seed,
                                 start_step=start_step, num_steps=num_steps))


def _assert_same(a, b):
  assert len(a) == len(b) > 0
  for x, y in zip(a, b):
    assert x.keys() == y.keys()
    for key in x:
      np.testing.assert_array_equal(x[key], y[key], err_msg=key)


def test_split_layout_labels_are_the_sorted_class_names(grey_folder):
  folder, images, labels = grey_folder
  source = image_folder.open(folder)
  assert source.class_names == ('0_ant', '1_bee', '2_cat')
  assert {s: len(e) for s, e in source.splits.items()} == {'train': 40,
                                                           'test': 10}
  data = _load(folder, data_source='memory')
  assert data.num_classes == 3 and data.class_names == source.class_names
  # Each image with its own label, in the folder's order (class, file).
  order = np.argsort(labels[:40], kind='stable')
  np.testing.assert_array_equal(data.train['image'], images[:40][order])
  np.testing.assert_array_equal(data.train['label'], labels[:40][order])


def test_a_folder_of_class_folders_is_split_by_slices(tmp_path):
  write_png_folder(str(tmp_path / 'one'),
                   {'x': (_images(30), np.arange(30) % 2)})
  folder = str(tmp_path / 'one' / 'x')  # x/0/*.png, x/1/*.png
  data = _load(folder, train='train[:80%]', evals=('train[80%:]',))
  assert (data.num_train, data.num_eval, data.num_classes) == (24, 6, 2)


@pytest.mark.parametrize('preprocessing', [
    Preprocessing('none'), Preprocessing('cifar'),
    Preprocessing('none', randaugment_layers=2, randaugment_magnitude=7),
    Preprocessing('finetune', image_size=8)], ids=str)
def test_streamed_is_bitwise_the_in_memory_dataset(grey_folder,
                                                   preprocessing):
  folder = grey_folder[0]
  memory = _load(folder, preprocessing, 'memory')
  stream = _load(folder, preprocessing, 'stream')
  assert type(memory).__name__ == 'InMemoryDataset'
  assert type(stream).__name__ == 'RandomAccessDataset'
  assert memory.image_shape == stream.image_shape
  _assert_same(_train(memory), _train(stream))
  _assert_same(list(memory.eval_batches(batch_size=4)),
               list(stream.eval_batches(batch_size=4)))


@pytest.mark.slow
@pytest.mark.parametrize('process_count', [2, 4])
def test_processes_stream_their_rows_of_the_same_global_batches(
    grey_folder, monkeypatch, process_count):
  folder = grey_folder[0]
  preprocessing = Preprocessing('cifar', randaugment_layers=1)
  data = _load(folder, preprocessing, 'stream')
  whole = _train(data, batch_size=8, num_steps=6)
  whole_eval = list(data.eval_batches(batch_size=8))
  parts, eval_parts = [], []
  for index in range(process_count):
    monkeypatch.setattr('jax.process_count', lambda: process_count)
    monkeypatch.setattr('jax.process_index', lambda i=index: i)
    data = _load(folder, preprocessing, 'stream')
    parts.append(_train(data, batch_size=8, num_steps=6))
    eval_parts.append(list(data.eval_batches(batch_size=8)))
  for joined, got in ((whole, parts), (whole_eval, eval_parts)):
    _assert_same(joined, [{k: np.concatenate([p[step][k] for p in got])
                           for k in joined[0]}
                          for step in range(len(joined))])


def test_a_resumed_stream_starts_at_its_step(grey_folder):
  data = _load(grey_folder[0], Preprocessing('cifar'), 'stream')
  _assert_same(_train(data, start_step=0)[6:], _train(data, start_step=6))


def test_image_modes_become_the_channels_asked_for(tmp_path):
  rgb = RNG.integers(0, 256, (6, 5, 3), dtype=np.uint8)
  files = {
      'grey.png': Image.fromarray(rgb[..., 0]),
      'rgb.png': Image.fromarray(rgb),
      'rgba.png': Image.fromarray(np.dstack([rgb, rgb[..., :1]]), 'RGBA'),
      'palette.png': Image.fromarray(rgb).convert('P'),
      'sixteen.png': Image.fromarray(rgb[..., 0].astype(np.uint16) * 257),
      'rgb.jpg': Image.fromarray(rgb),
      'grey.jpeg': Image.fromarray(rgb[..., 0]),
  }
  os.makedirs(tmp_path / 'train' / 'a')
  for name, image in files.items():
    image.save(tmp_path / 'train' / 'a' / name)
  for channels in (1, 3):
    data = _load(str(tmp_path), evals=('train',), image_channels=channels)
    assert data.train['image'].shape == (7, 6, 5, channels)
  # The 16-bit image keeps its top byte: the grey values it was made from.
  grey = _load(str(tmp_path), evals=('train',), image_channels=1)
  sixteen = sorted(files).index('sixteen.png')
  np.testing.assert_array_equal(grey.train['image'][sixteen, ..., 0],
                                rgb[..., 0])
  # 0: as stored; the first file (grey.jpeg, sorted) is grey.
  assert _load(str(tmp_path), evals=('train',)).image_shape == (6, 5, 1)


def test_non_images_and_hidden_files_are_left_alone_and_counted(
    tmp_path, caplog):
  write_png_folder(str(tmp_path), {'train': (_images(4), [0, 1, 0, 1])})
  (tmp_path / 'train' / '0' / 'notes.txt').write_text('x')
  (tmp_path / 'train' / '1' / 'photo.gif').write_bytes(b'GIF89a')
  (tmp_path / 'train' / '1' / '.DS_Store').write_bytes(b'\0')
  (tmp_path / 'README').write_text('x')
  with caplog.at_level(logging.INFO):
    source = image_folder.open(str(tmp_path))
  assert len(source.splits['train']) == 4
  assert 'Ignored 3 files' in caplog.text  # Not .DS_Store: hidden.


def _one_line(error: UserError, *names):
  message = str(error.value)
  assert '\n' not in message and 'Traceback' not in message, message
  for name in names:
    assert name in message, message
  return message


def test_a_missing_or_empty_folder_is_one_line(tmp_path):
  with pytest.raises(UserError) as e:
    _load(str(tmp_path / 'nowhere'))
  _one_line(e, 'nowhere', 'does not exist')
  with pytest.raises(UserError) as e:
    _load(str(tmp_path))
  _one_line(e, str(tmp_path), 'no class folders')
  with pytest.raises(UserError) as e:
    datasets.load('folder:', None)
  _one_line(e, 'folder:PATH')


def test_a_class_folder_without_images_is_one_line(tmp_path):
  write_png_folder(str(tmp_path), {'train': (_images(2), [0, 1])})
  os.makedirs(tmp_path / 'train' / 'empty')
  (tmp_path / 'train' / 'empty' / 'x.txt').write_text('x')
  with pytest.raises(UserError) as e:
    _load(str(tmp_path), evals=('train',))
  _one_line(e, os.path.join('train', 'empty'), 'no JPEG or PNG')


def test_a_class_only_in_the_test_split_is_one_line(tmp_path):
  write_png_folder(str(tmp_path), {'train': (_images(2), [0, 1]),
                                   'test': (_images(3), [0, 1, 2])})
  with pytest.raises(UserError) as e:
    _load(str(tmp_path))
  _one_line(e, "class '2'", "split 'test'", "none in 'train'")


@pytest.fixture
def damaged_folder(tmp_path):
  write_png_folder(str(tmp_path), {'train': (_images(16), np.arange(16) % 2)})
  bad = tmp_path / 'train' / '1' / '00005.png'
  bad.write_bytes(bad.read_bytes()[:60])  # Cut short.
  return str(tmp_path), str(bad)


@pytest.mark.parametrize('data_source', ['memory', 'stream'])
def test_a_damaged_image_is_named(damaged_folder, data_source):
  folder, bad = damaged_folder
  with pytest.raises(UserError) as e:
    data = _load(folder, data_source=data_source, evals=('train',))
    _train(data, batch_size=16, num_steps=1)
  _one_line(e, bad, 'damaged', 'skip_bad_images')


@pytest.mark.parametrize('data_source', ['memory', 'stream'])
def test_skip_bad_images_leaves_them_out_and_counts_them(
    damaged_folder, data_source, caplog):
  folder, bad = damaged_folder
  with caplog.at_level(logging.WARNING):
    data = _load(folder, data_source=data_source, evals=('train',),
                 skip_bad_images=True)
  assert data.num_train == 15
  assert 'Skipped 1 damaged images' in caplog.text and bad in caplog.text
  assert len(_train(data, batch_size=5, num_steps=3)) == 3


def test_an_unreadable_file_is_named(tmp_path):
  write_png_folder(str(tmp_path), {'train': (_images(2), [0, 1])})
  dangling = tmp_path / 'train' / '0' / 'gone.png'
  os.symlink(tmp_path / 'nothing.png', dangling)
  with pytest.raises(UserError) as e:
    _load(str(tmp_path), evals=('train',))
  _one_line(e, str(dangling), 'cannot read')


def test_a_link_loop_is_one_line(tmp_path):
  write_png_folder(str(tmp_path), {'train': (_images(2), [0, 1])})
  os.symlink(tmp_path / 'train', tmp_path / 'train' / '0' / 'again')
  with pytest.raises(UserError) as e:
    _load(str(tmp_path), evals=('train',))
  _one_line(e, 'link loop', 'again')
  os.remove(tmp_path / 'train' / '0' / 'again')
  os.symlink('itself', tmp_path / 'train' / '1' / 'itself')  # ELOOP.
  with pytest.raises(UserError) as e:
    _load(str(tmp_path), evals=('train',))
  _one_line(e, 'itself')


def _mixed_sizes(tmp_path):
  write_png_folder(str(tmp_path), {'train': (_images(6), np.arange(6) % 2)})
  Image.fromarray(_images(1, (20, 30, 1))[0, ..., 0]).save(
      tmp_path / 'train' / '1' / 'wide.png')
  return str(tmp_path)


@pytest.mark.parametrize('data_source', ['memory', 'stream'])
def test_mixed_sizes_with_a_preset_that_keeps_them_say_what_to_set(
    tmp_path, data_source):
  folder = _mixed_sizes(tmp_path)
  with pytest.raises(UserError) as e:
    data = _load(folder, data_source=data_source, evals=('train',))
    _train(data, batch_size=7, num_steps=1)
  _one_line(e, 'wide.png', '30x20', '--config.augment=finetune',
            '--config.image_size=')


def test_mixed_sizes_stream_with_a_preset_that_resizes(tmp_path):
  folder = _mixed_sizes(tmp_path)
  data = _load(folder, Preprocessing('finetune', image_size=9),
               evals=('train',))
  assert type(data).__name__ == 'RandomAccessDataset'
  batch = _train(data, batch_size=7, num_steps=1)[0]
  assert batch['image'].shape == (7, 9, 9, 1)
  evals = list(data.eval_batches(batch_size=4))
  assert [b['mask'].sum() for b in evals] == [4, 3]


def test_the_imagenet_preset_reads_jpegs_and_pngs(tmp_path):
  os.makedirs(tmp_path / 'a')
  os.makedirs(tmp_path / 'b')
  y, x = np.mgrid[:40, :50]  # Smooth, which JPEG keeps well.
  rgb = np.stack([y * 6, x * 5, (x + y) * 2], -1).astype(np.uint8)
  Image.fromarray(rgb).save(tmp_path / 'a' / '1.jpg', quality=95)
  Image.fromarray(rgb).save(tmp_path / 'b' / '2.png')
  data = _load(str(tmp_path), Preprocessing('imagenet', image_size=16),
               evals=('train',))
  batch = next(data.eval_batches(batch_size=2))
  assert batch['image'].shape == (2, 16, 16, 3)
  # The same picture through JPEG and PNG: the same central crop, up to
  # the JPEG's loss.
  assert np.abs(batch['image'][0] - batch['image'][1]).mean() < 0.05
  train = _train(data, batch_size=2, num_steps=2)
  assert train[0]['image'].shape == (2, 16, 16, 3)
  with pytest.raises(UserError) as e:
    _load(str(tmp_path), Preprocessing('imagenet', image_size=16), 'memory',
          evals=('train',))
  _one_line(e, 'data_source=stream')


def test_bad_image_channels_are_one_line(grey_folder):
  with pytest.raises(UserError) as e:
    _load(grey_folder[0], image_channels=2)
  _one_line(e, 'image_channels=2')


def test_an_encoded_png_round_trips(tmp_path):
  image = _images(1, (4, 3, 1))[0, ..., 0]
  buffer = io.BytesIO()
  Image.fromarray(image).save(buffer, 'PNG')
  os.makedirs(tmp_path / 'train' / 'a')
  (tmp_path / 'train' / 'a' / 'x.PNG').write_bytes(buffer.getvalue())
  data = _load(str(tmp_path), evals=('train',))
  np.testing.assert_array_equal(data.train['image'][0, ..., 0], image)


def test_a_split_of_only_damaged_images_is_one_line(tmp_path):
  write_png_folder(str(tmp_path), {'train': (_images(2), [0, 1])})
  for png in (tmp_path / 'train').rglob('*.png'):
    png.write_bytes(b'\x89PNG\r\n\x1a\n broken')
  with pytest.raises(UserError) as e:
    _load(str(tmp_path), evals=('train',), skip_bad_images=True)
  _one_line(e, "split 'train'", 'no examples that decode')


def test_a_home_relative_folder_is_found(tmp_path, monkeypatch):
  monkeypatch.setenv('HOME', str(tmp_path))
  write_png_folder(str(tmp_path / 'pets'), {'train': (_images(2), [0, 1])})
  assert len(image_folder.open('~/pets').splits['train']) == 2


def test_a_flat_folder_is_unlabeled_images(tmp_path):
  for name in ('b.png', 'a.PNG', 'notes.txt', '.hidden.png'):
    Image.fromarray(_images(1)[0, ..., 0]).save(tmp_path / name, 'PNG')
  files = image_folder.unlabeled(str(tmp_path))
  assert [os.path.basename(f) for f in files.files] == ['a.PNG', 'b.png']
  assert files.labels.tolist() == [-1, -1]
  assert files.read([1])[0][0] == (tmp_path / 'b.png').read_bytes()
  # Sub-folders are open's layouts.
  write_png_folder(str(tmp_path / 'classes'), {'train': (_images(2), [0, 1])})
  assert image_folder.unlabeled(str(tmp_path / 'classes' / 'train')) is None
  with pytest.raises(UserError) as e:
    image_folder.unlabeled(str(tmp_path / 'nowhere'))
  _one_line(e, 'nowhere', 'does not exist')
  os.makedirs(tmp_path / 'empty')
  with pytest.raises(UserError) as e:
    image_folder.unlabeled(str(tmp_path / 'empty'))
  _one_line(e, 'empty', 'no JPEG or PNG')

"""Prepared ArrayRecord directories, written and read in this process: the
bytes come back as they went in, damage is named, a stopped write continues
to the same files, a second prepare of a directory stops, and TFDS's own
array_record builds read alike."""

import io
import json
import os
import pickle
import re
import socket
import time

import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from recipes.data import datasets, prepare
from recipes.data.sources import array_records
from recipes.data.sources.examples import EncodedSource
from recipes.runtime import lease
from recipes.runtime.errors import UserError

CLASSES = ('cat', 'dog', 'newt')
TFDS_NAME = 'array_records_test_images'  # ArrayRecordsTestImages's.


def _png(seed: int) -> bytes:
  pixels = np.random.default_rng(seed).integers(0, 256, (5, 4, 3), np.uint8)
  buffer = io.BytesIO()
  Image.fromarray(pixels).save(buffer, 'PNG')
  return buffer.getvalue()


class _Memory:
  """Examples held in lists; `stop_after` reads, it raises as Ctrl-C
  would."""

  def __init__(self, images, labels, stop_after=None):
    self.images, self.labels = list(images), np.asarray(labels, np.int64)
    self.stop_after = stop_after

  def __len__(self):
    return len(self.images)

  def read(self, indices):
    if self.stop_after is not None:
      if self.stop_after == 0:
        raise KeyboardInterrupt
      self.stop_after -= 1
    return [self.images[i] for i in indices], self.labels[list(indices)]

  def describe(self, index):
    return f'memory example {index}'


def _source(sizes=(('train', 25), ('test', 7)), stop_after=None):
  splits = {}
  for offset, (name, n) in enumerate(sizes):
    images = [_png(1000 * offset + i) for i in range(n)]
    splits[name] = _Memory(images, [(3 * i + offset) % 3 for i in range(n)],
                           stop_after)
  return EncodedSource('memory', CLASSES, splits)


def _files(path):
  return {name: (path / name).read_bytes() for name in os.listdir(path)}


@pytest.fixture
def written(tmp_path):
  source = _source()
  dst = tmp_path / 'prepared'
  prepare.write(source, str(dst), examples_per_shard=4)
  return source, dst


def test_reads_back_every_example_bitwise(written):
  source, dst = written
  opened = array_records.open(str(dst))
  assert opened.class_names == CLASSES
  assert sorted(opened.splits) == ['test', 'train']
  for name, expected in source.splits.items():
    got = opened.splits[name]
    assert len(got) == len(expected)
    indices = list(range(len(expected)))[::-1]  # Any order, across shards.
    images, labels = got.read(indices)
    assert images == [expected.images[i] for i in indices]
    np.testing.assert_array_equal(labels, expected.labels[indices])
    assert labels.dtype == np.int64
  # 25 examples, 4 a shard: 7 shards, the last of one.
  assert sorted(f for f in os.listdir(dst) if f.startswith('train')) == [
      f'train-{k:05d}-of-00007.array_record' for k in range(7)]
  assert opened.splits['train'].describe(24) == (
      f'record 0 of shard {dst}/train-00006-of-00007.array_record')


def test_manifest_records_source_classes_and_checksums(written):
  _, dst = written
  manifest = json.loads((dst / 'manifest.json').read_text())
  assert manifest['format'] == 'recipes.array_records'
  assert manifest['source'] == 'memory'
  assert manifest['class_names'] == list(CLASSES)
  assert manifest['splits']['test']['num_examples'] == 7
  shards = manifest['splits']['test']['shards']
  assert [s['num_examples'] for s in shards] == [4, 3]
  for shard in shards:
    assert shard['bytes'] == os.path.getsize(dst / shard['file'])
    assert shard['sha256'] == array_records.sha256(dst / shard['file'])
  assert not (dst / prepare.PROGRESS).exists()


def test_split_strings_select_the_same_examples(written):
  source, dst = written
  opened = array_records.open(str(dst))
  selected = opened.select('train[3:9]+test[-2:]')
  images, labels = selected.read(range(len(selected)))
  train, test = source.splits['train'], source.splits['test']
  assert images == train.images[3:9] + test.images[5:]
  np.testing.assert_array_equal(labels, np.concatenate(
      [train.labels[3:9], test.labels[5:]]))
  with pytest.raises(UserError, match="bad split 'validation'"):
    opened.select('validation')


def test_pickled_split_reads_in_another_process_alike(written):
  source, dst = written
  split = array_records.open(str(dst)).splits['train']
  split.read([0])  # Opens its readers, which a pickle leaves out.
  images, _ = pickle.loads(pickle.dumps(split)).read([11, 2])
  assert images == [source.splits['train'].images[i] for i in (11, 2)]


def test_missing_shard_is_named(written):
  _, dst = written
  os.remove(dst / 'train-00002-of-00007.array_record')
  with pytest.raises(UserError) as error:
    array_records.open(str(dst))
  message = str(error.value)
  assert 'train-00002-of-00007.array_record is missing' in message
  assert 'python -m recipes.data.prepare memory' in message
  assert '\n' not in message


def test_truncated_shard_is_named(written):
  _, dst = written
  shard = dst / 'test-00001-of-00002.array_record'
  data = shard.read_bytes()
  shard.write_bytes(data[:len(data) // 2])
  with pytest.raises(UserError, match=r'test-00001-of-00002.array_record has '
                     r'[\d,]+ bytes where the manifest records'):
    array_records.open(str(dst))


def test_a_directory_without_manifest_says_how_to_make_one(tmp_path):
  with pytest.raises(UserError, match=r'not a prepared directory.*python -m '
                     r'recipes.data.prepare SRC DST'):
    array_records.open(str(tmp_path))
  (tmp_path / 'manifest.json').write_text('{"format": "something"')
  with pytest.raises(UserError, match='is not a manifest'):
    array_records.open(str(tmp_path))


def test_verify_finds_one_changed_byte(written):
  _, dst = written
  assert array_records.verify(str(dst))[0] == 9  # 7 + 2 shards.
  shard = dst / 'train-00004-of-00007.array_record'
  data = bytearray(shard.read_bytes())
  data[100] ^= 1  # In the first record, which opening does not read.
  shard.write_bytes(bytes(data))
  array_records.open(str(dst))  # Same size and index: opening cannot tell.
  with pytest.raises(UserError) as error:
    array_records.verify(str(dst))
  assert 'damaged' in str(error.value)
  assert 'train-00004-of-00007.array_record' in str(error.value)
  assert 'train-00003' not in str(error.value)


def _damage_manifest(dst, damage):
  manifest = json.loads((dst / 'manifest.json').read_text())
  test = manifest['splits']['test']
  if damage == 'binary':
    (dst / 'manifest.json').write_bytes(b'\xff\xfe\x00\x01' * 64)
    return
  if damage == 'nested':
    (dst / 'manifest.json').write_text('[' * 100_000)
    return
  if damage == 'parent':  # A shard of the same size, outside.
    outside = dst.parent / 'outside.array_record'
    outside.write_bytes((dst / test['shards'][0]['file']).read_bytes())
    test['shards'][0]['file'] = '../outside.array_record'
  elif damage == 'absolute':
    test['shards'][0].update(file='/etc/passwd',
                             bytes=os.path.getsize('/etc/passwd'))
  elif damage == 'device':
    test['shards'][1]['file'] = '/dev/zero'
  elif damage == 'negative count':
    test['shards'][0]['num_examples'] = -4
  elif damage == 'string size':
    test['shards'][1]['bytes'] = str(test['shards'][1]['bytes'])
  elif damage == 'bool count':
    test['shards'][1]['num_examples'] = True
  elif damage == 'missing key':
    del manifest['class_names']
  elif damage == 'counts disagree':
    test['num_examples'] = 8
  (dst / 'manifest.json').write_text(json.dumps(manifest))


@pytest.mark.parametrize('damage, problem', [
    ('binary', r'\(not text: byte 0xff at offset 0\)'),
    ('nested', r'\(JSON nested too deeply\)'),
    ('parent', r'splits.test.shards\[0\].file is "../outside.array_record", '
     'not a file name of the directory'),
    ('absolute', r'shards\[0\].file is "/etc/passwd", not a file name'),
    ('device', r'shards\[1\].file is "/dev/zero", not a file name'),
    ('negative count', r'shards\[0\].num_examples is -4, not a positive'),
    ('string size', r'shards\[1\].bytes is "\d+", not a size in bytes'),
    ('bool count', r'shards\[1\].num_examples is true, not a positive'),
    ('missing key', r'\(class_names is missing\)'),
    ('counts disagree', r'splits.test.num_examples is 8, but its shards hold '
     '7 together'),
])
def test_a_damaged_manifest_is_one_line_before_any_shard_is_read(
    written, damage, problem):
  source, dst = written
  _damage_manifest(dst, damage)
  before = _files(dst)
  # Training's reader, --verify and the prepare itself read it alike.
  for read in (lambda: array_records.open(str(dst)),
               lambda: array_records.verify(str(dst)),
               lambda: prepare.write(source, str(dst), examples_per_shard=4)):
    with pytest.raises(UserError) as error:
      read()
    message = str(error.value)
    assert message.startswith(f'{dst}/manifest.json is not a manifest of '
                              'prepared ArrayRecord files, or is damaged ('), (
                                  message)
    assert re.search(problem, message), message
    assert message.endswith('prepare the data again into a new directory: '
                            'python -m recipes.data.prepare SRC NEW_DIR '
                            '(nothing was deleted).')
    assert '\n' not in message
  assert _files(dst) == before


@pytest.mark.parametrize('kind', ['link', 'pipe'])
def test_a_shard_that_is_not_a_regular_file_is_refused_unread(written, kind):
  _, dst = written
  shard = dst / 'test-00000-of-00002.array_record'
  outside = dst.parent / 'outside.array_record'
  os.replace(shard, outside)
  if kind == 'link':  # The same bytes, but read from outside.
    os.symlink(outside, shard)
  else:  # Reading it would wait for a writer forever.
    os.mkfifo(shard)
  for read in (array_records.open, array_records.verify):
    with pytest.raises(UserError) as error:
      read(str(dst))
    message = str(error.value)
    assert message.startswith(
        f'{shard} is {"a link" if kind == "link" else "a pipe or device"}, '
        'not a regular file'), message
    assert 'Delete' not in message and '\n' not in message


def test_a_count_the_shards_do_not_hold_is_refused(written):
  _, dst = written
  manifest = json.loads((dst / 'manifest.json').read_text())
  test = manifest['splits']['test']  # Two shards: 4 and 3 examples.
  test['num_examples'] += 1
  test['shards'][1]['num_examples'] += 1
  (dst / 'manifest.json').write_text(json.dumps(manifest))
  shard = dst / 'test-00001-of-00002.array_record'
  with pytest.raises(UserError, match=(
      f'^shard {shard} holds 3 records where the manifest records 4; find '
      f'what is damaged with: python -m recipes.data.prepare --verify {dst}$')):
    array_records.open(str(dst))
  with pytest.raises(UserError, match=(
      f'^shard {shard} holds 3 records where the manifest records 4; it is as '
      rf'prepared \(its sha256 matches\), so {dst}/manifest.json is wrong: '
      'prepare the data again into a new directory')):
    array_records.verify(str(dst))


def _lease_of_a_killed_prepare(dst):
  """The lease a prepare of this host left when it was killed."""
  gone = int((open('/proc/sys/kernel/pid_max').read())) + 1  # No process.
  (dst / prepare.LEASE.file_name).write_text(json.dumps(dict(
      run='killed', host=socket.gethostname(), pid=gone,
      started=time.time() - 60, renewed=time.time())))


def test_a_second_prepare_stops_naming_the_first_and_writes_nothing(tmp_path):
  dst = tmp_path / 'prepared'
  with pytest.raises(KeyboardInterrupt):  # A first prepare, under way...
    prepare.write(_source(stop_after=3), str(dst), examples_per_shard=4)
  with lease.held_here(dst, prepare.LEASE):  # ... and running still.
    before = _files(dst)
    with pytest.raises(UserError) as error:
      prepare.write(_source(), str(dst), examples_per_shard=4)
    assert _files(dst) == before
  message = str(error.value)
  assert message.startswith(
      f'another prepare holds DST: process {os.getpid()} on host '
      f'{socket.gethostname()}, started '), message
  assert f'({dst}/prepare.lease)' in message and 'give another DST' in message
  assert 'prepare.lease' not in os.listdir(dst)  # Released.


def test_the_lease_of_a_killed_prepare_is_taken_over(tmp_path, monkeypatch):
  # A takeover waits a second for a rival doing the same; none here
  # (tests/unit/recipes/runtime/test_lease.py times nothing either).
  monkeypatch.setattr(lease, 'VERIFY_SECONDS', 0.0)
  whole, stopped = tmp_path / 'whole', tmp_path / 'stopped'
  prepare.write(_source(), str(whole), examples_per_shard=4)
  with pytest.raises(KeyboardInterrupt):
    prepare.write(_source(stop_after=3), str(stopped), examples_per_shard=4)
  _lease_of_a_killed_prepare(stopped)
  again = prepare.write(_source(), str(stopped), examples_per_shard=4)
  assert again.shards_written == 9 - 3
  assert _files(stopped) == _files(whole)  # The lease released, too.


def test_a_stopped_write_continues_to_the_same_files(tmp_path):
  whole, stopped = tmp_path / 'whole', tmp_path / 'stopped'
  prepare.write(_source(), str(whole), examples_per_shard=4)
  # Stopped in the fourth shard: three are finished.
  with pytest.raises(KeyboardInterrupt):
    prepare.write(_source(stop_after=3), str(stopped), examples_per_shard=4)
  assert not (stopped / 'manifest.json').exists()
  assert (stopped / 'train-00003-of-00007.array_record.partial').exists()
  assert len((stopped / prepare.PROGRESS).read_text().splitlines()) == 1 + 3
  again = prepare.write(_source(), str(stopped), examples_per_shard=4)
  assert again.shards_written == 9 - 3
  assert _files(stopped) == _files(whole)


def test_a_deleted_shard_of_a_finished_directory_is_written_again(written):
  source, dst = written
  before = _files(dst)
  os.remove(dst / 'test-00000-of-00002.array_record')
  again = prepare.write(source, str(dst), examples_per_shard=4)
  assert again.shards_written == 1
  assert _files(dst) == before


def test_refuses_a_directory_that_holds_something_else(tmp_path, written):
  source, dst = written
  before = _files(dst)
  with pytest.raises(UserError, match=r'examples_per_shard 4 there, 5 here.*'
                     r'nothing was deleted'):
    prepare.write(source, str(dst), examples_per_shard=5)
  assert _files(dst) == before
  other = tmp_path / 'other'
  other.mkdir()
  (other / 'notes.txt').write_text('mine')
  with pytest.raises(UserError, match=r'holds other files \(notes.txt\)'):
    prepare.write(source, str(other), examples_per_shard=4)
  assert os.listdir(other) == ['notes.txt']


def test_bad_examples_and_settings_are_one_line_each(tmp_path):
  source = _source()
  source.splits['train'].images[6] = b'GIF89a not a PNG'
  with pytest.raises(UserError, match='memory example 6 is not a JPEG or '
                     'PNG image'):
    prepare.write(source, str(tmp_path / 'a'), examples_per_shard=4)
  source = _source()
  source.splits['test'].labels[2] = 3
  with pytest.raises(UserError, match='memory example 2 has label 3, not one '
                     'of the 3 classes'):
    prepare.write(source, str(tmp_path / 'b'), examples_per_shard=4)
  with pytest.raises(UserError, match="split 'test' of memory has no "
                     'examples'):
    prepare.write(_source((('train', 3), ('test', 0))), str(tmp_path / 'c'))
  with pytest.raises(UserError, match="memory has no split 'val'"):
    prepare.write(_source(), str(tmp_path / 'd'), splits=['val'])
  with pytest.raises(UserError, match='not a local directory.*Prepare into a '
                     'local directory, then copy'):
    prepare.write(_source(), 'gs://bucket/prepared')
  assert not any((tmp_path / n).exists() for n in 'cd')


def test_fashion_mnist_idx_becomes_lossless_pngs(tmp_path, data_dir):
  arrays = prepare.prepare('fashion_mnist_idx', str(tmp_path / 'fm'), 50,
                           data_dir=data_dir).manifest
  assert arrays['class_names'][0] == 'T-shirt/top'
  opened = array_records.open(str(tmp_path / 'fm'))
  images, labels = opened.splits['test'].read(range(16))
  from recipes.data.sources import idx  # pylint: disable=g-import-not-at-top
  expected = idx.load_split(data_dir, 'test')
  np.testing.assert_array_equal(
      np.stack([np.asarray(Image.open(io.BytesIO(i))) for i in images]),
      expected['image'][..., 0])
  np.testing.assert_array_equal(labels, expected['label'])


class ArrayRecordsTestImages(tfds.core.GeneratorBasedBuilder):
  """Six 4x4 RGB images in train, two in test, three classes."""

  VERSION = tfds.core.Version('1.0.0')

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self, features=tfds.features.FeaturesDict({
            'image': tfds.features.Image(shape=(4, 4, 3)),
            'label': tfds.features.ClassLabel(names=['ant', 'bee', 'cow'])}))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {'train': self._generate_examples(6, 0),
            'test': self._generate_examples(2, 100)}

  def _generate_examples(self, n=0, seed=0):
    for i in range(n):
      yield i, {'image': self.pixels(seed + i), 'label': i % 3}

  @staticmethod
  def pixels(seed):
    return np.random.default_rng(seed).integers(0, 256, (4, 4, 3), np.uint8)


@pytest.fixture(scope='module')
def tfds_builds(tmp_path_factory):
  """The tiny dataset prepared by TFDS in both file formats."""
  tfds.disable_progress_bar()
  builds = {}
  for file_format in ('array_record', 'tfrecord'):
    data_dir = str(tmp_path_factory.mktemp(file_format))
    builder = ArrayRecordsTestImages(data_dir=data_dir, file_format=file_format)
    builder.download_and_prepare(file_format=file_format)
    builds[file_format] = data_dir
  return builds


def _decoded(images):
  return np.stack([np.asarray(Image.open(io.BytesIO(i))) for i in images])


def test_open_tfds_reads_an_array_record_build(tfds_builds):
  builder = tfds.builder(TFDS_NAME, data_dir=tfds_builds['array_record'])
  opened = array_records.open_tfds(builder)
  assert opened.class_names == ('ant', 'bee', 'cow')
  assert {k: len(v) for k, v in opened.splits.items()} == {'train': 6,
                                                           'test': 2}
  # TFDS writes the train examples in the order of a hash of their keys.
  images, labels = opened.splits['train'].read(range(6))
  by_label = {}
  for image, label in zip(_decoded(images), labels):
    by_label.setdefault(int(label), []).append(image.tobytes())
  for i in range(6):
    assert ArrayRecordsTestImages.pixels(i).tobytes() in by_label[i % 3]
  test = _decoded(opened.splits['test'].read([0, 1])[0])
  assert sorted(i.tobytes() for i in test) == sorted(
      ArrayRecordsTestImages.pixels(100 + i).tobytes() for i in range(2))
  images, _ = opened.select('test[1:]').read([0])
  np.testing.assert_array_equal(_decoded(images)[0], test[1])
  assert 'array_records_test_images-test.array_record-00000-of-00001' in (
      opened.splits['test'].describe(1))


def test_prepare_copies_a_tfds_build_as_tfds_stored_it(tfds_builds, tmp_path):
  tfrecord = tfds.builder(TFDS_NAME, data_dir=tfds_builds['tfrecord'])
  with pytest.raises(UserError, match='stored as tfrecord, not array_record'):
    array_records.open_tfds(tfrecord)
  prepare.prepare(TFDS_NAME, str(tmp_path / 'copy'), 4,
                  data_dir=tfds_builds['tfrecord'])
  copied = array_records.open(str(tmp_path / 'copy'))
  stored = array_records.open_tfds(tfds.builder(
      TFDS_NAME, data_dir=tfds_builds['array_record']))
  assert copied.class_names == stored.class_names
  for split in ('train', 'test'):
    n = len(stored.splits[split])
    assert copied.splits[split].read(range(n))[0] == (
        stored.splits[split].read(range(n))[0])
  # From the array_record build (by index), the same shards.
  prepare.prepare(TFDS_NAME, str(tmp_path / 'indexed'), 4,
                  data_dir=tfds_builds['array_record'])
  copies = [{k: v for k, v in _files(tmp_path / d).items()
             if k.endswith('.array_record')} for d in ('copy', 'indexed')]
  assert len(copies[0]) == 3 and copies[0] == copies[1]


def test_a_streamed_tfds_array_record_build_equals_its_tfrecord_build(
    tfds_builds):
  """--config.dataset=NAME with data_source=stream: TFDS's array_record
  files are read by index (RandomAccessDataset), in the order of the same
  dataset held in memory from its TFRecord files."""
  streamed = datasets.load(TFDS_NAME, tfds_builds['array_record'],
                           data_source='stream')
  held = datasets.load(TFDS_NAME, tfds_builds['tfrecord'],
                       data_source='memory')
  assert type(streamed).__name__ == 'RandomAccessDataset'
  assert streamed.class_names == ('ant', 'bee', 'cow')
  assert streamed.image_shape == held.image_shape == (4, 4, 3)
  # The two builds store the examples in the same order.
  for a, b in zip(streamed.eval_batches(batch_size=2),
                  held.eval_batches(batch_size=2)):
    np.testing.assert_array_equal(a['image'], b['image'])
    np.testing.assert_array_equal(a['label'], b['label'])


@pytest.mark.parametrize('src', ['/usr/share/datasets/fashion-mnist', '.'])
def test_a_path_as_source_says_which_prefix_it_needs(src):
  with pytest.raises(UserError, match=(
      rf"SRC '{re.escape(src)}' is a path, not a source: give "
      rf'folder:{re.escape(src)} .* fashion_mnist_idx '
      rf'--data_dir={re.escape(src)} for IDX files')):
    prepare.open_source(src, None)

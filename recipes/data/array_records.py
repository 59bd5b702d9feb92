"""ArrayRecord shards of encoded images: a dataset read by index, fast, from
any source that `python -m recipes.data.prepare SRC DST` copied.

An image folder on a network disk or a Hugging Face dataset reads one file
or row at a time; a prepared directory reads any example with one seek into
a few large files, which is what the streamed reader
(recipes/data/random_access.py) needs at ImageNet size.

Each record is a serialized `tf.train.Example` with `image` (bytes_list: the
JPEG or PNG file's bytes) and `label` (int64_list): the layout TFDS writes
for image classification datasets, so a TFDS build in its `array_record`
file format (`open_tfds`) is read by the same parser.

A prepared directory DST holds SPLIT-NNNNN-of-MMMMM.array_record shards and
manifest.json (written last):

    {"format": "recipes.array_records", "version": 1,
     "source": "fashion_mnist_idx", "data_dir": null,
     "examples_per_shard": 10000, "class_names": ["T-shirt/top", ...],
     "splits": {"train": {"num_examples": 60000, "shards": [
         {"file": "train-00000-of-00006.array_record",
          "num_examples": 10000, "bytes": 5123456, "sha256": "..."}, ...]},
       ...}}

Opening checks what is cheap (the manifest, each shard's size); `verify`
reads every byte against the recorded sha256.
"""

import dataclasses
import hashlib
import json
import os
import threading
from typing import Any, Sequence

import numpy as np
from tensorflow_datasets.proto import tf_example_pb2

from recipes.data import tfds_source
from recipes.data.examples import EncodedSource
from recipes.runtime import storage
from recipes.runtime.errors import UserError

FORMAT = 'recipes.array_records'
VERSION = 1
MANIFEST = 'manifest.json'
SUFFIX = '.array_record'
# One record per chunk: reading one example decompresses only that one.
WRITER_OPTIONS = 'group_size:1'
_HASH_CHUNK = 8 << 20


def shard_name(split: str, index: int, count: int) -> str:
  """The file name of shard `index` of `count` of `split`.

  Args:
    split: the split's name.
    index: the shard, from 0.
    count: the split's number of shards.

  Returns:
    'SPLIT-NNNNN-of-MMMMM.array_record'.
  """
  return f'{split}-{index:05d}-of-{count:05d}{SUFFIX}'


def encode(image: bytes, label: int) -> bytes:
  """One record: a serialized tf.train.Example of `image` and `label`.

  Args:
    image: a JPEG or PNG file's bytes.
    label: the class.

  Returns:
    The record; the same bytes for the same arguments on every run
    (deterministic serialization sorts the feature map).
  """
  example = tf_example_pb2.Example()
  features = example.features.feature
  features['image'].bytes_list.value.append(image)
  features['label'].int64_list.value.append(int(label))
  return example.SerializeToString(deterministic=True)


def decode(record: bytes) -> tuple[bytes, int]:
  """The (image bytes, label) of a record written by `encode` or by TFDS.

  Raises:
    ValueError: a record that is not such an Example.
  """
  try:
    features = tf_example_pb2.Example.FromString(record).features.feature
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f'not a tf.train.Example ({type(e).__name__})') from None
  if 'image' not in features or 'label' not in features:
    raise ValueError('not an Example with features image and label (it has '
                     f'{", ".join(sorted(features)) or "none"})')
  images = features['image'].bytes_list.value
  labels = features['label'].int64_list.value
  if len(images) != 1 or len(labels) != 1:
    raise ValueError(f'{len(images)} images and {len(labels)} labels, not '
                     'one of each')
  return images[0], labels[0]


@dataclasses.dataclass(frozen=True)
class _Shard:
  """A whole file, in the form grain and array_record read fastest: with
  its length known, no file is opened until an example is read."""

  filename: str
  examples_in_shard: int
  skip: int = 0

  @property
  def take(self) -> int:
    return self.examples_in_shard - self.skip


class ShardedExamples:
  """One split: the records of ArrayRecord shards, by index (`Examples`).

  Picklable: a worker process opens the files again when it first reads.
  """

  def __init__(self, shards: Sequence[tuple[str, int]], where: str):
    """Reads nothing yet.

    Args:
      shards: (file path, number of records) of each shard, in order.
      where: the dataset, for messages.
    """
    self._shards = tuple(_Shard(os.fspath(f), n) for f, n in shards)
    self._ends = np.cumsum([s.examples_in_shard for s in self._shards])
    self._where = where
    self._remote = any('://' in s.filename for s in self._shards)
    self._source = None
    self._lock = threading.Lock()  # Reading threads open the files once.

  def __len__(self) -> int:
    return int(self._ends[-1]) if len(self._ends) else 0

  def __getstate__(self):
    state = self.__dict__.copy()
    del state['_lock']
    state['_source'] = None  # Readers are opened again where it is read.
    return state

  def __setstate__(self, state):
    self.__dict__.update(state)
    self._lock = threading.Lock()

  def _records(self, indices: Sequence[int]) -> list[bytes]:
    with self._lock:
      if self._source is None:
        import grain  # pylint: disable=g-import-not-at-top

        # Imported on first read: it takes seconds, which `open` and the
        # prepare command need not spend.
        self._source = grain.sources.ArrayRecordDataSource(
            list(self._shards))
    if self._remote:  # Batched reads overlap the requests to a bucket.
      return list(self._source.__getitems__(indices))
    # Local files: one at a time is 4-9x faster for small records (28x28
    # PNGs), about as fast for JPEGs.
    return [self._source[i] for i in indices]

  def read(self, indices: Sequence[int]) -> tuple[list[bytes], np.ndarray]:
    """See `Examples.read`."""
    indices = [int(i) for i in indices]
    for index in indices:
      if not 0 <= index < len(self):
        raise IndexError(f'example {index} of {len(self)}')
    if not indices:
      return [], np.zeros([0], np.int64)
    try:
      records = self._records(indices)
    except Exception as e:  # pylint: disable=broad-except
      # The shard changed since it was opened, or the disk failed.
      raise UserError(
          f'cannot read {self._which(indices)} of {self._where} '
          f'({" ".join(str(e).split())[:200]}); check the disk, or prepare '
          'the data again.') from None
    images, labels = [], np.empty([len(indices)], np.int64)
    for i, (index, record) in enumerate(zip(indices, records)):
      try:
        image, labels[i] = decode(record)
      except ValueError as e:
        raise UserError(f'{self.describe(index)} is damaged ({e}); prepare '
                        'the data again.') from None
      images.append(image)
    return images, labels

  def _which(self, indices: Sequence[int]) -> str:
    if len(indices) == 1:
      return self.describe(indices[0])
    shards = sorted({self._locate(i)[0] for i in indices})
    return 'records of ' + ', '.join(self._shards[s].filename
                                     for s in shards[:3]) + (
                                         ', ...' if len(shards) > 3 else '')

  def _locate(self, index: int) -> tuple[int, int]:
    shard = int(np.searchsorted(self._ends, index, side='right'))
    before = int(self._ends[shard - 1]) if shard else 0
    return shard, index - before

  def describe(self, index: int) -> str:
    """'record R of shard PATH' for example `index`."""
    shard, record = self._locate(index)
    return f'record {record} of shard {self._shards[shard].filename}'


def prepare_command(source: str, dst: str, data_dir: str | None = None
                    ) -> str:
  """The command that (re)writes `dst` from `source`, for messages."""
  flag = f' --data_dir={data_dir}' if data_dir else ''
  return f'python -m recipes.data.prepare {source} {dst}{flag}'


def read_manifest(path: str | os.PathLike) -> dict[str, Any] | None:
  """The manifest of the prepared directory `path`, or None if it has none.

  Args:
    path: the directory.

  Returns:
    The parsed manifest, or None when there is no manifest.json.

  Raises:
    UserError: a manifest that does not parse or is of another format.
  """
  file = storage.path(path) / MANIFEST
  try:
    text = file.read_text()
  except FileNotFoundError:
    return None
  except OSError as e:
    raise UserError(f'cannot read {file} ({e.strerror or e}).') from None
  try:
    manifest = json.loads(text)
    if manifest.get('format') != FORMAT:
      raise ValueError('no "format": "recipes.array_records"')
    if manifest.get('version') != VERSION:
      raise ValueError(f'version {manifest.get("version")!r}, not {VERSION}: '
                       'written by another version of the recipes')
    for info in manifest['splits'].values():
      for shard in info['shards']:
        _ = shard['file'], shard['num_examples'], shard['bytes']
  except (ValueError, KeyError, TypeError, AttributeError) as e:
    raise UserError(f'{file} is not a manifest of prepared ArrayRecord files '
                    f'({type(e).__name__}: {e}); prepare the data again: '
                    'python -m recipes.data.prepare SRC DST.') from None
  return manifest


def _require_manifest(path) -> dict[str, Any]:
  manifest = read_manifest(path)
  if manifest is None:
    raise UserError(f'{path} is not a prepared directory (it has no '
                    f'{MANIFEST}, or the prepare did not finish); make one '
                    'with: python -m recipes.data.prepare SRC DST.')
  return manifest


def open(path: str) -> EncodedSource:  # pylint: disable=redefined-builtin
  """The prepared directory `path` as a dataset; reads no record yet.

  Args:
    path: a directory written by `python -m recipes.data.prepare`.

  Returns:
    Its splits (`ShardedExamples`) and class names.

  Raises:
    UserError: not a prepared directory, or a shard missing or of another
      size than the manifest records.
  """
  root = storage.path(path)
  manifest = _require_manifest(root)
  again = prepare_command(manifest.get('source', 'SRC'), str(root),
                          manifest.get('data_dir'))
  splits = {}
  for split, info in manifest['splits'].items():
    shards = []
    for shard in info['shards']:
      file = root / shard['file']
      try:
        size = file.stat().length
      except (FileNotFoundError, OSError):
        raise UserError(f'shard {file} is missing; run the prepare again to '
                        f'write it: {again}') from None
      if size != shard['bytes']:
        raise UserError(f'shard {file} has {size:,} bytes where the manifest '
                        f'records {shard["bytes"]:,} (truncated or replaced); '
                        f'delete it and run the prepare again: {again}')
      shards.append((str(file), shard['num_examples']))
    splits[split] = ShardedExamples(shards, f'the prepared directory {root}')
  return EncodedSource(f'the prepared directory {root}',
                       tuple(manifest['class_names']), splits)


def sha256(path: str | os.PathLike) -> str:
  """The hex sha256 of the file at `path`."""
  digest = hashlib.sha256()
  with storage.path(path).open('rb') as f:
    while chunk := f.read(_HASH_CHUNK):
      digest.update(chunk)
  return digest.hexdigest()


def verify(path: str) -> tuple[int, int]:
  """Checks every shard of the prepared directory `path` against the
  sha256 its manifest records (reads every byte).

  Args:
    path: a prepared directory.

  Returns:
    (shards, bytes) checked, all of them intact.

  Raises:
    UserError: not a prepared directory, or shards missing or damaged; the
      message names each.
  """
  root = storage.path(path)
  manifest = _require_manifest(root)
  missing, damaged, total = [], [], 0
  for info in manifest['splits'].values():
    for shard in info['shards']:
      file = root / shard['file']
      try:
        if sha256(file) != shard['sha256']:
          damaged.append(shard['file'])
      except FileNotFoundError:
        missing.append(shard['file'])
      except OSError:  # Unreadable: as bad as damaged.
        damaged.append(shard['file'])
      total += shard['bytes']
  if missing or damaged:
    parts = []
    if damaged:
      parts.append(f'damaged (sha256 differs from the manifest): '
                   f'{_names(damaged)}')
    if missing:
      parts.append(f'missing: {_names(missing)}')
    again = prepare_command(manifest.get('source', 'SRC'), str(root),
                            manifest.get('data_dir'))
    raise UserError(f'{root}: shards {"; ".join(parts)}. Delete the damaged '
                    f'ones and run the prepare again to rewrite them: {again}')
  return sum(len(i['shards']) for i in manifest['splits'].values()), total


def _names(files: list[str]) -> str:
  return ', '.join(files[:5]) + (f' and {len(files) - 5} more'
                                 if len(files) > 5 else '')


def open_tfds(builder) -> EncodedSource:
  """A TFDS build in the `array_record` file format, read by index.

  Args:
    builder: a prepared TFDS builder (`tfds.builder(name, data_dir=...,
      file_format='array_record')`) with an `image` and a ClassLabel
      `label` feature.

  Returns:
    Its splits (`ShardedExamples` over TFDS's files) and class names.

  Raises:
    UserError: a build in another file format, or without those features.
  """
  info = builder.info
  if not tfds_source.is_array_record(builder):
    raise UserError(f'TFDS dataset {builder.name!r} in {builder.data_dir} is '
                    f'stored as {tfds_source.file_format(builder)}, not '
                    'array_record; copy it '
                    'with '
                    f'python -m recipes.data.prepare {builder.name} DST, or '
                    "prepare it with file_format='array_record'.")
  features = info.features
  if 'image' not in features or 'label' not in features or not hasattr(
      features['label'], 'names'):
    raise UserError(f'TFDS dataset {builder.name!r} has no image and '
                    'ClassLabel label features.')
  where = f'TFDS dataset {builder.name!r} in {builder.data_dir}'
  splits = {}
  for name, split in info.splits.items():
    shards = [(f.filename, f.examples_in_shard)
              for f in split.file_instructions]
    splits[name] = ShardedExamples(shards, where)
  return EncodedSource(where, tuple(features['label'].names), splits)

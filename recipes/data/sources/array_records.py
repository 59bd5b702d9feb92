"""ArrayRecord shards of encoded images: a dataset read by index, fast, from
any source that `python -m recipes.data.prepare SRC DST` copied.

An image folder on a network disk or a Hugging Face dataset reads one file
or row at a time; a prepared directory reads any example with one seek into
a few large files, which is what the streamed reader
(recipes/data/pipeline/random_access.py) needs at ImageNet size.

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

A directory of token sequences (`prepare SRC DST --tokenizer=...`,
recipes/data/text/token_records.py has its records) has the same layout,
with a "tokens" object (the tokenizer, its sha256, seq_len, the special
ids) in place of "class_names", and the documents each split and shard was
packed from ("num_documents") beside its records ("num_examples").
Labelled text (`--label_column`, recipes/data/text/labelled_records.py)
adds "label_column" and "start_id" to its "tokens", and "class_names".

Opening checks what is cheap: every field of the manifest, that each shard
is a regular file of the directory (named plainly: never `..` or a path),
its size, and its number of records as the ArrayRecord reader counts them
from the file's index. `verify` also reads every byte against the recorded
sha256.
"""

import dataclasses
import hashlib
import json
import os
import re
import stat
import threading
from concurrent import futures
from typing import Any, Sequence

import numpy as np
from tensorflow_datasets.proto import tf_example_pb2

from recipes.data.sources import tfds_source
from recipes.data.sources.examples import EncodedSource
from recipes.runtime import storage
from recipes.runtime.errors import UserError, describe, shorten

FORMAT = 'recipes.array_records'
VERSION = 1
MANIFEST = 'manifest.json'
SUFFIX = '.array_record'
# One record per chunk: reading one example decompresses only that one.
WRITER_OPTIONS = 'group_size:1'
_HASH_CHUNK = 8 << 20
# Counting a shard's records reads its index alone: no read-ahead.
_COUNT_OPTIONS = 'readahead_buffer_size:0,max_parallelism:0'


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


class ShardedRecords:
  """One split: the records of ArrayRecord shards, by index, as bytes.

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

  def records(self, indices: Sequence[int]) -> list[bytes]:
    """The records at `indices`, in that order.

    Raises:
      IndexError: an index out of range.
      UserError: a shard could not be read; the message names it.
    """
    indices = [int(i) for i in indices]
    for index in indices:
      if not 0 <= index < len(self):
        raise IndexError(f'example {index} of {len(self)}')
    if not indices:
      return []
    try:
      return self._records(indices)
    except Exception as e:  # pylint: disable=broad-except
      # The shard changed since it was opened, or the disk failed.
      raise UserError(
          f'cannot read {self._which(indices)} of {self._where} '
          f'({" ".join(str(e).split())[:200]}); check the disk, or prepare '
          'the data again.') from None

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


class ShardedExamples(ShardedRecords):
  """One split of encoded images and labels, by index (`Examples`)."""

  def read(self, indices: Sequence[int]) -> tuple[list[bytes], np.ndarray]:
    """See `Examples.read`."""
    indices = [int(i) for i in indices]
    records = self.records(indices)
    images, labels = [], np.empty([len(indices)], np.int64)
    for i, (index, record) in enumerate(zip(indices, records)):
      try:
        image, labels[i] = decode(record)
      except ValueError as e:
        raise UserError(f'{self.describe(index)} is damaged ({e}); prepare '
                        'the data again.') from None
      images.append(image)
    return images, labels


def prepare_command(manifest: dict[str, Any], dst: str) -> str:
  """The command that (re)writes `dst` as its `manifest` records, for
  messages."""
  flags = ([f' --data_dir={manifest["data_dir"]}'] if manifest['data_dir']
           else [])
  if 'tokens' in manifest:
    tokens = manifest['tokens']
    flags += [f' --tokenizer={tokens["tokenizer"]}',
              f' --seq_len={tokens["seq_len"]}',
              f' --text_column={tokens["text_column"]}']
    if 'label_column' in tokens:
      flags += [f' --label_column={tokens["label_column"]}',
                f' --classes={",".join(manifest["class_names"])}']
  return f'python -m recipes.data.prepare {manifest["source"]} {dst}' + (
      ''.join(flags))


def read_manifest(path: str | os.PathLike) -> dict[str, Any] | None:
  """The manifest of the prepared directory `path`, every field checked, or
  None if it has none.

  The one check of what training's reader (`open`), `verify` and the
  prepare command trust: its types, that the counts add up, and that each
  shard is a plain file name of the directory (no separator, no '..').

  Args:
    path: the directory.

  Returns:
    The parsed manifest, or None when there is no manifest.json.

  Raises:
    UserError: a manifest that is not a regular file, is not UTF-8 JSON, or
      has a field missing, of another type or inconsistent; one line naming
      the file and the field.
  """
  file = storage.path(path) / MANIFEST
  try:
    _size(file)  # Not a pipe or device, which would never end.
    data = file.read_bytes()
  except FileNotFoundError:
    return None
  except OSError as e:
    raise UserError(f'cannot read {file} ({e.strerror or e}).') from None
  try:
    try:
      text = data.decode('utf-8')
    except UnicodeDecodeError as e:
      raise ValueError(f'not text: byte {data[e.start]:#04x} at offset '
                       f'{e.start}') from None
    try:
      manifest = json.loads(text)
    except RecursionError:
      raise ValueError('JSON nested too deeply') from None
    except ValueError as e:
      raise ValueError(f'not JSON: {e}') from None
    _check_fields(manifest)
  except ValueError as e:
    raise UserError(
        f'{file} is not a manifest of prepared ArrayRecord files, or is '
        f'damaged ({e}); prepare the data again into a new directory: '
        'python -m recipes.data.prepare SRC NEW_DIR (nothing was '
        'deleted).') from None
  return manifest


def _check_fields(manifest: Any):
  """Raises ValueError naming the first field that is missing, of another
  type, or that disagrees with the others."""
  if not isinstance(manifest, dict):
    raise ValueError(f'a JSON {type(manifest).__name__}, not an object')
  _field(manifest, 'format', '', lambda v: v == FORMAT, json.dumps(FORMAT))
  _field(manifest, 'version', '', lambda v: v == VERSION,
         f'{VERSION}: written by another version of the recipes')
  _field(manifest, 'source', '', lambda v: isinstance(v, str), 'a string')
  _field(manifest, 'data_dir', '', lambda v: v is None or isinstance(v, str),
         'a string or null')
  _field(manifest, 'examples_per_shard', '', _integer(1),
         'a positive integer')
  tokens = 'tokens' in manifest  # Token sequences, else images.
  if tokens:
    _check_tokens(manifest)
  if not tokens or 'label_column' in manifest['tokens']:
    _field(manifest, 'class_names', '', lambda v: isinstance(v, list) and v
           and all(isinstance(n, str) for n in v), 'a list of names')
  splits = _field(manifest, 'splits', '', lambda v: isinstance(v, dict) and v,
                  'an object of splits')
  files = set()
  for split, info in splits.items():
    where = f'splits.{split}'
    _field(splits, split, 'splits', lambda v: isinstance(v, dict),
           'an object')
    # Records, and for token sequences the documents packed into them.
    keys = ('num_examples', 'num_documents') if tokens else ('num_examples',)
    totals = {key: _field(info, key, where, _integer(1), 'a positive integer')
              for key in keys}
    shards = _field(info, 'shards', where, lambda v: isinstance(v, list) and v,
                    'a list of shards')
    for i, shard in enumerate(shards):
      _field(shards, i, f'{where}.shards', lambda v: isinstance(v, dict),
             'an object')
      at = f'{where}.shards[{i}]'
      name = _field(shard, 'file', at, _plain_name,
                    f'a file name of the directory ending in {SUFFIX}')
      if name in files:
        raise ValueError(f'{at}.file {json.dumps(name)} is listed twice')
      files.add(name)
      for key in keys:
        _field(shard, key, at, _integer(1), 'a positive integer')
      _field(shard, 'bytes', at, _integer(0), 'a size in bytes')
      _field(shard, 'sha256', at, lambda v: isinstance(v, str) and bool(
          re.fullmatch('[0-9a-f]{64}', v)), 'a sha256 in hex')
    for key, total in totals.items():
      held = sum(shard[key] for shard in shards)
      if held != total:
        raise ValueError(f'{where}.{key} is {total}, but its shards hold '
                         f'{held} together')


def _check_tokens(manifest: dict[str, Any]):
  """The "tokens" object of a directory of token sequences."""
  tokens = _field(manifest, 'tokens', '', lambda v: isinstance(v, dict),
                  'an object')
  text = lambda v: isinstance(v, str) and bool(v)  # pylint: disable=unnecessary-lambda-assignment
  _field(tokens, 'tokenizer', 'tokens', text, 'a path')
  _field(tokens, 'tokenizer_sha256', 'tokens', lambda v: v is None or (
      isinstance(v, str) and bool(re.fullmatch('[0-9a-f]{64}', v))),
         'a sha256 in hex, or null for the bytes tokenizer')
  _field(tokens, 'text_column', 'tokens', text, 'a column name')
  _field(tokens, 'seq_len', 'tokens', _integer(1), 'a positive integer')
  _field(tokens, 'vocab_size', 'tokens', _integer(1), 'a positive integer')
  for key in ('eos_id', 'pad_id'):
    _field(tokens, key, 'tokens', _integer(0), 'a token id')
  _field(tokens, 'bos_id', 'tokens', lambda v: v is None or _integer(0)(v),
         'a token id or null')
  if 'label_column' in tokens:  # Labelled text, for a classifier.
    _field(tokens, 'label_column', 'tokens', text, 'a column name')
    _field(tokens, 'start_id', 'tokens', _integer(0), 'a token id')


def _field(parent, key, where: str, ok, expected: str):
  """parent[key] if `ok` accepts it; ValueError naming it otherwise."""
  name = (f'{where}[{key}]' if isinstance(key, int) else
          f'{where}.{key}' if where else key)
  if isinstance(parent, dict) and key not in parent:
    raise ValueError(f'{name} is missing')
  value = parent[key]
  if not ok(value):
    raise ValueError(f'{name} is {shorten(json.dumps(value), 80)}, not '
                     f'{expected}')
  return value


def _integer(least: int):
  """The test of a field: an integer (JSON's true is none) of at least
  `least`."""
  return lambda v: (isinstance(v, int) and not isinstance(v, bool) and
                    v >= least)


def _plain_name(name) -> bool:
  """A file directly in the directory: never one elsewhere (`..`, `/etc`)."""
  return (isinstance(name, str) and name.endswith(SUFFIX) and
          name != SUFFIX and not any(c in name for c in '/\\\0') and
          name not in ('.', '..'))


def _size(file) -> int:
  """The size of `file`, which must be a regular file (a local one is not
  followed through a link).

  Raises:
    FileNotFoundError: there is none.
    UserError: it is a directory, link, pipe or device: nothing reads it.
  """
  if '://' in os.fspath(file):  # Objects in a bucket are files.
    return file.stat().length
  status = os.lstat(file)
  if not stat.S_ISREG(status.st_mode):
    kind = ('a directory' if stat.S_ISDIR(status.st_mode) else
            'a link' if stat.S_ISLNK(status.st_mode) else
            'a pipe or device')
    raise UserError(f'{file} is {kind}, not a regular file: a prepared '
                    "directory's shards and manifest are files of its own. "
                    'Prepare the data again into a new directory (nothing '
                    'was read or deleted).')
  return status.st_size


def _require_manifest(path) -> dict[str, Any]:
  manifest = read_manifest(path)
  if manifest is None:
    raise UserError(f'{path} is not a prepared directory (it has no '
                    f'{MANIFEST}, or the prepare did not finish); make one '
                    'with: python -m recipes.data.prepare SRC DST.')
  return manifest


def _shards(root, manifest: dict[str, Any]
            ) -> tuple[list[tuple[dict[str, Any], Any, int]], list[str]]:
  """The manifest's shards that are there (record, path, size), and the
  names of those missing; anything but a regular file is refused before a
  byte of any is read."""
  present, missing = [], []
  for info in manifest['splits'].values():
    for shard in info['shards']:
      file = root / shard['file']
      try:
        present.append((shard, file, _size(file)))
      except FileNotFoundError:
        missing.append(shard['file'])
      except OSError as e:
        raise UserError(f'cannot read shard {file} ({e.strerror or e}); '
                        'check its permissions and the disk.') from None
  return present, missing


def _check_counts(present: Sequence[tuple[dict[str, Any], Any, int]],
                  advice: str):
  """Checks the records of each shard against its manifest's num_examples,
  as the ArrayRecord reader counts them (from the file's index: cheap).

  Raises:
    UserError: the first shard that differs, or whose index cannot be read;
      `advice` ends the line.
  """
  # pylint: disable-next=g-import-not-at-top
  from array_record.python.array_record_module import ArrayRecordReader

  def count(file) -> int | str:
    """The number of records, or why the reader cannot tell."""
    try:
      reader = ArrayRecordReader(os.fspath(file), _COUNT_OPTIONS)
      try:
        return reader.num_records() if reader.ok() else 'not ArrayRecord'
      finally:
        reader.close()
    except Exception as e:  # pylint: disable=broad-except
      return describe(e)  # Its index or footer is damaged.

  files = [file for _, file, _ in present]
  with futures.ThreadPoolExecutor(min(32, len(files) or 1)) as pool:
    counts = list(pool.map(count, files))  # One request each on a bucket.
  for (shard, file, _), found in zip(present, counts):
    if isinstance(found, str):
      raise UserError(f'shard {file} cannot be read ({found}); {advice}')
    if found != shard['num_examples']:
      raise UserError(f'shard {file} holds {found:,} records where the '
                      f'manifest records {shard["num_examples"]:,}; {advice}')


def open_prepared(path: str
                  ) -> tuple[dict[str, Any], dict[str, list[tuple[str, int]]]]:
  """The manifest of the prepared directory `path` and each split's shards,
  checked as cheaply as they can be; reads no record.

  Args:
    path: a directory written by `python -m recipes.data.prepare`.

  Returns:
    The manifest, and (file path, number of records) of each shard of each
    split, in order.

  Raises:
    UserError: not a prepared directory, a damaged manifest, or a shard
      missing, not a regular file, or of another size or number of records
      than the manifest records.
  """
  root = storage.path(path)
  manifest = _require_manifest(root)
  again = prepare_command(manifest, str(root))
  present, missing = _shards(root, manifest)
  if missing:
    raise UserError(f'shard {root / missing[0]} is missing; run the prepare '
                    f'again to write it: {again}')
  for shard, file, size in present:
    if size != shard['bytes']:
      raise UserError(f'shard {file} has {size:,} bytes where the manifest '
                      f'records {shard["bytes"]:,} (truncated or replaced); '
                      f'delete it and run the prepare again: {again}')
  _check_counts(present, 'find what is damaged with: python -m '
                f'recipes.data.prepare --verify {root}')
  return manifest, {
      split: [(str(root / s['file']), s['num_examples'])
              for s in info['shards']]
      for split, info in manifest['splits'].items()}


def open(path: str) -> EncodedSource:  # pylint: disable=redefined-builtin
  """The prepared directory of images `path` as a dataset; reads no example
  yet.

  Args:
    path: a directory written by `python -m recipes.data.prepare`.

  Returns:
    Its splits (`ShardedExamples`) and class names.

  Raises:
    UserError: as for `open_prepared`, or a directory of token sequences.
  """
  manifest, shards = open_prepared(path)
  where = f'the prepared directory {storage.path(path)}'
  if 'tokens' in manifest:
    raise UserError(f'{where} holds token sequences (prepared with '
                    '--tokenizer), not images; give a directory prepared '
                    'from images.')
  return EncodedSource(where, tuple(manifest['class_names']), {
      split: ShardedExamples(files, where) for split, files in shards.items()})


def sha256(path: str | os.PathLike) -> str:
  """The hex sha256 of the file at `path`."""
  digest = hashlib.sha256()
  with storage.path(path).open('rb') as f:
    while chunk := f.read(_HASH_CHUNK):
      digest.update(chunk)
  return digest.hexdigest()


def verify(path: str) -> tuple[int, int]:
  """Checks every shard of the prepared directory `path` against the
  sha256 its manifest records (reads every byte), then its number of
  records.

  Args:
    path: a prepared directory.

  Returns:
    (shards, bytes) checked, all of them intact.

  Raises:
    UserError: not a prepared directory, a damaged manifest, or shards
      missing, not regular files or damaged; the message names each.
  """
  root = storage.path(path)
  manifest = _require_manifest(root)
  present, missing = _shards(root, manifest)  # Before reading any.
  intact, damaged = [], []
  for shard, file, size in present:
    try:
      same = size == shard['bytes'] and sha256(file) == shard['sha256']
    except OSError:  # Unreadable: as bad as damaged.
      same = False
    if same:
      intact.append((shard, file, size))
    else:
      damaged.append(shard['file'])
  if missing or damaged:
    parts = []
    if damaged:
      parts.append(f'damaged (sha256 differs from the manifest): '
                   f'{_names(damaged)}')
    if missing:
      parts.append(f'missing: {_names(missing)}')
    again = prepare_command(manifest, str(root))
    raise UserError(f'{root}: shards {"; ".join(parts)}. Delete the damaged '
                    f'ones and run the prepare again to rewrite them: {again}')
  _check_counts(intact, f'it is as prepared (its sha256 matches), so '
                f'{root / MANIFEST} is wrong: prepare the data again into a '
                'new directory (nothing was deleted).')
  return len(intact), sum(shard['bytes'] for shard, _, _ in intact)


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

"""Copies a dataset into ArrayRecord shards that training reads by index.

    python -m recipes.data.prepare SRC DST [--examples_per_shard=N]
        [--splits=train,test] [--data_dir=DIR] [--verify]
    python -m recipes.data.prepare SRC DST --tokenizer=FILE --seq_len=N
        [--text_column=C] [--examples_per_shard=N] [--splits=...]
        [--label_column=L [--classes=A,B,...]]
    python -m recipes.data.prepare --verify DST

SRC is what --config.dataset takes: folder:PATH, hf:NAME, records:PATH, a
TFDS name, or fashion_mnist_idx. The encoded images are copied as they are
(IDX images become lossless PNGs), so a streamed run reads the same pixels
with one seek per example instead of one file or request each
(recipes/data/sources/array_records.py has the format). Train on the result with
--config.dataset=records:DST.

With --tokenizer, SRC is text (jsonl:PATH, parquet:PATH or hf:NAME, its
column --text_column, 'text' by default; or fortune:PATH, the files of the
fortunes package), tokenized with the model's own tokenizer (or
--tokenizer=bytes, UTF-8 bytes) and packed into sequences of --seq_len tokens
(recipes/data/text/token_records.py has the format; --examples_per_shard
counts documents); a language model trains on the result with
--config.dataset=tokens:DST. With --label_column as well, each document is
one record with its class, for a text classifier
(recipes/data/text/labelled_records.py; --classes keeps only those
classes). Everything else is the same for both: the
shards, the manifest, the checksums, continuing a stopped run, --verify.

A long prepare may be stopped (Ctrl-C, a lost machine): run the same command
again and it continues from the first unfinished shard, giving the same
files, byte for byte, as a run never stopped. Each shard is written under a
temporary name and renamed when complete; DST/prepare-progress.jsonl records
the finished ones; manifest.json is written last. A second prepare started
on the same DST meanwhile stops at once, naming the first: the running one
holds DST/prepare.lease, as a training run holds its workdir's
(recipes/runtime/lease.py), and a killed one's is taken over. Mistakes end
with one line and exit status 1 (2 for a usage error).
"""

import argparse
import dataclasses
import json
import logging
import math
import os
import sys
import time
from typing import Any, Iterator, Protocol, Sequence

import numpy as np

from recipes.data.sources import array_records, idx
from recipes.data.sources.examples import EncodedSource, Examples
from recipes.data.text import token_records
from recipes.runtime import lease, library_noise, progress, startup, storage
from recipes.runtime.errors import UserError, describe, shorten

PROGRESS = 'prepare-progress.jsonl'
# Held while a prepare writes DST: a second one on the same DST stops.
LEASE = lease.Holder('prepare.lease', 'prepare', 'DST', 'give another DST')
PARTIAL = '.partial'  # A shard being written: `NAME.array_record.partial`.
DEFAULT_EXAMPLES_PER_SHARD = 1000
_READ_CHUNK = 256  # Examples read from the source at once.
# Fashion-MNIST's classes, in label order (as TFDS names them).
_SIGNATURES = ((b'\xff\xd8\xff', 'JPEG'), (b'\x89PNG\r\n\x1a\n', 'PNG'))


class _Parser(argparse.ArgumentParser):

  def error(self, message):
    self.exit(2, f'error: {message}; see python -m recipes.data.prepare '
              '--help.\n')


def _parser() -> argparse.ArgumentParser:
  parser = _Parser(
      prog='python -m recipes.data.prepare',
      usage='%(prog)s SRC DST [--examples_per_shard=N] [--splits=train,test] '
      '[--data_dir=DIR] [--verify]\n       %(prog)s --verify DST',
      description='Copies the encoded images and labels of SRC into '
      'ArrayRecord shards in the local directory DST, for '
      '--config.dataset=records:DST. A stopped run continues where it '
      'stopped when run again.')
  parser.add_argument('paths', nargs='+', metavar='SRC DST',
                      help='SRC: folder:PATH, hf:NAME, records:PATH, a TFDS '
                      'name or fashion_mnist_idx (as --config.dataset); '
                      'DST: a new or empty local directory')
  parser.add_argument('--examples_per_shard', type=int,
                      default=DEFAULT_EXAMPLES_PER_SHARD,
                      help='examples in each shard but the last of a split '
                      f'(default {DEFAULT_EXAMPLES_PER_SHARD})')
  parser.add_argument('--splits', default='',
                      help='comma-separated whole splits to copy (default: '
                      'all of them)')
  parser.add_argument('--data_dir', default='',
                      help='where a TFDS dataset or the IDX files are (as '
                      '--config.data_dir)')
  parser.add_argument('--verify', action='store_true',
                      help='check every shard of DST against the sha256 in '
                      'its manifest (after preparing, when SRC is given)')
  parser.add_argument('--tokenizer', default='',
                      help="text: the model's tokenizer.json, SentencePiece "
                      '.model file, or folder holding one; or bytes (UTF-8 '
                      'bytes, 257 ids)')
  parser.add_argument('--seq_len', type=int, default=None,
                      help='text: tokens in each packed sequence (with '
                      '--tokenizer)')
  parser.add_argument('--text_column', default='',
                      help="text: the column of text (default 'text')")
  parser.add_argument('--label_column', default='',
                      help='text for a classifier: the column of labels '
                      '(collection for fortune:)')
  parser.add_argument('--classes', default='',
                      help='with --label_column: the comma-separated classes '
                      'kept (default: all)')
  return parser


def main(argv: Sequence[str]) -> int:
  args = _parser().parse_args(argv)
  # TFDS's notices (e.g. of its directories) are not ours to show; our lines
  # say what matters. The level is put back for a caller in the same process.
  absl = logging.getLogger('absl')
  level = absl.level
  absl.setLevel(logging.ERROR)
  try:
    return _run(args)
  finally:
    absl.setLevel(level)


def _run(args: argparse.Namespace) -> int:
  if len(args.paths) > 2 or (len(args.paths) == 1 and not args.verify):
    _parser().error('give SRC and DST (or --verify DST)')
  try:
    if len(args.paths) == 2:
      src, dst = args.paths
      written = prepare(
          src, dst, args.examples_per_shard,
          [s.strip() for s in args.splits.split(',') if s.strip()],
          args.data_dir or None, Text(args.tokenizer, args.seq_len,
                                      args.text_column, args.label_column,
                                      args.classes))
      print(_report(src, dst, written))
    if args.verify:
      dst = args.paths[-1]
      shards, size = array_records.verify(dst)
      print(f'{dst}: OK, {shards} shards ({_size(size)}) match the sha256 of '
            'their manifest.')
  except UserError as e:
    return _fail(e)
  except KeyboardInterrupt:
    return _fail('stopped; run the same command again to continue from the '
                 'first unfinished shard.', status=130)
  return 0


def _fail(message, status: int = 1) -> int:
  print(f'error: {shorten(" ".join(str(message).split()))}', file=sys.stderr)
  return status


@dataclasses.dataclass(frozen=True)
class _Shard:
  split: str
  file: str
  start: int  # The source's examples [start, stop) of the split.
  stop: int


@dataclasses.dataclass(frozen=True)
class Written:
  """What a prepare did."""

  manifest: dict[str, Any]  # As written to DST/manifest.json.
  shards_written: int  # By this run; the others were there already.
  examples_written: int  # Examples (documents, for text) read to write them.
  seconds: float  # Spent writing them.

  @property
  def examples_per_second(self) -> float:
    return self.examples_written / self.seconds if self.seconds else 0.0


@dataclasses.dataclass(frozen=True)
class Text:
  """The flags that make a prepare one of text: none given, it is one of
  images."""

  tokenizer: str = ''  # A tokenizer file or folder.
  seq_len: int | None = None
  column: str = ''  # '': 'text'.
  label_column: str = ''  # Labelled text, for a classifier: its labels.
  classes: str = ''  # Labelled text: the classes kept, comma-separated.

  def __bool__(self) -> bool:
    return bool(self.tokenizer) or self.seq_len is not None or bool(
        self.column or self.label_column or self.classes)


class Contents(Protocol):
  """What a prepare writes: a source's items (images, documents) turned
  into records, shard by shard."""

  name: str  # The source, for messages.
  unit: str  # What the items are called: 'examples', 'documents'.
  sizes: dict[str, int]  # Items in each split.
  fields: dict[str, Any]  # Manifest fields that say what the records hold.

  def records(self, split: str, start: int, stop: int
              ) -> Iterator[tuple[int, list[bytes]]]:
    """The records of items [start, stop) of `split`, in order: yields
    (items read, records) as it goes.

    Raises:
      UserError: an item that cannot be read or written; names it.
    """
    ...


def prepare(src: str, dst: str, examples_per_shard: int = (
    DEFAULT_EXAMPLES_PER_SHARD), splits: Sequence[str] = (),
            data_dir: str | None = None, text: Text = Text()) -> Written:
  """Writes (or finishes writing) the prepared directory `dst` from `src`.

  Args:
    src: folder:PATH, hf:NAME, records:PATH, a TFDS name or
      fashion_mnist_idx; with `text`, jsonl:PATH, parquet:PATH, hf:NAME or
      fortune:PATH.
    dst: a new or empty local directory, or one that an earlier prepare of
      the same `src` and settings left (finished or not).
    examples_per_shard: examples (documents, for text) in each shard but
      the last of a split.
    splits: the whole splits to copy; empty: all of the source's.
    data_dir: where a TFDS dataset or the IDX files are; None: the default.
    text: the tokenizer and sequence length that make `src` text.

  Returns:
    The manifest and what this run wrote.

  Raises:
    UserError: a bad SRC, DST or setting, an empty split, an example that
      is not a JPEG or PNG image or has a label out of range, a missing or
      damaged tokenizer, text that is not UTF-8 or a text column without
      text, or a failed write; nothing is written before the source and
      settings are checked, and nothing of what DST held before is deleted.
  """
  _check_settings(examples_per_shard, splits)
  if text:
    _check_text(src, text)
  _local_destination(dst)  # Its mistakes before the source is read.
  if text:
    contents = _text_contents(src, text)
    return write(contents, dst, examples_per_shard, splits)
  if _text_prefix(src) in TEXT_ONLY:
    raise UserError(f'SRC {src} is text: give the tokenizer and sequence '
                    'length, --tokenizer=FILE --seq_len=N.')
  data_dir = os.path.abspath(os.path.expanduser(data_dir)) if (
      data_dir and '://' not in data_dir) else data_dir
  source, key = open_source(src, data_dir, splits)
  return write(source, dst, examples_per_shard, splits, key, data_dir)


def write(source: EncodedSource | Contents, dst: str,
          examples_per_shard: int = DEFAULT_EXAMPLES_PER_SHARD,
          splits: Sequence[str] = (), key: str | None = None,
          data_dir: str | None = None) -> Written:
  """Writes (or finishes writing) `source` as the prepared directory `dst`.

  Args:
    source: the dataset of images, or the contents to write (token
      sequences); its items are read in order.
    dst: as for `prepare`.
    examples_per_shard: examples in each shard but the last of a split.
    splits: the whole splits to copy; empty: all of the source's.
    key: the SRC that names `source` (recorded in the manifest; the same
      key and settings continue an unfinished DST); None: `source.name`.
    data_dir: recorded in the manifest, for `key`.

  Returns:
    The manifest and what this run wrote.

  Raises:
    UserError: as for `prepare`.
  """
  _check_settings(examples_per_shard, splits)
  root = _local_destination(dst)
  contents = _Images(source) if isinstance(source, EncodedSource) else source
  names = list(dict.fromkeys(splits)) or list(contents.sizes)
  settings = _settings(contents, key or contents.name, data_dir,
                       examples_per_shard, names)
  try:
    root.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise UserError(f'cannot create DST {dst} ({e.strerror or e}); choose a '
                    'writable directory.') from None
  with lease.held_here(root, LEASE):  # One prepare at a time in DST.
    plan = _plan(settings)
    finished, complete = _claim(root, settings)
    for name in [s.file for s in plan] + [array_records.MANIFEST]:
      _remove(root / (name + PARTIAL))  # Left by a stopped run.

    todo = [s for s in plan
            if not _intact(root, s, finished.get(s.file), settings)]
    began = time.monotonic()
    # Examples written, their rate and the ETA on stderr.
    counter = progress.Progress(
        sum(s.stop - s.start for s in todo), label=contents.unit,
        unit=contents.unit, write=lambda line: print(line, file=sys.stderr,
                                                     flush=True))
    for shard in todo:
      record = _write_shard(root, shard, contents, counter)
      before = finished.get(shard.file)
      if complete and before and before['sha256'] != record['sha256']:
        _remove(root / shard.file)
        raise UserError(
            f'{settings["source"]} now gives other examples for {shard.file} '
            f'than when {dst} was prepared (the source changed); prepare it '
            'into a new directory.')
      finished[shard.file] = record
      if not complete:
        _append(root / PROGRESS, record)
    manifest = _manifest(settings, plan, finished)
    if not complete:
      _write_json(root / array_records.MANIFEST, manifest)
      _remove(root / PROGRESS)
    _fsync_dir(root)
    return Written(manifest, len(todo), counter.done,
                   time.monotonic() - began)


def _check_settings(examples_per_shard: int, splits: Sequence[str]):
  if examples_per_shard < 1:
    raise UserError(f'--examples_per_shard={examples_per_shard} must be at '
                    'least 1.')
  for name in splits:
    if not name or any(c in name for c in '[]+:/\\ '):
      raise UserError(f'--splits takes whole split names, e.g. train,test; '
                      f'not {name!r} (slice when training instead, e.g. '
                      "--config.train_split='train[:90%]').")


def _check_text(src: str, text: Text):
  """The text flags, before anything is read."""
  if not text.tokenizer or text.seq_len is None:
    raise UserError('text needs both --tokenizer=FILE and --seq_len=N (and '
                    'SRC jsonl:PATH, parquet:PATH, hf:NAME or '
                    'fortune:PATH).')
  token_records.check_seq_len(text.seq_len)
  if text.classes and not text.label_column:
    raise UserError('--classes picks classes of labelled text: name the '
                    'label column too, --label_column=C.')
  if not _text_prefix(src):
    raise UserError(f'SRC {src!r} is not text: with --tokenizer, give '
                    'jsonl:PATH, parquet:PATH, hf:NAME_OR_PATH or '
                    'fortune:PATH.')


# Name prefixes of text sources ('jsonl:/data/web.jsonl'); hf: is text
# with --tokenizer, else images.
TEXT_ONLY = ('jsonl', 'parquet', 'fortune')
TEXT = (*TEXT_ONLY, 'hf')


def _text_prefix(src: str) -> str | None:
  prefix, colon, where = src.partition(':')
  return prefix if colon and where and prefix in TEXT else None


def _text_contents(src: str, text: Text) -> Contents:
  """The packed sequences of the text source `src` (with a label column,
  its labelled documents): the tokenizer loaded and the whole source
  checked (UTF-8, a text column with text, labels)."""
  # pylint: disable=g-import-not-at-top
  from recipes.data.sources import (fortune_source, hf_source,
                                    jsonl_source, labelled_texts,
                                    parquet_source)
  from recipes.data.text import labelled_records
  from recipes.data.text import tokenizer as tokenizer_lib
  # pylint: enable=g-import-not-at-top
  tokenizer = tokenizer_lib.load(text.tokenizer)
  prefix, _, where = src.partition(':')
  opener = {'jsonl': jsonl_source.open, 'parquet': parquet_source.open,
            'hf': hf_source.open_text, 'fortune': fortune_source.open}[prefix]
  if text.label_column:
    source = labelled_texts.labelled(
        opener(where, text.column, text.label_column),
        labelled_texts.parse_classes(text.classes))
    return labelled_records.Labeller(source, tokenizer, text.seq_len)
  return token_records.Packer(opener(where, text.column), tokenizer,
                              text.seq_len)


def _local_destination(dst: str):
  """DST as a local path (not created yet)."""
  path = storage.path(dst)  # UserError for a mistyped URL.
  if '://' in os.fspath(dst):
    raise UserError(f'DST {dst} is not a local directory: ArrayRecord shards '
                    'are written as local files. Prepare into a local '
                    'directory, then copy it (e.g. gcloud storage cp -r DIR '
                    f'{dst}).')
  if path.exists() and not path.is_dir():
    raise UserError(f'DST {dst} is a file; give a new or empty directory.')
  return path


def open_source(src: str, data_dir: str | None, splits: Sequence[str] = ()
                ) -> tuple[EncodedSource, str]:
  """The dataset `src` names, as encoded images by index.

  Args:
    src: folder:PATH, hf:NAME, records:PATH, fashion_mnist_idx or a TFDS
      name.
    data_dir: where a TFDS dataset or the IDX files are; None: the default.
    splits: the splits that will be read (IDX files of others are not
      read); empty: all.

  Returns:
    The source and `src` as the manifest records it (a local folder's path
    made absolute).

  Raises:
    UserError: an unknown or unreadable source.
  """
  library_noise.import_tensorflow()  # Before the sources load it.
  from recipes.data import datasets  # pylint: disable=g-import-not-at-top
  prefix = datasets.encoded_prefix(src)
  if prefix:
    where = src.partition(':')[2]
    if prefix != 'hf' and where and '://' not in where:
      src = f'{prefix}:{os.path.abspath(os.path.expanduser(where))}'
    return datasets.open_encoded(src), src
  if src == 'fashion_mnist_idx':
    return idx.encoded(data_dir, splits), src
  return _tfds_source(src, data_dir), src


def _tfds_source(name: str, data_dir: str | None) -> EncodedSource:
  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds

  from recipes.data.sources import tfds_source

  # pylint: enable=g-import-not-at-top
  if os.sep in name or os.path.exists(name):  # Not a TFDS name: a path.
    raise UserError(
        f'SRC {name!r} is a path, not a source: give folder:{name} for a '
        'folder of images, records:PATH for prepared ArrayRecord files, or '
        f'fashion_mnist_idx --data_dir={name} for IDX files.')
  try:
    builder = tfds_source.prepared_builder(name, data_dir)
  except tfds.core.registered.DatasetNotFoundError:
    raise UserError(
        f'unknown SRC {name!r}: give folder:PATH, hf:NAME, records:PATH, '
        'fashion_mnist_idx or a TFDS dataset name.') from None
  if tfds_source.is_array_record(builder):
    return array_records.open_tfds(builder)
  return tfds_source.encoded(builder)


class _Images:
  """The records of a dataset of encoded images (`Contents`): each example
  a tf.train.Example, its image checked to be a JPEG or PNG and its label
  a class."""

  unit = 'examples'

  def __init__(self, source: EncodedSource):
    self.name, self._source = source.name, source
    self.sizes = {name: len(examples)
                  for name, examples in source.splits.items()}
    self.fields = {'class_names': list(source.class_names)}

  def records(self, split: str, start: int, stop: int
              ) -> Iterator[tuple[int, list[bytes]]]:
    examples = self._source.splits[split]
    for first in range(start, stop, _READ_CHUNK):
      indices = list(range(first, min(stop, first + _READ_CHUNK)))
      images, labels = examples.read(indices)
      yield len(indices), [
          array_records.encode(image, label) for image, label in zip(
              _checked(images, labels, indices, examples, self._source),
              labels)]


def _settings(contents: Contents, key: str, data_dir: str | None,
              examples_per_shard: int, names: Sequence[str]) -> dict[str, Any]:
  """What makes a prepare the same one again: it matches a DST's manifest
  or progress file only if every field is equal."""
  for name in names:
    if name not in contents.sizes:
      raise UserError(f'{contents.name} has no split {name!r} (it has '
                      f'{", ".join(contents.sizes) or "none"}).')
  sizes = {name: contents.sizes[name] for name in names}
  if not sizes:
    raise UserError(f'{contents.name} has no splits.')
  for name, size in sizes.items():
    if not size:
      raise UserError(f'split {name!r} of {contents.name} has no '
                      f'{contents.unit}; leave it out with --splits.')
  return {'source': key, 'data_dir': data_dir,
          'examples_per_shard': examples_per_shard, **contents.fields,
          'splits': sizes}


def _items(fields: dict[str, Any]) -> str:
  """The manifest's count of a split's or shard's source items: documents
  for token sequences (each shard's records are its packed sequences), else
  the examples, one record each. `fields`: settings, a manifest, or
  `Contents.fields`."""
  return 'num_documents' if 'tokens' in fields else 'num_examples'


def _plan(settings: dict[str, Any]) -> list[_Shard]:
  per_shard = settings['examples_per_shard']
  plan = []
  for split, size in settings['splits'].items():
    count = math.ceil(size / per_shard)
    for k in range(count):
      plan.append(_Shard(split, array_records.shard_name(split, k, count),
                         k * per_shard, min(size, (k + 1) * per_shard)))
  return plan


def _settings_of(manifest: dict[str, Any], keys: Sequence[str]
                 ) -> dict[str, Any]:
  """The settings that `manifest` was written with, as `_settings` gives
  them, for the keys of those of this run."""
  items = _items(manifest)
  return {**{key: manifest.get(key) for key in keys if key != 'splits'},
          'splits': {name: info.get(items)
                     for name, info in manifest.get('splits', {}).items()}}


def _claim(root, settings: dict[str, Any]
           ) -> tuple[dict[str, dict[str, Any]], bool]:
  """The shards already finished in DST, and whether its manifest is
  written; claims an empty DST by writing the progress file.

  Raises:
    UserError: DST holds something other than a prepare with `settings`.
  """
  manifest = array_records.read_manifest(root)
  if manifest is not None:
    _check_same(root, 'a prepared dataset',
                _settings_of(manifest, list(settings)), settings)
    return {shard['file']: shard for info in manifest['splits'].values()
            for shard in info['shards']}, True
  progress = root / PROGRESS
  if progress.exists():
    lines = progress.read_text().splitlines()
    try:
      header = json.loads(lines[0])['progress_of']
    except (IndexError, ValueError, KeyError, TypeError):
      raise UserError(f'{progress} is damaged; delete {root} to start over '
                      '(nothing was deleted).') from None
    _check_same(root, 'an unfinished prepare', header, settings)
    finished = {}
    for line in lines[1:]:
      try:
        record = json.loads(line)
        finished[record['file']] = record
      except (ValueError, KeyError, TypeError):
        pass  # A line cut short by a stop: that shard is written again.
    return finished, False
  # Not the lease, nor the progress file of a stop while claiming.
  others = sorted(p.name for p in root.iterdir()
                  if p.name not in (LEASE.file_name, PROGRESS + PARTIAL))
  if others:
    raise UserError(
        f'DST {root} holds other files ({_few(others)}), not a prepare; give '
        'a new or empty directory (nothing was deleted).')
  _write_json(progress, {'format': array_records.FORMAT,
                         'version': array_records.VERSION,
                         'progress_of': settings}, jsonl=True)
  return {}, False


def _check_same(root, what: str, there: dict[str, Any],
                here: dict[str, Any]):
  if there == here:
    return
  differences = []
  for key in here:
    mine, theirs = here[key], there.get(key)
    if isinstance(mine, dict) and isinstance(theirs, dict):  # "tokens"
      differences += [f'{key}.{k} {_short(theirs.get(k))} there, '
                      f'{_short(mine.get(k))} here'
                      for k in dict.fromkeys([*mine, *theirs])
                      if theirs.get(k) != mine.get(k)]
    elif theirs != mine:
      differences.append(f'{key} {_short(theirs)} there, {_short(mine)} here')
  raise UserError(
      f'DST {root} holds {what} of {there.get("source")} that differs from '
      f'this one ({"; ".join(differences)}); run with the same settings to '
      'continue it, or give another DST (nothing was deleted).')


def _short(value) -> str:
  text = json.dumps(value)
  return text if len(text) <= 60 else text[:57] + '...'


def _few(names: list[str]) -> str:
  return ', '.join(names[:3]) + (f' and {len(names) - 3} more'
                                 if len(names) > 3 else '')


def _intact(root, shard: _Shard, record: dict[str, Any] | None,
            settings: dict[str, Any]) -> bool:
  """Whether a finished shard is there, whole (by its size)."""
  if not record or record.get(_items(settings)) != shard.stop - shard.start:
    return False
  try:
    return (root / shard.file).stat().length == record['bytes']
  except OSError:
    return False


def _write_shard(root, shard: _Shard, contents: Contents,
                 counter: progress.Progress) -> dict[str, Any]:
  """Writes one shard under its temporary name, then renames it.

  Returns:
    Its manifest record.
  """
  # pylint: disable-next=g-import-not-at-top
  from array_record.python.array_record_module import ArrayRecordWriter
  final = os.fspath(root / shard.file)
  partial = final + PARTIAL
  try:
    writer = ArrayRecordWriter(partial, array_records.WRITER_OPTIONS)
    if not writer.ok():  # It does not raise for a file it cannot create.
      raise OSError(f'cannot create {partial}')
  except Exception as e:  # pylint: disable=broad-except
    raise _write_failed(root, e) from None
  closed, written = False, 0
  try:
    for read, records in contents.records(shard.split, shard.start,
                                          shard.stop):
      try:
        for record in records:
          writer.write(record)
        if not writer.ok():
          raise OSError(f'the ArrayRecord writer of {partial} failed')
      except Exception as e:  # pylint: disable=broad-except
        raise _write_failed(root, e) from None
      written += len(records)
      counter.update(counter.done + read)
    try:
      closed = True
      writer.close()  # Writes what is buffered, and the index.
    except Exception as e:  # pylint: disable=broad-except
      raise _write_failed(root, e) from None
  finally:
    if not closed:
      writer.close()
  try:
    # The bytes on disk before the name says the shard is complete.
    descriptor = os.open(partial, os.O_RDONLY)
    try:
      os.fsync(descriptor)
    finally:
      os.close(descriptor)
    record = {'file': shard.file, 'num_examples': written,
              'bytes': os.path.getsize(partial),
              'sha256': array_records.sha256(partial)}
    # The source's items: for text the documents packed into the records;
    # for images the examples again, one record each.
    record[_items(contents.fields)] = shard.stop - shard.start
    os.replace(partial, final)
  except OSError as e:
    raise _write_failed(root, e) from None
  return record


def _checked(images: list[bytes], labels: np.ndarray, indices: Sequence[int],
             examples: Examples, source: EncodedSource) -> list[bytes]:
  """`images`, each checked (cheaply: its first bytes) to be a JPEG or PNG,
  and its label to be a class."""
  for image, label, index in zip(images, labels, indices):
    if not any(image.startswith(magic) for magic, _ in _SIGNATURES):
      raise UserError(
          f'{examples.describe(index)} is not a JPEG or PNG image (it starts '
          f'with {bytes(image[:8])!r}); fix or remove it, then run the same '
          'command again.')
    if not 0 <= label < source.num_classes:
      raise UserError(f'{examples.describe(index)} has label {label}, not one '
                      f'of the {source.num_classes} classes.')
  return images


def _write_failed(root, error: BaseException) -> UserError:
  return UserError(f'writing to {root} failed ({describe(error)}); make room '
                   'or fix the disk, then run the same command again to '
                   'continue.')


def _append(progress, record: dict[str, Any]):
  # One write of a whole line: a stop leaves whole lines, or a last one cut
  # short on a power loss, which is read as unfinished.
  try:
    with open(progress, 'a', encoding='utf-8') as f:
      f.write(json.dumps(record) + '\n')
  except OSError as e:
    raise _write_failed(progress.parent, e) from None


def _write_json(path, value, jsonl: bool = False):
  """Writes `path` whole or not at all (a temporary file, then renamed)."""
  text = json.dumps(value) + '\n' if jsonl else json.dumps(value, indent=1)
  temporary = os.fspath(path) + PARTIAL
  try:
    with open(temporary, 'w', encoding='utf-8') as f:
      f.write(text)
      f.flush()
      os.fsync(f.fileno())
    os.replace(temporary, path)
  except OSError as e:
    raise _write_failed(path.parent, e) from None


def _remove(path):
  try:
    os.remove(path)
  except FileNotFoundError:
    pass


def _fsync_dir(root):
  descriptor = os.open(root, os.O_RDONLY)
  try:
    os.fsync(descriptor)
  finally:
    os.close(descriptor)


def _manifest(settings: dict[str, Any], plan: list[_Shard],
              finished: dict[str, dict[str, Any]]) -> dict[str, Any]:
  keys = ('file', 'num_examples', _items(settings), 'bytes', 'sha256')
  splits = {}
  for split, size in settings['splits'].items():
    shards = [{key: finished[s.file][key] for key in dict.fromkeys(keys)}
              for s in plan if s.split == split]
    splits[split] = {'num_examples': sum(s['num_examples'] for s in shards),
                     _items(settings): size, 'shards': shards}
  return {'format': array_records.FORMAT, 'version': array_records.VERSION,
          **{key: value for key, value in settings.items()
             if key != 'splits'}, 'splits': splits}


def _size(n: int) -> str:
  for unit in ('bytes', 'KB', 'MB', 'GB'):
    if n < 1000 or unit == 'GB':
      return f'{n:,} {unit}' if unit == 'bytes' else f'{n:,.1f} {unit}'
    n /= 1000
  return ''


def _report(src: str, dst: str, written: Written) -> str:
  manifest = written.manifest
  tokens = manifest.get('tokens')
  unit = 'documents' if tokens else 'examples'
  labelled = tokens and 'label_column' in tokens
  if labelled:
    parts = [f'{name} {info["num_examples"]:,} documents of '
             f'{len(manifest["class_names"])} classes, {tokens["seq_len"]:,} '
             f'tokens each, in {len(info["shards"])} shards'
             for name, info in manifest['splits'].items()]
  elif tokens:
    parts = [f'{name} {info["num_examples"]:,} sequences of '
             f'{tokens["seq_len"]:,} tokens from {info["num_documents"]:,} '
             f'documents in {len(info["shards"])} shards'
             for name, info in manifest['splits'].items()]
  else:
    parts = [f'{name} {info["num_examples"]:,} examples in '
             f'{len(info["shards"])} shards'
             for name, info in manifest['splits'].items()]
  size = sum(s['bytes'] for i in manifest['splits'].values()
             for s in i['shards'])
  total = sum(len(i['shards']) for i in manifest['splits'].values())
  if not written.shards_written:
    done = 'all there already; nothing written'
  else:
    done = (f'{written.examples_per_second:,.0f} {unit}/s' +
            (f'; wrote {written.shards_written} of the {total} shards, the '
             'others were there' if written.shards_written < total else ''))
  use = (f'Train a text classifier on it with --config.dataset=tokens:{dst}'
         if labelled else
         f'Train a language model on it with --config.dataset=tokens:{dst}'
         if tokens else
         f'Train on it with --config.dataset=records:{dst}')
  return (f'Prepared {src} in {dst}: {", ".join(parts)}, {_size(size)} '
          f'({done}). {use[0].upper()}{use[1:]}')


if __name__ == '__main__':
  startup.loaded()
  sys.exit(main(sys.argv[1:]))

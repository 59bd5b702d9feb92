"""Datasets by name: the source each is read from, and `load`.

Four sources give the same TFDS-style examples (`image`, `label`):
- 'idx': real Fashion-MNIST read offline from the IDX files of Debian's
  `dataset-fashion-mnist` package (recipes/data/sources/idx.py), held in memory;
- 'memory': a TFDS builder (`mnist`, `cifar10`, ...), downloaded and prepared
  into `data_dir` on first use (recipes/data/sources/tfds_source.py), held in memory,
  which makes the data order a pure function of (seed, step)
  (recipes/data/pipeline/in_memory.py);
- 'stream': a TFDS builder too large for memory (the ImageNet family), read
  from its files (recipes/data/pipeline/streaming.py, with the differences there).
- 'encoded': a user's own images, named by a prefix (ENCODED):
  `folder:PATH` (recipes/data/sources/image_folder.py), `hf:NAME_OR_PATH` (a Hugging
  Face dataset, recipes/data/sources/hf_source.py) and `records:PATH` (ArrayRecord
  files written by `python -m recipes.data.prepare`,
  recipes/data/sources/array_records.py). They are held in memory when they are
  small and the preset keeps their size, and otherwise streamed by index
  (recipes/data/pipeline/random_access.py), in the same order either way.
- 'tokens': `tokens:PATH`, packed token sequences for a language model that
  `python -m recipes.data.prepare SRC PATH --tokenizer=FILE --seq_len=N`
  wrote (recipes/data/pipeline/token_batches.py), streamed by index in the
  same order; its splits are whole splits ('train', 'validation').
The name picks the source: the prefixes, the IDX names, the names in
STREAMED, then every other TFDS name in memory. `data_source` ('memory' or
'stream') overrides that for a TFDS name or the user's own images; the
preprocessing never does.

Splits are TFDS split strings for every source ('train[:99%]', 'test[:1000]',
'train+test'); one dataset gives one training split and one or more
evaluation splits, the first the main one.
"""

import dataclasses
import difflib
from typing import Callable, Sequence

import tensorflow as tf
import tensorflow_datasets as tfds
from absl import logging

from recipes.data.images import decoding, image_codec
from recipes.data.images.preprocess import AUGMENTATIONS, Preprocessing
from recipes.data.pipeline import streaming
from recipes.data.pipeline.dataset import Dataset
from recipes.data.pipeline.in_memory import InMemoryDataset
from recipes.data.pipeline.random_access import RandomAccessDataset
from recipes.data.sources import idx, tfds_source
from recipes.data.sources.examples import EncodedSource, Selection
from recipes.runtime.errors import UserError

# Datasets read from IDX files, and their class names.
OFFLINE_DATASETS = {'fashion_mnist_idx': idx.FASHION_MNIST_CLASSES}
# TFDS builders of JPEGs too many or too large for memory.
STREAMED = frozenset({
    'imagenet2012', 'imagenet2012_subset', 'imagenet_v2', 'imagenet_a',
    'imagenet_r', 'imagenet_sketch', 'imagenette', 'imagewang'})
DATA_SOURCES = ('auto', 'memory', 'stream')  # config.data_source
# Name prefixes of the user's own images: 'folder:/data/pets'.
ENCODED = ('folder', 'hf', 'records')
# The name prefix of prepared token sequences: 'tokens:/data/tokens'.
TOKENS = 'tokens'


def is_tokens(name: str) -> bool:
  """Whether dataset `name` is token sequences ('tokens:PATH')."""
  return name.startswith(f'{TOKENS}:')
# The user's own images are held in memory up to this many decoded bytes.
IN_MEMORY_BYTES = 2 << 30


@dataclasses.dataclass(frozen=True)
class EncodedOptions:
  """How the user's own images are read (config fields of the same
  names)."""

  image_channels: int = 0  # 1, 3, or 0: grey if the first image is.
  skip_bad_images: bool = False  # Leave out images that do not decode.
  image_column: str = ''  # hf: the columns; '': detected.
  label_column: str = ''
  data_threads: int = 0  # Batches streamed at once; 0: automatic.


def encoded_prefix(name: str) -> str | None:
  """'folder' for 'folder:PATH' (one of ENCODED), else None."""
  prefix, colon, _ = name.partition(':')
  return prefix if colon and prefix in ENCODED else None


def open_encoded(name: str, options: EncodedOptions = EncodedOptions()
                 ) -> EncodedSource:
  """The user's own images named `name` ('folder:PATH', 'hf:NAME',
  'records:PATH'), scanned, nothing decoded.

  Raises:
    UserError: for a name without one of the ENCODED prefixes, or what the
      source finds wrong.
  """
  prefix = encoded_prefix(name)
  where = name.partition(':')[2]
  if not where:
    raise UserError(f'dataset {name!r} names no path; write {prefix}:PATH.')
  if prefix == 'folder':
    from recipes.data.sources import image_folder  # pylint: disable=g-import-not-at-top
    return image_folder.open(where)
  if prefix == 'hf':
    from recipes.data.sources import hf_source  # pylint: disable=g-import-not-at-top
    return hf_source.open(where, options.image_column, options.label_column)
  if prefix == 'records':
    from recipes.data.sources import array_records  # pylint: disable=g-import-not-at-top
    return array_records.open(where)
  raise UserError(f'dataset {name!r} has none of the prefixes '
                  f'{", ".join(p + ":" for p in ENCODED)}.')


def source_for(name: str, data_source: str = 'auto') -> str:
  """How dataset `name` is read: 'idx', 'memory' or 'stream'.

  Args:
    name: a name from OFFLINE_DATASETS or a TFDS name (with an optional
      config and version, 'imagenette/320px:1.0.0').
    data_source: one of DATA_SOURCES; 'auto' picks by the name.

  Returns:
    The source, a key of READERS.

  Raises:
    UserError: for an unknown data_source, or streaming an IDX dataset.
  """
  if data_source not in DATA_SOURCES:
    raise UserError(f'unknown data_source {data_source!r}; choose one of '
                    f'{", ".join(DATA_SOURCES)}.')
  if encoded_prefix(name):
    return 'encoded'
  if name in OFFLINE_DATASETS:
    if data_source == 'stream':
      raise UserError(f'dataset {name!r} is read from IDX files into memory '
                      'and cannot be streamed; set --config.data_source=auto.')
    return 'idx'
  if data_source != 'auto':
    return data_source
  # A TFDS name may carry a config and a version: 'imagenette/320px:1.0.0'.
  builder_name = name.split(':')[0].split('/')[0]
  return 'stream' if builder_name in STREAMED else 'memory'


def load(name: str, data_dir: str | None, train_split: str = 'train',
         eval_splits: str | Sequence[str] = 'test',
         preprocessing: Preprocessing = Preprocessing(),
         data_source: str = 'auto',
         options: EncodedOptions = EncodedOptions()) -> Dataset:
  """The dataset `name`, prepared (downloaded if needed) and ready to batch.

  `eval_splits`: one split string or several (repeats are read once); the
  first is the main one (`num_eval`, `eval_batches()` without a split).

  Args:
    name: a name from OFFLINE_DATASETS or a TFDS name.
    data_dir: where the data is (or is prepared into); None: the source's
      default (Debian's IDX folder, or ~/tensorflow_datasets).
    train_split: the training split, a TFDS split string.
    eval_splits: the evaluation split(s), as above.
    preprocessing: how images become model inputs.
    data_source: one of DATA_SOURCES (see `source_for`).
    options: how the user's own images are read.

  Returns:
    The dataset, batched per process.

  Raises:
    UserError: for an unknown dataset, source or split, an empty split,
      or preprocessing that does not fit the data.
  """
  eval_splits = _split_list(eval_splits)
  if is_tokens(name):
    return _read_tokens(name, train_split, eval_splits, options)
  source = source_for(name, data_source)
  if source == 'encoded':
    data = _read_encoded(open_encoded(name, options), train_split,
                         eval_splits, preprocessing, data_source, options)
  elif source == 'stream' and tfds_source.is_array_record(
      builder := _builder(name, data_dir, preprocessing)):
    # TFDS's own array_record files: read by index, as prepared ones are.
    from recipes.data.sources import array_records  # pylint: disable=g-import-not-at-top
    data = _read_encoded(array_records.open_tfds(builder), train_split,
                         eval_splits, preprocessing, 'stream', options)
  elif preprocessing.takes_jpeg and source != 'stream':
    jpeg = ', '.join(repr(a) for a, p in AUGMENTATIONS.items()
                     if p.takes_jpeg)
    raise UserError(
        f'augment={preprocessing.augment!r} takes encoded JPEGs, which only '
        f'a streamed dataset keeps, but {name!r} is read into memory; use '
        f'an augment other than {jpeg}, or --config.data_source=stream for '
        'a TFDS dataset of JPEGs.')
  else:
    data = READERS[source](name, data_dir, train_split, eval_splits,
                           preprocessing)
  sizes = {train_split: data.num_train, **data.eval_sizes}
  for split, size in sizes.items():
    if not size:
      raise UserError(f'split {split!r} of dataset {name!r} has no examples.')
  return data


def _split_list(eval_splits: str | Sequence[str]) -> tuple[str, ...]:
  splits = ((eval_splits,) if isinstance(eval_splits, str)
            else tuple(eval_splits))
  if not splits or not all(isinstance(s, str) and s for s in splits):
    raise UserError(f'eval splits {eval_splits!r} must be one or more '
                    'non-empty split strings.')
  return tuple(dict.fromkeys(splits))  # In order, without repeats.


def _read_encoded(source: EncodedSource, train_split, eval_splits,
                  preprocessing, data_source, options: EncodedOptions
                  ) -> Dataset:
  """Encoded images read by index: in memory when small and of one size
  for the preset, else streamed."""
  image_codec.check_channels(options.image_channels)
  splits = {split: source.select(split)
            for split in (train_split, *eval_splits)}
  _check_not_empty(source, splits)
  files = {split: listing for split, examples in splits.items()
           if (listing := examples.listing()) is not None}
  channels = options.image_channels or _first_image_channels(
      splits[train_split], options.skip_bad_images)
  if options.skip_bad_images:
    splits = {split: decoding.without_bad_images(examples, channels, split)
              for split, examples in splits.items()}
    _check_not_empty(source, splits, ' that decode')
  train = splits[train_split]
  evals = {split: splits[split] for split in eval_splits}
  first_only = Selection(((train, 0, 1),))
  first = decoding.decode_all(first_only, channels)['image'][0]
  preprocessing.check_channels(first.shape)
  size = sum(map(len, (train, *evals.values()))) * first.nbytes
  if data_source == 'memory' and preprocessing.takes_jpeg:
    raise UserError(f'augment={preprocessing.augment!r} takes encoded JPEGs, '
                    'which only a streamed dataset keeps; set '
                    '--config.data_source=stream or auto.')
  in_memory = (data_source == 'memory' or
               data_source == 'auto' and preprocessing.keeps_size
               and size <= IN_MEMORY_BYTES)
  logging.info('Reading %s (%d classes) %s: %d training images, as %s.',
               source.name, source.num_classes,
               'into memory' if in_memory else 'streamed', len(train),
               'grey' if channels == 1 else 'RGB')
  if in_memory:
    return InMemoryDataset(
        train=decoding.decode_all(train, channels),
        evals={s: decoding.decode_all(e, channels) for s, e in evals.items()},
        num_classes=source.num_classes, preprocessing=preprocessing,
        class_names=source.class_names, files=files)
  return RandomAccessDataset(train, evals, source.num_classes, preprocessing,
                             channels, first.shape, options.data_threads,
                             source.class_names, files)


def _read_tokens(name, train_split, eval_splits, options: EncodedOptions):
  from recipes.data.pipeline import token_batches  # pylint: disable=g-import-not-at-top
  where = name.partition(':')[2]
  if not where:
    raise UserError(f'dataset {name!r} names no path; write '
                    f'{TOKENS}:PATH.')
  data = token_batches.open(where, train_split, eval_splits,
                            options.data_threads)
  for split, size in {train_split: data.num_train,
                      **data.eval_sizes}.items():
    if not size:
      raise UserError(f'split {split!r} of dataset {name!r} has no '
                      'sequences.')
  return data


def _check_not_empty(source: EncodedSource, splits, which: str = ''):
  for split, examples in splits.items():
    if not len(examples):
      raise UserError(f'split {split!r} of {source.name} has no '
                      f'examples{which}.')


def _first_image_channels(examples, skip_bad_images: bool) -> int:
  """1 if the first training image (that decodes) is grey, else 3."""
  for index in range(len(examples) if skip_bad_images else 1):
    encoded, _ = examples.read([index])
    try:
      return image_codec.stored_channels(encoded[0])
    except tf.errors.InvalidArgumentError:
      if not skip_bad_images:
        decoding.check(examples, index, encoded[0], 3, None)  # Names it.
        raise
  return 3  # None decodes: without_bad_images says so.


def _read_idx(name, data_dir, train_split, eval_splits, preprocessing):
  train, *evals = idx.load_splits(data_dir, [train_split, *eval_splits])
  preprocessing.check_channels(train['image'].shape[1:])
  return InMemoryDataset(train=train, evals=dict(zip(eval_splits, evals)),
                         num_classes=len(OFFLINE_DATASETS[name]),
                         class_names=OFFLINE_DATASETS[name],
                         preprocessing=preprocessing)


def _read_tfds_into_memory(name, data_dir, train_split, eval_splits,
                           preprocessing):
  builder = _builder(name, data_dir, preprocessing)
  if None in tfds_source.stored_image_shape(builder):
    raise UserError(
        f'dataset {name!r} has images of varying sizes, which cannot be held '
        'in memory as one array; use --config.data_source=stream with '
        '--config.augment=imagenet or finetune (both resize to '
        '--config.image_size).')
  return InMemoryDataset(
      train=tfds_source.read_split(builder, train_split),
      evals={s: tfds_source.read_split(builder, s) for s in eval_splits},
      num_classes=tfds_source.num_classes(builder),
      preprocessing=preprocessing,
      class_names=tfds_source.class_names(builder))


def _stream_tfds(name, data_dir, train_split, eval_splits, preprocessing):
  builder = _builder(name, data_dir, preprocessing)
  return streaming.StreamingDataset(builder, train_split, eval_splits,
                                    tfds_source.num_classes(builder),
                                    preprocessing,
                                    tfds_source.class_names(builder))


# (name, data_dir, train_split, eval_splits, preprocessing) -> Dataset
READERS: dict[str, Callable[..., Dataset]] = {
    'idx': _read_idx,
    'memory': _read_tfds_into_memory,
    'stream': _stream_tfds,
}


def unknown_dataset(name: str) -> UserError:
  """The error for a name that is no dataset, with the close ones."""
  known = list(OFFLINE_DATASETS) + list(tfds.list_builders())
  close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
  hint = (f'did you mean {", ".join(repr(c) for c in close)}?' if close
          else 'see tfds.list_builders() for TFDS names, or use '
          f'{", ".join(OFFLINE_DATASETS)} for offline data.')
  return UserError(f'unknown dataset {name!r}; {hint}')


def _builder(name: str, data_dir: str | None, preprocessing: Preprocessing):
  """The prepared TFDS builder, checked against the preprocessing."""
  try:
    builder = tfds_source.prepared_builder(name, data_dir)
  except tfds.core.registered.DatasetNotFoundError:
    raise unknown_dataset(name) from None
  stored = tfds_source.stored_image_shape(builder)
  preprocessing.check_channels(stored)
  if None in preprocessing.image_shape(stored):
    raise UserError(
        f'dataset {name!r} has images of varying sizes, which '
        f'augment={preprocessing.augment!r} keeps, so they cannot be '
        'batched; use --config.augment=imagenet (crops to '
        '--config.image_size) with --config.data_source=stream.')
  return builder

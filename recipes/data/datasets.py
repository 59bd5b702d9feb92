"""Datasets by name: the source each is read from, and `load`.

Three sources give the same TFDS-style examples (`image`, `label`):
- 'idx': real Fashion-MNIST read offline from the IDX files of Debian's
  `dataset-fashion-mnist` package (recipes/data/idx.py), held in memory;
- 'memory': a TFDS builder (`mnist`, `cifar10`, ...), downloaded and prepared
  into `data_dir` on first use (recipes/data/tfds_source.py), held in memory,
  which makes the data order a pure function of (seed, step)
  (recipes/data/in_memory.py);
- 'stream': a TFDS builder too large for memory (the ImageNet family), read
  from its files (recipes/data/streaming.py, with the differences there).
The name picks the source: the IDX names, the names in STREAMED, then every
other TFDS name in memory. `data_source` ('memory' or 'stream') overrides that
for a TFDS name; the preprocessing never does.

Splits are TFDS split strings for every source ('train[:99%]', 'test[:1000]',
'train+test'); one dataset gives one training split and one or more
evaluation splits, the first the main one.
"""

import difflib
from typing import Callable, Sequence

import tensorflow_datasets as tfds

from recipes.data import idx, streaming, tfds_source
from recipes.data.dataset import Dataset
from recipes.data.in_memory import InMemoryDataset
from recipes.data.preprocess import AUGMENTATIONS, Preprocessing
from recipes.runtime.errors import UserError

# Datasets read from IDX files, and their number of classes.
OFFLINE_DATASETS = {'fashion_mnist_idx': 10}
# TFDS builders of JPEGs too many or too large for memory.
STREAMED = frozenset({
    'imagenet2012', 'imagenet2012_subset', 'imagenet_v2', 'imagenet_a',
    'imagenet_r', 'imagenet_sketch', 'imagenette', 'imagewang'})
DATA_SOURCES = ('auto', 'memory', 'stream')  # config.data_source


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
         data_source: str = 'auto') -> Dataset:
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

  Returns:
    The dataset, batched per process.

  Raises:
    UserError: for an unknown dataset, source or split, an empty split,
      or preprocessing that does not fit the data.
  """
  source = source_for(name, data_source)
  eval_splits = _split_list(eval_splits)
  if preprocessing.takes_jpeg and source != 'stream':
    jpeg = ', '.join(repr(a) for a, p in AUGMENTATIONS.items()
                     if p.takes_jpeg)
    raise UserError(
        f'augment={preprocessing.augment!r} takes encoded JPEGs, which only '
        f'a streamed dataset keeps, but {name!r} is read into memory; use '
        f'an augment other than {jpeg}, or --config.data_source=stream for '
        'a TFDS dataset of JPEGs.')
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


def _read_idx(name, data_dir, train_split, eval_splits, preprocessing):
  train, *evals = idx.load_splits(data_dir, [train_split, *eval_splits])
  preprocessing.check_channels(train['image'].shape[1:])
  return InMemoryDataset(train=train, evals=dict(zip(eval_splits, evals)),
                         num_classes=OFFLINE_DATASETS[name],
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
      preprocessing=preprocessing)


def _stream_tfds(name, data_dir, train_split, eval_splits, preprocessing):
  builder = _builder(name, data_dir, preprocessing)
  return streaming.StreamingDataset(builder, train_split, eval_splits,
                                    tfds_source.num_classes(builder),
                                    preprocessing)


# (name, data_dir, train_split, eval_splits, preprocessing) -> Dataset
READERS: dict[str, Callable[..., Dataset]] = {
    'idx': _read_idx,
    'memory': _read_tfds_into_memory,
    'stream': _stream_tfds,
}


def _builder(name: str, data_dir: str | None, preprocessing: Preprocessing):
  """The prepared TFDS builder, checked against the preprocessing."""
  try:
    builder = tfds_source.prepared_builder(name, data_dir)
  except tfds.core.registered.DatasetNotFoundError:
    known = list(OFFLINE_DATASETS) + list(tfds.list_builders())
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = (f'did you mean {", ".join(repr(c) for c in close)}?' if close
            else 'see tfds.list_builders() for TFDS names, or use '
            f'{", ".join(OFFLINE_DATASETS)} for offline data.')
    raise UserError(f'unknown dataset {name!r}; {hint}') from None
  stored = tfds_source.stored_image_shape(builder)
  preprocessing.check_channels(stored)
  if None in preprocessing.image_shape(stored):
    raise UserError(
        f'dataset {name!r} has images of varying sizes, which '
        f'augment={preprocessing.augment!r} keeps, so they cannot be '
        'batched; use --config.augment=imagenet (crops to '
        '--config.image_size) with --config.data_source=stream.')
  return builder

"""Hugging Face datasets as encoded examples: `hf:beans`, `hf:/data/pets`.

The `datasets` library reads what people share image datasets as: a folder
written by `save_to_disk`, parquet files, or a Hub dataset. It gives each
split as memory-mapped Arrow tables, from which `ds[indices]` reads a batch of
rows in one call, so a split serves the random access of `Examples`
(recipes/data/sources/examples.py) without copying it. The image column is read
undecoded (`Image(decode=False)`): JPEG and PNG bytes go on as they are, and
images stored as pixel arrays become PNGs, which keep every pixel.

Nothing is downloaded: training machines often have no network, and a run
that quietly fetched gigabytes, or failed half an hour in on a timeout, is
worse than one that stops at once. A Hub name is read offline from the local
caches (`datasets.load_dataset`'s, or the Hub's own from `hf download`); one
that is not there is a one-line error saying how to download it once.

`open_text` reads a text column the same way, as documents for
`python -m recipes.data.prepare hf:NAME DST --tokenizer=...`.

`datasets` is an optional extra (`pip install 'jax-model-zoo[hf]'`), imported
only when a hf: dataset is opened.
"""

import contextlib
import glob
import io
import os
import pathlib
import re
from typing import Sequence

import numpy as np

from recipes.data.sources import examples as examples_lib
from recipes.data.sources import texts as texts_lib
from recipes.runtime.errors import UserError

# Columns taken when none is named and no column has the feature type.
IMAGE_NAMES = ('image', 'img', 'images', 'pixel_values', 'picture', 'photo')
LABEL_NAMES = ('label', 'labels', 'fine_label', 'class', 'category', 'target')
# What a Hub dataset is called: 'beans', 'user/name'.
_HUB_NAME = re.compile(r'\w[\w.-]*(/\w[\w.-]*)?')
# Files that `save_to_disk` writes (DatasetDict, Dataset).
_SAVED_MARKS = ('dataset_dict.json', 'state.json')
_INT_DTYPES = frozenset(f'{u}int{bits}' for u in ('', 'u')
                        for bits in (8, 16, 32, 64))


def open(  # pylint: disable=redefined-builtin
    name_or_path: str, image_column: str = '', label_column: str = ''
) -> examples_lib.EncodedSource:
  """Opens a Hugging Face dataset; reads no image yet.

  Args:
    name_or_path: a folder written by `save_to_disk`; a .parquet file, a
      folder of them or a glob ('data/*.parquet'), split by file name as
      `datasets` does (train-00000-of-00002.parquet, test.parquet; one
      unnamed file is 'train'); or a Hub name ('beans', 'user/name') that was
      downloaded before. Without the 'hf:' prefix.
    image_column: the column of images; '': the column of `Image` type, else
      one named like IMAGE_NAMES.
    label_column: the column of labels; '': the `ClassLabel` column, else one
      named like LABEL_NAMES.

  Returns:
    Its splits. Class names are the ClassLabel's; for int labels '0' to the
    largest; for string labels the sorted strings, label i the i-th. A split
    with labels outside them (-1: unlabeled) fails when read, with a
    UserError; the other splits serve.

  Raises:
    UserError: `datasets` is not installed; no such path or cached Hub
      dataset, or one `datasets` cannot read; no image or label column, or
      one of the wrong type.
  """
  datasets = _import_datasets()
  source = f'hf:{name_or_path}'
  with _offline(datasets):
    splits = _load(datasets, name_or_path, source)
  if not splits:
    raise UserError(f'{source} has no splits.')
  features = next(iter(splits.values())).features
  image_column = _column(features, image_column, 'image', datasets.Image,
                         IMAGE_NAMES, source)
  label_column = _column(features, label_column, 'label',
                         datasets.ClassLabel, LABEL_NAMES, source)
  for split, dataset in splits.items():
    missing = {image_column, label_column} - set(dataset.column_names)
    if missing:
      raise UserError(f"split '{split}' of {source} has no column "
                      f'{", ".join(sorted(missing))} (its columns: '
                      f'{", ".join(dataset.column_names)}); name others '
                      'with --config.image_column / --config.label_column.')
  labels, class_names = _labels(datasets, splits, label_column, source)
  return examples_lib.EncodedSource(source, class_names, {
      split: _Split(_images(datasets, dataset, image_column, source),
                    image_column, labels[split], len(class_names), split,
                    source)
      for split, dataset in splits.items()})


def open_text(name_or_path: str, column: str = texts_lib.DEFAULT_COLUMN,
              label_column: str = '') -> texts_lib.TextSource:
  """Opens the text column of a Hugging Face dataset; reads no text yet.

  Args:
    name_or_path: as for `open`.
    column: the column of text ('text' if empty).
    label_column: the column of labels; '': none. A ClassLabel column's
      labels are its names.

  Returns:
    Its splits, each the rows with text (memory-mapped Arrow).

  Raises:
    UserError: as for `open`; no such column, or one that is not text,
      holds bytes that are not UTF-8, or has no text in a split.
  """
  datasets = _import_datasets()
  source = f'hf:{name_or_path}'
  column = column or texts_lib.DEFAULT_COLUMN
  with _offline(datasets):
    splits = _load(datasets, name_or_path, source)
  if not splits:
    raise UserError(f'{source} has no splits.')
  found, labels = {}, {}
  for split, dataset in splits.items():
    if label_column and label_column not in dataset.column_names:
      raise texts_lib.no_label_column(f"split '{split}' of {source}",
                                      label_column, dataset.column_names)
    if column not in dataset.column_names:
      raise UserError(f"split '{split}' of {source} has no column {column!r} "
                      f'(its columns: {", ".join(dataset.column_names)}); '
                      'name the text column with --text_column.')
    # One column, through any row order (`with_format('arrow')` heeds a
    # shuffled or selected dataset's indices).
    values = dataset.select_columns([column]).with_format('arrow')[:]
    found[split] = texts_lib.ArrowTexts(values.column(column), split, source,
                                        column)
    if label_column:
      labels[split] = found[split].labels(
          dataset.select_columns([label_column]).with_format('arrow')[:]
          .column(label_column), label_column)
      names = getattr(dataset.features[label_column], 'names', None)
      if names:  # A ClassLabel: its names, not its ids.
        labels[split] = [names[i] for i in labels[split]]
  return texts_lib.TextSource(source, column, found, label_column, labels)


class _Split:
  """One split as `Examples`: its images read from the dataset by batch, its
  labels (all read when opened) from memory."""

  def __init__(self, images, column: str, labels: np.ndarray,
               num_classes: int, split: str, source: str):
    self._images = images  # The split with only the image column.
    self._column = column
    self._labels = labels
    self._split = split
    self._source = source
    # Unlabeled rows (ClassLabel's -1, common in test splits) stop a read of
    # this split, and only this one: a dataset whose test split is
    # unlabeled still trains and evaluates on its other splits.
    bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
    self._bad = None
    if bad.size:
      self._bad = (
          f"split '{split}' of {source} has {bad.size} labels outside "
          f'0..{num_classes - 1}, e.g. {labels[bad[0]]} in row {bad[0]} '
          '(-1 or none: an unlabeled example); train and evaluate on '
          'labeled splits (--config.train_split, --config.eval_split).')

  def __len__(self) -> int:
    return len(self._labels)

  def read(self, indices: Sequence[int]) -> tuple[list[bytes], np.ndarray]:
    if self._bad:
      raise UserError(self._bad)
    indices = [int(i) for i in indices]
    if not indices:
      return [], np.zeros(0, np.int64)
    values = self._images[indices][self._column]  # One batched read.
    images = [_encoded(value, self, index)
              for value, index in zip(values, indices)]
    return images, self._labels[indices]

  def describe(self, index: int) -> str:
    return f"row {index} of split '{self._split}' of {self._source}"


def _import_datasets():
  try:
    import datasets  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise UserError(
        f'hf: datasets need the `datasets` package ({e}): pip install '
        "'jax-model-zoo[hf]' (or pip install datasets).") from None
  return datasets


@contextlib.contextmanager
def _offline(datasets):
  """`datasets` and `huggingface_hub` in offline mode for a while.

  Both read HF_HUB_OFFLINE once, when imported, and look at their copy on
  every request, so the copy is what is set (as datasets' own tests do).
  """
  import huggingface_hub.constants  # pylint: disable=g-import-not-at-top
  modules = (datasets.config, huggingface_hub.constants)
  before = [module.HF_HUB_OFFLINE for module in modules]
  for module in modules:
    module.HF_HUB_OFFLINE = True
  try:
    yield
  finally:
    for module, value in zip(modules, before):
      module.HF_HUB_OFFLINE = value


def _load(datasets, name: str, source: str) -> dict:
  """The splits of `name` by split name: datasets.Dataset each."""
  path = os.path.expanduser(name)
  if glob.has_magic(path):
    data = _load_parquet(datasets, _glob(path, source), _glob_base(path),
                         source)
  elif os.path.isdir(path):
    if any(os.path.exists(os.path.join(path, mark))
           for mark in _SAVED_MARKS):
      data = _call(source, datasets.load_from_disk, path)
    else:  # Parquet files, maybe with a README's configs, as on the Hub.
      data = _call(source, datasets.load_dataset, path,
                   cache_dir=_datasets_cache(datasets))
  elif os.path.isfile(path):
    if not path.endswith('.parquet'):
      raise UserError(f'{source}: {name} is not a .parquet file; hf: reads '
                      'parquet files, folders of them or of save_to_disk, '
                      'and Hub datasets.')
    data = _load_parquet(datasets, [os.path.abspath(path)],
                         os.path.dirname(os.path.abspath(path)), source)
  elif _HUB_NAME.fullmatch(name) and not name.endswith('.parquet'):
    data = _load_hub(datasets, name, source)
  else:
    raise UserError(f'{source}: there is no file or folder {name} (from '
                    f'{os.getcwd()}); name an existing path.')
  if isinstance(data, datasets.Dataset):  # One split, maybe named.
    split = str(data.split or '')
    return {split if re.fullmatch(r'\w+', split) else 'train': data}
  return {str(split): dataset for split, dataset in data.items()}


def _call(source: str, function, *args, **kwargs):
  """function(*args, **kwargs), its errors told in one line."""
  datasets = _import_datasets()
  try:
    return function(*args, **kwargs)
  except (OSError, ValueError, datasets.exceptions.DatasetsError) as e:
    message = ' '.join(str(e).split())
    raise UserError(f'{source} could not be read: {type(e).__name__}: '
                    f'{message} (hf: reads save_to_disk folders, parquet '
                    'files and cached Hub datasets).') from None


def _glob(pattern: str, source: str) -> list[str]:
  files = sorted(os.path.abspath(path)
                 for path in glob.glob(pattern, recursive=True)
                 if path.endswith('.parquet') and os.path.isfile(path))
  if not files:
    raise UserError(f'{source}: no .parquet file matches {pattern} (from '
                    f'{os.getcwd()}).')
  return files


def _glob_base(pattern: str) -> str:
  """The folder that `pattern` searches: its part before any wildcard."""
  parts = pathlib.PurePath(pattern).parts
  fixed = []
  for part in parts:
    if glob.has_magic(part):
      break
    fixed.append(part)
  return os.path.abspath(os.path.join(*fixed) if fixed else '.')


def _load_parquet(datasets, files: list[str], base: str, source: str):
  """`files` (absolute paths under `base`) split by their names, with the
  rules `datasets` applies to a folder or a Hub repository."""
  from datasets import \
      data_files as data_files_lib  # pylint: disable=g-import-not-at-top
  wanted = set(files)

  def resolve(pattern: str) -> list[str]:
    try:
      found = data_files_lib.resolve_pattern(pattern, base)
    except FileNotFoundError:
      return []
    return [f for f in found if os.path.abspath(f) in wanted]

  # The private function behind get_data_patterns(folder), given only these
  # files: a glob names some files of a folder, not all.
  patterns = data_files_lib._get_data_files_patterns(resolve)  # pylint: disable=protected-access
  by_split = {str(split): sorted({f for p in split_patterns
                                  for f in resolve(p)})
              for split, split_patterns in patterns.items()}
  return _call(source, datasets.load_dataset, 'parquet',
               data_files={s: f for s, f in by_split.items() if f},
               cache_dir=_datasets_cache(datasets))


def _load_hub(datasets, name: str, source: str):
  """A Hub dataset from `datasets`' cache, else from the Hub's cache."""
  datasets_cache = _datasets_cache(datasets)
  try:
    return datasets.load_dataset(name, cache_dir=datasets_cache)
  except (ConnectionError, FileNotFoundError):
    pass  # Not in datasets' cache (offline, the Hub is not asked).
  except (OSError, ValueError, datasets.exceptions.DatasetsError) as e:
    # E.g. several configs cached: there is no way to name one.
    raise UserError(f'{source} could not be read from the cache '
                    f'{datasets_cache}: {" ".join(str(e).split())}') from None
  import huggingface_hub  # pylint: disable=g-import-not-at-top
  hub_cache = _hub_cache()
  try:  # Files that `hf download` put in the Hub's cache.
    snapshot = huggingface_hub.snapshot_download(
        name, repo_type='dataset', cache_dir=hub_cache, local_files_only=True)
  except (OSError, ValueError):
    raise UserError(
        f'{source}: {name} is no file or folder here, nor a Hugging Face Hub '
        f'dataset in the caches read offline ({datasets_cache} of datasets, '
        f'{hub_cache} of hf download; set by HF_HOME, or HF_DATASETS_CACHE '
        'and HF_HUB_CACHE). '
        'Download it once on a machine with network, with the same HF_HOME: '
        f"python -c \"import datasets; datasets.load_dataset('{name}')\" "
        f'(or: hf download {name} --repo-type dataset).') from None
  return _call(source, datasets.load_dataset, snapshot,
               cache_dir=datasets_cache)


def _datasets_cache(datasets) -> str:
  """datasets' cache folder, from the environment now: datasets read it
  once, at import."""
  if os.environ.get('HF_DATASETS_CACHE'):
    return os.path.expanduser(os.environ['HF_DATASETS_CACHE'])
  if os.environ.get('HF_HOME'):
    return os.path.join(os.path.expanduser(os.environ['HF_HOME']), 'datasets')
  return str(datasets.config.HF_DATASETS_CACHE)


def _hub_cache() -> str:
  """The Hub's cache folder (`hf download`'s), from the environment now."""
  import huggingface_hub.constants  # pylint: disable=g-import-not-at-top
  if os.environ.get('HF_HUB_CACHE'):
    return os.path.expanduser(os.environ['HF_HUB_CACHE'])
  if os.environ.get('HF_HOME'):
    return os.path.join(os.path.expanduser(os.environ['HF_HOME']), 'hub')
  return huggingface_hub.constants.HF_HUB_CACHE


def _column(features, column: str, kind: str, feature_type, names,
            source: str) -> str:
  """The `kind` ('image' or 'label') column: `column` if given, else the
  first of type `feature_type`, else the first named one of `names`."""
  if column:
    _check_exists(features, column, kind, source)
    return column
  for name, feature in features.items():
    if isinstance(feature, feature_type):
      return name
  for name in names:
    if name in features:
      return name
  raise UserError(f'{source} has no column of {feature_type.__name__} type '
                  f'or named {"/".join(names)} (its columns: '
                  f'{", ".join(features)}); name the {kind} column with '
                  f'--config.{kind}_column (and the other with '
                  '--config.image_column or --config.label_column).')


def _check_exists(features, column: str, kind: str, source: str):
  if column not in features:
    raise UserError(f'{source} has no column {column!r} for the {kind}s '
                    f'(its columns: {", ".join(features)}); fix '
                    f'--config.{kind}_column.')


def _labels(datasets, splits: dict, column: str, source: str
            ) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
  """Each split's int64 labels (-1 where there is none), and the class
  names."""
  import pyarrow as pa  # pylint: disable=g-import-not-at-top
  import pyarrow.compute as pc  # pylint: disable=g-import-not-at-top
  feature = next(iter(splits.values())).features[column]
  for split, dataset in splits.items():
    if dataset.features[column] != feature:
      raise UserError(f"{source}: column {column!r} is {feature} in one "
                      f"split but {dataset.features[column]} in split "
                      f"'{split}'; name another with --config.label_column.")
  # Only the label column, all rows: a batch read through any row order
  # (`with_format('arrow')` heeds a shuffled dataset's indices).
  values = {split: dataset.select_columns([column]).with_format('arrow')[:]
                   .column(column) for split, dataset in splits.items()}

  def ints(array) -> np.ndarray:
    return array.fill_null(-1).to_numpy().astype(np.int64)

  if isinstance(feature, datasets.ClassLabel):
    return ({s: ints(v) for s, v in values.items()}, tuple(feature.names))
  dtype = getattr(feature, 'dtype', None)
  if isinstance(feature, datasets.Value) and dtype in _INT_DTYPES:
    labels = {s: ints(v) for s, v in values.items()}
    top = max((int(v.max()) for v in labels.values() if v.size), default=-1)
    return labels, tuple(str(i) for i in range(top + 1))
  if isinstance(feature, datasets.Value) and dtype in ('string',
                                                       'large_string'):
    names = sorted({name for v in values.values()
                    for name in pc.unique(v).to_pylist() if name is not None})
    index = pa.array(names, pa.string())
    return ({s: ints(pc.index_in(v.cast(pa.string()), value_set=index))
             for s, v in values.items()}, tuple(names))
  raise UserError(f'{source}: label column {column!r} holds {feature}; '
                  'labels must be ints, a ClassLabel or strings: name '
                  'another with --config.label_column.')


def _images(datasets, dataset, column: str, source: str):
  """The split with only its image column, formatted so that a row gives
  an encoded image ({'bytes', 'path'} or bytes) or a pixel array."""
  feature = dataset.features[column]
  dataset = dataset.select_columns([column])
  if isinstance(feature, datasets.Image):
    # Undecoded: the file's bytes, and decoding left to the input pipeline.
    return dataset.cast_column(column, datasets.Image(decode=False)
                               ).with_format(None)
  if isinstance(feature, dict) and 'bytes' in feature:  # Image, untyped.
    return dataset.with_format(None)
  if getattr(feature, 'dtype', None) in ('binary', 'large_binary'):
    return dataset.with_format(None)
  if isinstance(feature, (datasets.List, datasets.LargeList,
                          datasets.Array2D, datasets.Array3D)):
    return dataset.with_format('numpy')
  raise UserError(f'{source}: image column {column!r} holds {feature}, not '
                  'images (Image, bytes or pixel arrays); name another with '
                  '--config.image_column.')


def _encoded(value, split: _Split, index: int) -> bytes:
  """The image file's bytes of one row's `value`."""
  if value is None:
    raise UserError(f'{split.describe(index)} has no image (it is null).')
  if isinstance(value, dict):  # Image(decode=False): bytes, else a file.
    if value.get('bytes') is not None:
      return value['bytes']
    if not value.get('path'):
      raise UserError(f'{split.describe(index)} has no image (no bytes and '
                      'no path).')
    try:
      return pathlib.Path(value['path']).read_bytes()
    except OSError as e:
      raise UserError(f'{split.describe(index)}: its image file '
                      f'{value["path"]} cannot be read ({e.strerror}).'
                      ) from None
  if isinstance(value, (bytes, bytearray)):
    return bytes(value)
  return _png(np.asarray(value), split.describe(index))


def _png(pixels: np.ndarray, where: str) -> bytes:
  """A PNG of `pixels` ([H, W] or [H, W, 1|3|4] integers 0..255), which
  keeps each pixel."""
  import PIL.Image  # pylint: disable=g-import-not-at-top
  if pixels.ndim == 3 and pixels.shape[-1] == 1:
    pixels = pixels[..., 0]
  if pixels.ndim != 2 and (pixels.ndim != 3 or pixels.shape[-1] not in (3, 4)):
    raise UserError(f'{where} is an array of shape {pixels.shape}, not an '
                    'image [H, W] or [H, W, 1, 3 or 4 channels]; name the '
                    'image column with --config.image_column.')
  if pixels.dtype.kind not in 'ui' or (
      pixels.size and (pixels.min() < 0 or pixels.max() > 255)):
    raise UserError(f'{where} is an array of {pixels.dtype} outside the '
                    'integers 0..255 that a PNG keeps exactly; name the '
                    'column of the original images with '
                    '--config.image_column.')
  buffer = io.BytesIO()
  PIL.Image.fromarray(pixels.astype(np.uint8)).save(buffer, format='PNG')
  return buffer.getvalue()

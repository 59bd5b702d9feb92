"""TFDS builders by name: prepared on first use, read whole into memory.

TFDS downloads and prepares a dataset into `data_dir` the first time; without
network it retries each download for minutes, so the download URLs are probed
first and an unreachable one is reported at once.
"""

import contextlib
import glob
import os
import tempfile
import urllib.parse
from typing import Sequence

import numpy as np
import requests
import tensorflow_datasets as tfds

from recipes.data.sources.examples import EncodedSource
from recipes.runtime.errors import UserError

_FEATURES = ('image', 'label')


def prepared_builder(name: str, data_dir: str | None):
  """The builder of `name`, downloaded and prepared into `data_dir` if needed.

  Raises tfds.core.registered.DatasetNotFoundError for an unknown name.

  Args:
    name: a TFDS name, optionally with config and version.
    data_dir: where TFDS keeps its data; None: ~/tensorflow_datasets.

  Returns:
    The prepared builder.

  Raises:
    tfds.core.registered.DatasetNotFoundError: for an unknown name.
    UserError: if the data is not prepared and cannot be downloaded or
      prepared.
  """
  builder = unprepared_builder(name, data_dir)
  if not builder.is_prepared():
    where = data_dir or '~/tensorflow_datasets'
    advice = (f'Run once on a machine with internet (it downloads into '
              f'{where}), or set --config.data_dir to a folder holding a '
              f'prepared TFDS copy of {name!r}, or train offline on '
              'Fashion-MNIST with configs/fashion_mnist_pmap.py.')
    unreachable = first_unreachable_url(builder)
    if unreachable:
      raise UserError(f'dataset {name!r} is not prepared in {where} and cannot '
                      f'be downloaded ({unreachable} is unreachable). {advice}')
    try:
      builder.download_and_prepare()
    except Exception as e:  # pylint: disable=broad-except
      raise UserError(f'dataset {name!r} could not be downloaded and prepared '
                      f'({type(e).__name__}: {str(e)[:200]}). {advice}') from e
  return builder


def unprepared_builder(name: str, data_dir: str | None):
  """`tfds.builder(name, data_dir=data_dir)`, prepared or not, without the
  empty folder TFDS leaves in the temporary directory each time it builds
  one for a dataset not yet prepared there (`DatasetInfo.
  initialize_from_bucket` makes it for a copy from Cloud Storage that TFDS
  4.9 has turned off, and never removes it).

  Raises:
    tfds.core.registered.DatasetNotFoundError: for an unknown name.
  """
  pattern = os.path.join(tempfile.gettempdir(), 'tmp*tfds')
  before = set(glob.glob(pattern))
  try:
    return tfds.builder(name, data_dir=data_dir)
  finally:
    for path in set(glob.glob(pattern)) - before:
      with contextlib.suppress(OSError):  # Not empty: not ours to remove.
        os.rmdir(path)


def first_unreachable_url(builder) -> str | None:
  """Probes the builder's download URLs once, quickly; None if all answer.

  One short request per host, honouring proxy settings. Tests that fake the
  download (tfds.testing.mock_data) replace this function with one that
  returns None.

  Args:
    builder: a TFDS builder.

  Returns:
    The first URL that did not answer, or None.
  """
  hosts = {}
  for url in (getattr(builder, 'url_infos', None) or {}):
    hosts.setdefault(urllib.parse.urlsplit(url).netloc, url)
  for url in hosts.values():
    try:
      requests.head(url, timeout=10, allow_redirects=False)
    except requests.RequestException:
      return url
  return None


def file_format(builder) -> str:
  """How the builder's files are stored: 'tfrecord' (read in sequence) or
  'array_record' (read by index)."""
  stored = builder.info.file_format
  return getattr(stored, 'value', stored)


def is_array_record(builder) -> bool:
  """Whether the builder's files are read by index."""
  return file_format(builder) == 'array_record'


def num_classes(builder) -> int:
  """The number of classes of the builder's `label` feature.

  Args:
    builder: a TFDS builder with a ClassLabel `label`.

  Returns:
    The number of classes.
  """
  return builder.info.features['label'].num_classes


def stored_image_shape(builder) -> tuple[int | None, ...]:
  """None for a dimension that varies between images.

  Args:
    builder: a TFDS builder with an `image` feature.

  Returns:
    The stored image shape [H, W, C], by the metadata.
  """
  return tuple(builder.info.features['image'].shape)


def _bad_split(builder, split: str, error: Exception) -> UserError:
  return UserError(f'bad split {split!r} for dataset {builder.name!r}: '
                   f'{" ".join(str(error).split())}')


def _empty(builder, split: str) -> UserError:
  return UserError(f'split {split!r} of dataset {builder.name!r} has no '
                   'examples.')


def num_examples(builder, split: str) -> int:
  """Examples in `split` (TFDS syntax: 'train[:99%]') by the metadata.

  Args:
    builder: a prepared TFDS builder.
    split: the split string.

  Returns:
    The number of examples.

  Raises:
    UserError: for a split the builder does not have or cannot parse.
  """
  try:
    return builder.info.splits[split].num_examples
  except (KeyError, ValueError, NotImplementedError) as e:
    raise _bad_split(builder, split, e) from None


def read_split(builder, split: str) -> dict[str, np.ndarray]:
  """`image` and `label` of every example of `split`, as numpy arrays.

  Args:
    builder: a prepared TFDS builder.
    split: the split string.

  Returns:
    `image` [N, H, W, C] and `label` [N].

  Raises:
    UserError: for a bad split, or one without examples.
  """
  if builder.info.splits and not num_examples(builder, split):
    raise _empty(builder, split)
  try:
    ds = builder.as_dataset(split=split)
  except (KeyError, ValueError, NotImplementedError) as e:
    raise _bad_split(builder, split, e) from None
  chunks = list(tfds.as_numpy(ds.map(lambda x: {k: x[k] for k in _FEATURES})
                              .batch(10_000)))
  if not chunks:
    raise _empty(builder, split)
  return {k: np.concatenate([c[k] for c in chunks]) for k in _FEATURES}


def class_names(builder) -> tuple[str, ...]:
  """The names of the label's classes; () if the label has none."""
  return tuple(getattr(builder.info.features['label'], 'names', ()) or ())


def encoded(builder) -> EncodedSource:
  """A prepared TFDS builder's splits as encoded images, for `python -m
  recipes.data.prepare NAME DST` (read in order: TFRecord files have no
  index).

  Args:
    builder: a prepared builder with an `image` and a ClassLabel `label`.

  Returns:
    Its splits and class names.

  Raises:
    UserError: a dataset without those features.
  """
  features = builder.info.features
  if ('image' not in features or 'label' not in features
      or not class_names(builder)):
    raise UserError(f'TFDS dataset {builder.name!r} has no image and '
                    'ClassLabel label features; only image classification '
                    'datasets can be prepared.')
  return EncodedSource(
      f'TFDS dataset {builder.name!r}', class_names(builder),
      {split: _InOrder(builder, split, info.num_examples)
       for split, info in builder.info.splits.items()})


class _InOrder:
  """A TFDS split's encoded images, read in order (a read elsewhere starts
  a new pass there, by TFDS's slicing)."""

  _CHUNK = 256  # Examples read at once.

  def __init__(self, builder, split: str, size: int):
    self._builder, self._split, self._size = builder, split, size
    self._position, self._batches, self._buffer = None, None, []

  def __len__(self) -> int:
    return self._size

  def _start(self, index: int):
    dataset = self._builder.as_dataset(
        split=f'{self._split}[{index}:]', shuffle_files=False,
        decoders={'image': tfds.decode.SkipDecoding()},
        # One file at a time: the order of the split's indices.
        read_config=tfds.ReadConfig(interleave_cycle_length=1))
    dataset = dataset.map(lambda x: (x['image'], x['label']))
    self._batches = dataset.batch(self._CHUNK).prefetch(2).as_numpy_iterator()
    self._position, self._buffer = index, []

  def read(self, indices: Sequence[int]) -> tuple[list[bytes], np.ndarray]:
    images, labels = [], []
    for index in indices:
      if index != self._position:
        self._start(index)
      if not self._buffer:
        batch = next(self._batches, None)
        if batch is None:
          raise UserError(f'{self.describe(index)} is missing: the split has '
                          'fewer examples than its metadata says.')
        self._buffer = list(zip(*batch))[::-1]
      image, label = self._buffer.pop()
      images.append(bytes(image))
      labels.append(int(label))
      self._position += 1
    return images, np.asarray(labels, np.int64)

  def describe(self, index: int) -> str:
    return (f'example {index} of split {self._split} of TFDS dataset '
            f'{self._builder.name!r}')

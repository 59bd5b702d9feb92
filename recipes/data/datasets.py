"""Datasets by name: where the examples come from and how they are batched.

Two sources give the same TFDS-style examples (`image`, `label`):
- any TFDS builder by name (`mnist`, `fashion_mnist`, `cifar10`,
  `imagenet2012`, ...), downloaded and prepared into `data_dir` on first use;
- `fashion_mnist_idx`: real Fashion-MNIST read offline from the IDX files of
  Debian's `dataset-fashion-mnist` package (see recipes/data/idx.py).
Datasets of fixed-size images (the MNIST family, CIFAR) are held in host
memory, which lets the pipeline pick any example by index and makes the data
order a pure function of (seed, step) (recipes/data/in_memory.py). Datasets of
encoded JPEGs (`augment='imagenet'`) are streamed instead
(recipes/data/streaming.py), with the differences documented there.

Both kinds offer the same interface to the loop: `num_classes`, `num_train`,
`num_eval`, `image_shape`, `train_batches(...)` and `eval_batches(...)`.
"""

import dataclasses
import difflib
import urllib.parse

import numpy as np
import requests
import tensorflow_datasets as tfds

from recipes.data import idx, in_memory, streaming
from recipes.errors import UserError
from recipes.data.preprocess import Preprocessing

OFFLINE_DATASETS = {'fashion_mnist_idx': (idx.load_split, 10)}
_FEATURES = ('image', 'label')


@dataclasses.dataclass(frozen=True)
class InMemoryDataset:
  """Both splits as numpy arrays: `image` uint8 [N, H, W, C], `label` [N]."""

  train: dict[str, np.ndarray]
  eval: dict[str, np.ndarray]
  num_classes: int
  preprocessing: Preprocessing = Preprocessing()

  def __post_init__(self):
    # A label outside the classes gives a NaN loss, which looks like a bad
    # learning rate: say what it is instead.
    for split, arrays in (('training', self.train), ('evaluation', self.eval)):
      labels = arrays['label']
      if len(labels) and not 0 <= labels.min() <= labels.max() < (
          self.num_classes):
        raise UserError(
            f'the {split} split has labels from {labels.min()} to '
            f'{labels.max()}, but the dataset has {self.num_classes} classes '
            f'(labels 0 to {self.num_classes - 1}); check its label files or '
            '--config.data_dir.')

  @property
  def image_shape(self) -> tuple[int, ...]:
    return self.train['image'].shape[1:]

  @property
  def num_train(self) -> int:
    return len(self.train['label'])

  @property
  def num_eval(self) -> int:
    return len(self.eval['label'])

  def train_batches(self, **kwargs):
    return in_memory.train_batches(
        self.train, preprocessing=self.preprocessing, **kwargs)

  def eval_batches(self, **kwargs):
    return in_memory.eval_batches(
        self.eval, preprocessing=self.preprocessing, **kwargs)


def load(name: str, data_dir: str | None, train_split: str = 'train',
         eval_split: str = 'test',
         preprocessing: Preprocessing = Preprocessing()):
  """The dataset `name`, prepared (downloaded if needed) and ready to batch."""
  if name in OFFLINE_DATASETS:
    load_split, num_classes = OFFLINE_DATASETS[name]
  else:
    builder = _prepared_tfds_builder(name, data_dir)
    num_classes = builder.info.features['label'].num_classes
    if preprocessing.augment == 'imagenet':
      return streaming.StreamingDataset(builder, train_split, eval_split,
                                        num_classes, preprocessing)
    load_split = lambda _, split: _tfds_split(builder, split)
  if preprocessing.augment == 'imagenet':
    raise UserError(f"augment='imagenet' needs a TFDS dataset of JPEG images; "
                    f'{name!r} is not one.')
  return InMemoryDataset(train=load_split(data_dir, train_split),
                         eval=load_split(data_dir, eval_split),
                         num_classes=num_classes,
                         preprocessing=preprocessing)


def _prepared_tfds_builder(name: str, data_dir: str | None):
  try:
    builder = tfds.builder(name, data_dir=data_dir)
  except tfds.core.registered.DatasetNotFoundError:
    known = list(OFFLINE_DATASETS) + list(tfds.list_builders())
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = (f'did you mean {", ".join(repr(c) for c in close)}?' if close
            else 'see tfds.list_builders() for TFDS names, or use '
            f'{", ".join(OFFLINE_DATASETS)} for offline data.')
    raise UserError(f'unknown dataset {name!r}; {hint}') from None
  if not builder.is_prepared():
    where = data_dir or '~/tensorflow_datasets'
    advice = (f'Run once on a machine with internet (it downloads into '
              f'{where}), or set --config.data_dir to a folder holding a '
              f'prepared TFDS copy of {name!r}, or train offline on '
              'Fashion-MNIST with configs/fashion_mnist_pmap.py.')
    unreachable = _first_unreachable_url(builder)
    if unreachable:
      raise UserError(f'dataset {name!r} is not prepared in {where} and cannot '
                      f'be downloaded ({unreachable} is unreachable). {advice}')
    try:
      builder.download_and_prepare()
    except Exception as e:  # pylint: disable=broad-except
      raise UserError(f'dataset {name!r} could not be downloaded and prepared '
                      f'({type(e).__name__}: {str(e)[:200]}). {advice}') from e
  return builder


def _first_unreachable_url(builder) -> str | None:
  """Probes the builder's download URLs once, quickly.

  Without network TFDS retries each download for minutes before failing; one
  short request per host tells the user at once. It honours proxy settings.
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


def _tfds_split(builder, split: str) -> dict[str, np.ndarray]:
  try:
    ds = builder.as_dataset(split=split)
  except ValueError as e:
    raise UserError(f'dataset {builder.name!r} has no split {split!r} '
                    f'({e}).') from e
  chunks = list(tfds.as_numpy(ds.map(lambda x: {k: x[k] for k in _FEATURES})
                              .batch(10_000)))
  return {k: np.concatenate([c[k] for c in chunks]) for k in _FEATURES}

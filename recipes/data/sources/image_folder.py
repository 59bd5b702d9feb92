"""A folder of images as a dataset, without code: `--config.dataset=
folder:PATH`, local or gs://.

Two layouts, those of torchvision's and TFDS's ImageFolder:
- PATH/SPLIT/CLASS/...: the split folders ('train', 'test', 'val', ...) are
  the splits a config names;
- PATH/CLASS/...: one split named 'train', divided with TFDS's slice syntax
  (train_split='train[:90%]', eval_split='train[90%:]').
A layout is the second one when any folder under PATH holds images itself.
Images are the JPEG and PNG files anywhere under a class folder (following
links); other files are counted and left alone. Labels are the sorted class
names, over every split; each split lists its images sorted by class, then
path, so every machine sees the same examples in the same order.
A folder of images without sub-folders is images to label (`unlabeled`),
as zero-shot classification reads them; training needs classes.
"""

import concurrent.futures
import dataclasses
import os
import pathlib
from typing import Sequence

import numpy as np
from absl import logging

from recipes.data.sources.examples import EncodedSource
from recipes.runtime import storage
from recipes.runtime.errors import UserError

_ONE_SPLIT = 'train'  # The split of a folder of class folders.
# File name endings read as images (JPEG, PNG: what recipes/data/images/
# image_codec.py decodes); other files in a folder are counted and left alone.
SUFFIXES = ('.jpg', '.jpeg', '.png')
# Reads from a bucket overlap: its latency, not the cores, bounds them. (On a
# local disk threads only add overhead: 60,000 small PNGs took a third longer.)
_READERS = concurrent.futures.ThreadPoolExecutor(16, 'image_folder')


@dataclasses.dataclass(frozen=True)
class ImageFiles:
  """One split: image files and their labels."""

  files: tuple[str, ...]
  labels: np.ndarray  # int64 [len(files)]
  root: str = ''  # The folder the files are in (at any depth).

  def __len__(self) -> int:
    return len(self.files)

  def read(self, indices: Sequence[int]) -> tuple[list[bytes], np.ndarray]:
    """See `Examples.read`; files in a bucket are read side by side."""
    files = [self.files[i] for i in indices]
    remote = files and '://' in files[0]
    return (list(_READERS.map(_read_bytes, files)) if remote
            else [_read_bytes(f) for f in files],
            self.labels[np.asarray(indices, np.int64)])

  def describe(self, index: int) -> str:
    return self.files[index]

  def listing(self, start: int, stop: int) -> list[tuple[str, int | None]]:
    """(name under the folder, size in bytes) of files start..stop-1; the
    size is None in a bucket, where it would cost a request per file, and
    for a file that cannot be read (which reading it will name)."""
    files = self.files[start:stop]
    names = [f[len(self.root.rstrip('/')) + 1:] for f in files]
    if '://' in self.root:
      return [(name, None) for name in names]
    return [(name, _size(f)) for name, f in zip(names, files)]


def _size(file: str) -> int | None:
  try:
    return os.stat(file).st_size
  except OSError:
    return None


def _read_bytes(file: str) -> bytes:
  try:
    if '://' in file:
      return storage.path(file).read_bytes()
    return pathlib.Path(file).read_bytes()
  except OSError as e:
    raise UserError(f'cannot read image {file} '
                    f'({e.strerror or type(e).__name__}); fix or remove '
                    'it.') from None


def open(path: str) -> EncodedSource:  # pylint: disable=redefined-builtin
  """The image folder at `path`, scanned (nothing decoded yet).

  Args:
    path: the folder, local or a URL (gs://BUCKET/dir).

  Returns:
    Its splits and sorted class names.

  Raises:
    UserError: a folder that is missing, empty, or has a class folder
      without images, a class without training images, an unreadable entry
      or a link loop.
  """
  path, root = _existing(path, 'dataset folder', '; check '
                         '--config.dataset=folder:PATH')
  folders, _ = root.entries(path)
  if not folders:
    raise UserError(f'the folder {path} has no class folders; put the images '
                    'in PATH/CLASS/ or PATH/SPLIT/CLASS/ folders.')
  if any(root.entries(folder)[1] for folder in folders.values()):
    split_folders = {_ONE_SPLIT: path}  # PATH/CLASS/...
  else:
    split_folders = folders  # PATH/SPLIT/CLASS/...
  per_split = {split: _classes(root, folder)
               for split, folder in split_folders.items()}
  _check_classes(path, per_split)
  class_names = tuple(sorted({c for classes in per_split.values()
                              for c in classes}))
  label = {name: i for i, name in enumerate(class_names)}
  splits = {}
  for split, classes in per_split.items():
    files = [(label[c], f) for c, fs in sorted(classes.items()) for f in fs]
    splits[split] = ImageFiles(tuple(f for _, f in files),
                               np.array([l for l, _ in files], np.int64), path)
  if root.ignored:
    logging.info('Ignored %d files under %s that are not JPEG or PNG (e.g. '
                 '%s).', len(root.ignored), path, root.ignored[0])
  return EncodedSource(f'the folder {path}', class_names, splits)


def _existing(path: str, what: str, hint: str = '') -> tuple[str, '_Folder']:
  """(`path`, ~ expanded where local; its _Folder); a UserError naming it as
  `what`, then `hint`, where it is not a folder."""
  if '://' not in path:
    path = os.path.expanduser(path)
  root = _Folder(path)
  if not root.is_dir(path):
    raise UserError(f'{what} {path} does not exist (or is not a folder)'
                    f'{hint}.')
  return path, root


def unlabeled(path: str) -> ImageFiles | None:
  """The images right in the folder `path` when it has no sub-folders: images
  to label, of no class (e.g. for zero-shot classification).

  Args:
    path: the folder, local or a URL.

  Returns:
    Its images, sorted, each labeled -1; None where `path` has sub-folders
    (class or split folders, which `open` reads).

  Raises:
    UserError: `path` is not a folder, or holds neither images nor folders.
  """
  path, root = _existing(path, 'image folder')
  folders, images = root.entries(path)
  if folders:
    return None
  if not images:
    raise UserError(f'image folder {path} holds no JPEG or PNG images (nor '
                    'class folders of them).')
  return ImageFiles(tuple(images), np.full(len(images), -1, np.int64), path)


def _classes(root: '_Folder', split_folder: str) -> dict[str, list[str]]:
  """{class name: its sorted image files} of one split folder."""
  folders, files = root.entries(split_folder)
  root.ignored += files  # Files beside the class folders.
  classes = {}
  for name, folder in folders.items():
    images = sorted(root.images(folder))
    if not images:
      raise UserError(f'class folder {folder} has no JPEG or PNG images; add '
                      'some or remove the folder.')
    classes[name] = images
  if not classes:
    raise UserError(f'split folder {split_folder} has no class folders; put '
                    'its images in class folders under it.')
  return classes


def _check_classes(path: str, per_split: dict[str, dict[str, list[str]]]):
  """A class the training split lacks would be a label never trained."""
  train = per_split.get(_ONE_SPLIT)
  if train is None:
    return
  for split, classes in per_split.items():
    missing = sorted(set(classes) - set(train))
    if missing:
      raise UserError(
          f'class {missing[0]!r} of {path} has images in split {split!r} but '
          f'none in {_ONE_SPLIT!r}; every class needs training images (add '
          f'some to {path}/{_ONE_SPLIT}/{missing[0]}, or remove the class).')


class _Folder:
  """Lists folders, local (os.scandir: one call per folder, which counts
  for ImageNet's 1.3M files) or through etils.epath for URLs."""

  def __init__(self, root: str):
    self.url = '://' in root
    self.ignored: list[str] = []

  def is_dir(self, path: str) -> bool:
    if self.url:
      return storage.path(path).is_dir()
    return os.path.isdir(path)

  def entries(self, folder: str) -> tuple[dict[str, str], list[str]]:
    """({name: path} of the sub-folders, [paths of the image files]); other
    files are added to `ignored`."""
    folders, images = {}, []
    try:
      if self.url:
        listing = [(p.name, os.fspath(p), p.is_dir())
                   for p in storage.path(folder).iterdir()]
      else:
        with os.scandir(folder) as scan:
          listing = [(e.name, e.path, _is_dir(e)) for e in scan]
    except OSError as e:
      raise UserError(f'cannot list folder {folder} ({_reason(e)}); fix its '
                      'permissions or remove it.') from None
    for name, entry, is_dir in sorted(listing):
      if name.startswith('.'):  # .DS_Store, .ipynb_checkpoints, ...
        continue
      if is_dir:
        folders[name] = entry
      elif name.lower().endswith(SUFFIXES):
        images.append(entry)
      else:
        self.ignored.append(entry)
    return folders, images

  def images(self, folder: str, parents: tuple[str, ...] = ()) -> list[str]:
    """Every image file under `folder`, following links, refusing loops."""
    real = folder if self.url else os.path.realpath(folder)
    if real in parents:
      raise UserError(f'link loop: {folder} leads back to a folder above it '
                      f'({real}); remove the link.')
    folders, images = self.entries(folder)
    for sub in folders.values():
      images += self.images(sub, parents + (real,))
    return images


def _is_dir(entry: os.DirEntry) -> bool:
  try:
    return entry.is_dir()
  except OSError as e:  # A link to itself: ELOOP.
    raise UserError(f'cannot read {entry.path} ({_reason(e)}); remove '
                    'it.') from None


def _reason(error: OSError) -> str:
  return error.strerror or type(error).__name__


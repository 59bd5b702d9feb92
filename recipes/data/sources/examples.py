"""Encoded examples read by index: the common form of image folders, Hugging
Face datasets and prepared ArrayRecord files.

A source (recipes/data/sources/image_folder.py, hf_source.py, array_records.py)
offers its named splits as `Examples`: the image file's bytes (JPEG or PNG)
and an int label for any index, in any order. That random access is what
lets a streamed run read exactly its rows of the global batch of any step
(recipes/data/pipeline/random_access.py), and lets `python -m recipes.data.prepare`
copy any source into ArrayRecord shards.
"""

import bisect
import dataclasses
from typing import Protocol, Sequence

import numpy as np

from recipes.data.sources import splits as splits_lib


class Examples(Protocol):
  """One split: encoded images and their labels, by index."""

  def __len__(self) -> int:
    """How many examples."""
    ...

  def read(self, indices: Sequence[int]) -> tuple[list[bytes], np.ndarray]:
    """The encoded images (a JPEG or PNG file's bytes) and int64 labels of
    the examples at `indices`, in that order.

    Raises:
      UserError: an example could not be read; the message names it.
    """
    ...

  def describe(self, index: int) -> str:
    """Where example `index` comes from, for messages (a file's path, or a
    record of a shard)."""
    ...


@dataclasses.dataclass(frozen=True)
class Selection:
  """Parts of other Examples, one after the other: a split string's result
  ('train[:90%]', 'train+test')."""

  parts: tuple[tuple[Examples, int, int], ...]  # (examples, from, to)

  def __post_init__(self):
    ends, total = [], 0
    for _, start, stop in self.parts:
      total += max(0, stop - start)
      ends.append(total)
    object.__setattr__(self, '_ends', ends)

  def __len__(self) -> int:
    return self._ends[-1] if self._ends else 0

  def _locate(self, index: int) -> tuple[Examples, int]:
    if not 0 <= index < len(self):
      raise IndexError(f'example {index} of {len(self)}')
    part = bisect.bisect_right(self._ends, index)
    examples, start, _ = self.parts[part]
    before = self._ends[part - 1] if part else 0
    return examples, start + index - before

  def read(self, indices: Sequence[int]) -> tuple[list[bytes], np.ndarray]:
    if len(self.parts) == 1:  # The common case: one batched read.
      examples, start, _ = self.parts[0]
      for index in indices:
        self._locate(index)  # Bounds.
      return examples.read([start + int(i) for i in indices])
    images, labels = [], []
    for index in indices:
      examples, inner = self._locate(int(index))
      image, label = examples.read([inner])
      images += image
      labels.append(label[0])
    return images, np.asarray(labels, np.int64)

  def describe(self, index: int) -> str:
    examples, inner = self._locate(index)
    return examples.describe(inner)

  def listing(self) -> list[tuple[str, int | None]] | None:
    """(name, size) of each example's file, in order, where the examples
    are files a user may change (an image folder's `listing`); else None."""
    if not all(hasattr(examples, 'listing') for examples, _, _ in self.parts):
      return None
    return [entry for examples, start, stop in self.parts
            for entry in examples.listing(start, stop)]


@dataclasses.dataclass(frozen=True)
class EncodedSource:
  """A dataset of encoded images: its named splits and class names (label i
  is class_names[i])."""

  name: str  # For messages: 'the folder /data/pets', 'hf:beans', ...
  class_names: tuple[str, ...]
  splits: dict[str, Examples]

  @property
  def num_classes(self) -> int:
    return len(self.class_names)

  def select(self, split: str) -> Examples:
    """The examples of a TFDS split string over the named splits.

    Raises:
      UserError: for a bad split string or a split that is not there.
    """
    sizes = {name: len(examples) for name, examples in self.splits.items()}
    parts = splits_lib.resolve(split, sizes, self.name)
    return Selection(tuple((self.splits[name], start, stop)
                           for name, start, stop in parts))

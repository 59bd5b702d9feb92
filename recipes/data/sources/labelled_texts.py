"""Labelled text: documents and their classes, for a text classifier.

A text source opened with a label column (recipes/data/sources/texts.py)
gives each document's label as stored. Here they become class ids by the
rule of images (recipes/data/sources/hf_source.py): integer labels are the
ids themselves, named '0' to the largest; string labels are the class names,
sorted, label i the i-th. The classes are those of every split together, so
that an id means the same class in each.

`classes` keeps only the documents of the classes it names (e.g. a handful
of the fortunes' collections): their ids are then those of the names kept,
sorted the same way.
"""

import dataclasses
from typing import Sequence

import numpy as np

from recipes.data.sources.texts import TextSource, Texts
from recipes.runtime.errors import UserError


@dataclasses.dataclass(frozen=True)
class LabelledText:
  """A dataset of documents with a class each."""

  name: str  # The source, for messages and the manifest.
  column: str
  label_column: str
  class_names: tuple[str, ...]  # Class i's name at i.
  splits: dict[str, Texts]
  labels: dict[str, np.ndarray]  # int32 class ids, in each split's order.


def parse_classes(classes: str) -> tuple[str, ...]:
  """The class names of a comma-separated list ('' gives ())."""
  return tuple(c.strip() for c in classes.split(',') if c.strip())


def labelled(source: TextSource, classes: Sequence[str] = ()
             ) -> LabelledText:
  """The class ids of `source`'s labels, keeping only `classes` if given.

  Args:
    source: text opened with a label column.
    classes: the class names to keep; empty: all.

  Returns:
    The documents and their classes.

  Raises:
    UserError: no label column, integer labels below 0 or mixed with
      strings, a class of `classes` that the labels do not have, fewer than
      two classes, or a split left without documents.
  """
  column = source.label_column
  if not column:
    raise UserError(f'{source.name}: a classifier needs labels; name the '
                    'label column with --label_column.')
  values = [v for labels in source.labels.values() for v in labels]
  kinds = {type(v) for v in values}
  if len(kinds) > 1:
    raise UserError(f'label {column!r} of {source.name} mixes integers and '
                    'strings; give every row a class of the same kind.')
  if kinds == {int}:
    if min(values) < 0:
      raise UserError(f'label {column!r} of {source.name} has {min(values)};'
                      ' integer classes are 0 or more.')
    names = tuple(str(i) for i in range(max(values) + 1))
    found = {str(v) for v in values}
  else:
    names = tuple(sorted(set(values)))
    found = set(names)
  ids = {name: i for i, name in enumerate(names)}
  keep = tuple(dict.fromkeys(classes))
  if keep:
    missing = [c for c in keep if c not in found]
    if missing:
      raise UserError(f'label {column!r} of {source.name} has no class '
                      f'{missing[0]!r} (it has {_some(sorted(found))}); '
                      'name classes it has with --classes.')
    names = tuple(sorted(keep, key=ids.get))
    ids = {name: i for i, name in enumerate(names)}
    found = set(names)
  if len(found) < 2:
    raise UserError(f'label {column!r} of {source.name} has one class '
                    f'({_some(sorted(found))}); a classifier needs two or '
                    'more: name another label column or give more data.')
  splits, labels = {}, {}
  for split, texts in source.splits.items():
    classes_of = np.asarray([ids.get(str(v), -1)
                             for v in source.labels[split]], np.int32)
    rows = np.flatnonzero(classes_of >= 0)
    if not rows.size:
      raise UserError(f"split '{split}' of {source.name} has no document of "
                      f'the classes {_some(names)}.')
    splits[split] = texts if rows.size == len(texts) else _Rows(texts, rows)
    labels[split] = classes_of[rows]
  return LabelledText(source.name, source.column, column, names, splits,
                      labels)


def _some(names: Sequence[str]) -> str:
  shown = ', '.join(repr(n) for n in names[:8])
  return shown + (f', ... ({len(names)} in all)' if len(names) > 8 else '')


class _Rows:
  """Some documents of a split, by index: those of the classes kept."""

  def __init__(self, texts: Texts, rows: np.ndarray):
    self._texts, self._rows = texts, rows

  def __len__(self) -> int:
    return len(self._rows)

  def read(self, indices: Sequence[int]) -> list[str]:
    return self._texts.read([int(self._rows[i]) for i in indices])

  def describe(self, index: int) -> str:
    return self._texts.describe(int(self._rows[index]))

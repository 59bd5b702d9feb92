"""Documents of text read by index: the common form of JSONL files, parquet
files and Hugging Face datasets' text columns.

A text source (recipes/data/sources/jsonl_source.py, parquet_source.py,
hf_source.py's `open_text`) offers its named splits as `Texts`: the text of
any document by index, in any order, so that `python -m recipes.data.prepare
SRC DST --tokenizer=...` tokenizes a split shard by shard, each shard a
pure function of its documents. Rows without text (null or '') are not
documents: a split keeps only the rows with text, and a split with none
is an error when opened, before anything is written.

Labelled text (a label column named, `label_column`) also gives each
document's label as the source stores it, an int or a string:
recipes/data/sources/labelled_texts.py makes them class ids.
"""

import dataclasses
from typing import Protocol, Sequence

import numpy as np

from recipes.runtime.errors import UserError

DEFAULT_COLUMN = 'text'


class Texts(Protocol):
  """One split: documents, by index."""

  def __len__(self) -> int:
    """How many documents."""
    ...

  def read(self, indices: Sequence[int]) -> list[str]:
    """The texts of the documents at `indices`, in that order.

    Raises:
      UserError: a document could not be read; the message names it.
    """
    ...

  def describe(self, index: int) -> str:
    """Where document `index` comes from (a line of a file, a row of a
    split), for messages."""
    ...


@dataclasses.dataclass(frozen=True)
class TextSource:
  """A dataset of documents: its named splits, read from `column`."""

  name: str  # For messages and the manifest: 'jsonl:/data/web.jsonl', ...
  column: str
  splits: dict[str, Texts]
  label_column: str = ''  # '': text without labels.
  # Each split's label of each of its documents, in the order of `splits`.
  labels: dict[str, list] = dataclasses.field(default_factory=dict)


def empty(split: str, source: str, column: str) -> UserError:
  """The error for a split without text."""
  return UserError(f"column {column!r} of split '{split}' of {source} has no "
                   'text (every row is empty or null); name the text column '
                   'with --text_column, or leave the split out with '
                   '--splits.')


def no_label_column(where: str, column: str, names) -> UserError:
  """The error for a label column that is not there."""
  return UserError(f'{where} has no label column {column!r} (it has '
                   f'{", ".join(names)}); name the label column with '
                   '--label_column.')


def check_label(value, where: str, column: str):
  """`value` if it is a label (an int or a non-empty string).

  Raises:
    UserError: naming `where` (a line, a row) and the column.
  """
  if isinstance(value, bool) or not isinstance(value, (int, str)) or (
      value == ''):
    raise UserError(f'{where}: label {column!r} is {value!r}, not a class '
                    '(an integer or a name); fix the row or name the label '
                    'column with --label_column.')
  return value


class ArrowTexts:
  """A text column of an Arrow table as `Texts` (parquet files, Hugging
  Face datasets): the rows with text, read by index."""

  def __init__(self, column, split: str, source: str, name: str):
    """Finds the rows with text; reads no text into Python yet.

    Args:
      column: a pyarrow (Chunked)Array of strings, or of bytes that must be
        UTF-8.
      split: the split's name, for messages.
      source: the source, for messages.
      name: the column's name, for messages.

    Raises:
      UserError: a column of another type, bytes that are not UTF-8, or no
        row with text.
    """
    import pyarrow as pa  # pylint: disable=g-import-not-at-top
    import pyarrow.compute as pc  # pylint: disable=g-import-not-at-top
    self._where = f"split '{split}' of {source}"
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(
        column.type):
      column = self._utf8(column, name)
    elif not (pa.types.is_string(column.type) or
              pa.types.is_large_string(column.type)):
      raise UserError(f'column {name!r} of {self._where} holds '
                      f'{column.type}, not text; name the text column with '
                      '--text_column.')
    has_text = pc.fill_null(pc.greater(pc.utf8_length(column), 0), False)
    self._rows = np.flatnonzero(has_text.to_numpy(zero_copy_only=False))
    if not self._rows.size:
      raise empty(split, source, name)
    self._column = column

  def _utf8(self, column, name: str):
    """Bytes as text; a UserError naming the first row that is not UTF-8."""
    import pyarrow as pa  # pylint: disable=g-import-not-at-top
    try:
      return column.cast(pa.large_string())
    except pa.ArrowInvalid:
      for row, value in enumerate(column.to_pylist()):
        try:
          (value or b'').decode('utf-8')
        except UnicodeDecodeError as e:
          raise UserError(
              f'row {row} of {self._where} is not UTF-8 text (byte '
              f'{value[e.start]:#04x} at offset {e.start} of column '
              f'{name!r}); fix the data or name another column with '
              '--text_column.') from None
      raise

  def labels(self, column, name: str) -> list:
    """The label of each row with text, from the Arrow `column` of the same
    rows.

    Raises:
      UserError: a label that is null or neither an integer nor a string.
    """
    values = column.take(self._rows).to_pylist()
    for index, value in enumerate(values):
      check_label(value, self.describe(index), name)
    return values

  def __len__(self) -> int:
    return len(self._rows)

  def read(self, indices: Sequence[int]) -> list[str]:
    rows = self._rows[np.asarray(indices, np.int64)]
    return self._column.take(rows).to_pylist()

  def describe(self, index: int) -> str:
    return f'row {self._rows[index]} of {self._where}'

"""JSONL files as documents: `jsonl:/data/web.jsonl`, `jsonl:/data/corpus`.

One JSON object a line, its text in a column ('text' unless named). A file
is the split 'train'; a folder's NAME.jsonl files are the splits NAME
(train.jsonl, validation.jsonl). Opening reads every line once: each must
be UTF-8 JSON with the column a string or null, so a bad line is found
before anything is written, and only the offsets of the lines with text
are kept (a document is then one seek and one line away).
"""

import builtins
import json
import os
from typing import Sequence

import numpy as np

from recipes.data.sources import texts as texts_lib
from recipes.runtime.errors import UserError

SUFFIX = '.jsonl'


def open(path: str, column: str = texts_lib.DEFAULT_COLUMN,  # pylint: disable=redefined-builtin
         label_column: str = '') -> texts_lib.TextSource:
  """The JSONL file or folder of them at `path` (without 'jsonl:'), with
  each document's label from `label_column` where one is named.

  Raises:
    UserError: no such file or folder, a folder without .jsonl files, a
      line that is not UTF-8 or JSON or has no text column (or label), or
      a split without text; one line naming the file and line.
  """
  path = os.path.abspath(os.path.expanduser(path))
  source = f'jsonl:{path}'
  if os.path.isdir(path):
    files = {name[:-len(SUFFIX)]: os.path.join(path, name)
             for name in sorted(os.listdir(path)) if name.endswith(SUFFIX)}
    if not files:
      raise UserError(f'{source}: the folder holds no {SUFFIX} files; name '
                      'them by split (train.jsonl, validation.jsonl).')
  elif os.path.isfile(path):
    files = {'train': path}
  else:
    raise UserError(f'{source}: there is no file or folder {path}.')
  column = column or texts_lib.DEFAULT_COLUMN
  splits = {split: _Lines(file, column, split, source, label_column)
            for split, file in files.items()}
  return texts_lib.TextSource(
      source, column, splits, label_column,
      {split: lines.labels for split, lines in splits.items()}
      if label_column else {})


class _Lines:
  """One file's lines with text, as `Texts`."""

  def __init__(self, file: str, column: str, split: str, source: str,
               label_column: str = ''):
    self._file, self._column = file, column
    offsets, lengths, numbers = [], [], []
    self.labels = []  # Of the lines with text, where label_column is named.
    try:
      with builtins.open(file, 'rb') as f:
        offset = 0
        for number, line in enumerate(f, 1):
          if self._text(line, number) is not None:
            if label_column:
              self.labels.append(self._label(line, number, label_column))
            offsets.append(offset)
            lengths.append(len(line))
            numbers.append(number)
          offset += len(line)
    except OSError as e:
      raise UserError(f'cannot read {file} ({e.strerror or e}).') from None
    if not offsets:
      raise texts_lib.empty(split, source, column)
    self._offsets = np.asarray(offsets, np.int64)
    self._lengths = np.asarray(lengths, np.int64)
    self._numbers = np.asarray(numbers, np.int64)

  def _text(self, line: bytes, number: int) -> str | None:
    """The text of a line, or None if it has none (a blank line, null,
    '')."""
    if not line.strip():
      return None
    where = f'line {number} of {self._file}'
    try:
      decoded = line.decode('utf-8')
    except UnicodeDecodeError as e:
      raise UserError(f'{where} is not UTF-8 (byte {line[e.start]:#04x} at '
                      f'offset {e.start} of the line); JSONL files are UTF-8 '
                      'text: fix or remove the line.') from None
    try:
      row = json.loads(decoded)
    except (ValueError, RecursionError) as e:
      raise UserError(f'{where} is not JSON ({e}); fix or remove the '
                      'line.') from None
    if not isinstance(row, dict) or self._column not in row:
      keys = ', '.join(row) if isinstance(row, dict) else type(row).__name__
      raise UserError(f'{where} has no {self._column!r} (it has {keys}); '
                      'name the text column with --text_column.')
    text = row[self._column]
    if text is not None and not isinstance(text, str):
      raise UserError(f'{where}: {self._column!r} is a '
                      f'{type(text).__name__}, not text; name the text '
                      'column with --text_column.')
    return text or None

  def _label(self, line: bytes, number: int, column: str):
    """The label of a line with text (checked JSON already)."""
    row = json.loads(line)
    where = f'line {number} of {self._file}'
    if column not in row:
      raise texts_lib.no_label_column(where, column, row)
    return texts_lib.check_label(row[column], where, column)

  def __len__(self) -> int:
    return len(self._offsets)

  def read(self, indices: Sequence[int]) -> list[str]:
    found = []
    with builtins.open(self._file, 'rb') as f:
      for index in indices:
        f.seek(int(self._offsets[index]))
        line = f.read(int(self._lengths[index]))
        text = self._text(line, int(self._numbers[index]))
        if text is None:
          raise UserError(f'{self.describe(index)} changed since it was '
                          'read; run the same command again.')
        found.append(text)
    return found

  def describe(self, index: int) -> str:
    return f'line {self._numbers[index]} of {self._file}'

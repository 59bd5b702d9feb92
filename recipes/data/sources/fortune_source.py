"""Fortune files as documents: `fortune:/usr/share/games/fortunes`.

The text files of the `fortune` program (Debian's `fortunes` package ships
2.6 MB of English in 15,000 quotations, jokes and short poems): entries
separated by lines that hold only '%'. A file is one collection; a folder's
collections are the files NAME with the index NAME.dat that `strfile`
writes beside each, read in name order.

Every entry is one document. The splits are 'train' and 'validation':
an entry is in validation when the CRC-32 of its UTF-8 text is divisible by
20 (about 5%), so the split of an entry does not depend on which files are
read, and an entry found in two files is in the same split both times.

Labelled (`label_column='collection'`), an entry's label is the name of
the collection (file) it comes from: art, computers, zippy, ...
"""

import builtins
import os
import zlib
from typing import Sequence

from recipes.data.sources import texts as texts_lib
from recipes.runtime.errors import UserError

SEPARATOR = '%'
INDEX_SUFFIX = '.dat'  # strfile's index, beside each collection.
VALIDATION_EVERY = 20  # 1 in VALIDATION_EVERY entries, by their CRC-32.
LABEL_COLUMN = 'collection'  # The one label: the file an entry is from.


def open(path: str, column: str = '',  # pylint: disable=redefined-builtin
         label_column: str = '') -> texts_lib.TextSource:
  """The fortune file, or folder of them, at `path` (without 'fortune:');
  with `label_column='collection'`, each entry labelled with its file's
  name.

  Raises:
    UserError: no such file or folder, a folder without fortune files, a
      text column named (fortune files have none), a label column other
      than 'collection', a file that is not UTF-8, or no entries.
  """
  path = os.path.abspath(os.path.expanduser(path))
  source = f'fortune:{path}'
  if column and column != texts_lib.DEFAULT_COLUMN:
    raise UserError(f'{source}: fortune files have no columns; leave out '
                    f'--text_column={column}.')
  if label_column and label_column != LABEL_COLUMN:
    raise UserError(f'{source}: the one label of fortune files is '
                    f"{LABEL_COLUMN!r} (the file an entry comes from), not "
                    f'{label_column!r}; set --label_column={LABEL_COLUMN}.')
  if os.path.isdir(path):
    files = [os.path.join(path, name) for name in sorted(os.listdir(path))
             if os.path.isfile(os.path.join(path, name + INDEX_SUFFIX))
             and os.path.isfile(os.path.join(path, name))]
    if not files:
      raise UserError(f'{source}: the folder holds no fortune files (a file '
                      f'NAME with NAME{INDEX_SUFFIX} beside it); give the '
                      'folder of the fortunes package, e.g. '
                      'fortune:/usr/share/games/fortunes.')
  elif os.path.isfile(path):
    files = [path]
  else:
    raise UserError(f'{source}: there is no file or folder {path}; install '
                    'the fortunes package (apt-get install fortunes) or '
                    'give another path.')
  splits = {'train': [], 'validation': []}
  for file in files:
    for number, text in _entries(file):
      held_out = zlib.crc32(text.encode('utf-8')) % VALIDATION_EVERY == 0
      splits['validation' if held_out else 'train'].append(
          (text, f'entry {number} of {file}', os.path.basename(file)))
  for split, entries in splits.items():
    if not entries:
      raise UserError(f'{source} has no entries for its {split} split; '
                      'give more fortune files.')
  return texts_lib.TextSource(
      source, texts_lib.DEFAULT_COLUMN,
      {split: _Entries(entries) for split, entries in splits.items()},
      label_column, {split: [e[2] for e in entries]
                     for split, entries in splits.items()}
      if label_column else {})


def _entries(file: str) -> list[tuple[int, str]]:
  """(number, text) of each entry of `file` with text, numbered from 1."""
  try:
    with builtins.open(file, 'rb') as f:
      data = f.read()
  except OSError as e:
    raise UserError(f'cannot read {file} ({e.strerror or e}).') from None
  try:
    text = data.decode('utf-8')
  except UnicodeDecodeError as e:
    line = data.count(b'\n', 0, e.start) + 1
    raise UserError(f'line {line} of {file} is not UTF-8 (byte '
                    f'{data[e.start]:#04x}); fortune files are read as UTF-8 '
                    'text: convert the file (iconv) or leave it out.'
                    ) from None
  entries, lines = [], []
  for line in text.replace('\r\n', '\n').split('\n') + [SEPARATOR]:
    if line == SEPARATOR:
      entry = '\n'.join(lines).strip('\n')
      if entry.strip():
        entries.append((len(entries) + 1, entry))
      lines = []
    else:
      lines.append(line)
  return entries


class _Entries:
  """One split's entries, held in memory, as `Texts`."""

  def __init__(self, entries: list[tuple[str, str, str]]):
    self._entries = entries

  def __len__(self) -> int:
    return len(self._entries)

  def read(self, indices: Sequence[int]) -> list[str]:
    return [self._entries[int(i)][0] for i in indices]

  def describe(self, index: int) -> str:
    return self._entries[index][1]

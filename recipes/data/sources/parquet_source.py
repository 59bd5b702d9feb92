"""Parquet files as documents: `parquet:/data/web.parquet`,
`parquet:/data/corpus`.

A file is the split 'train'; a folder's files are split by name as the Hub
names them: the part before the first '-' or '.' (train-00000-of-00002.parquet
and train-00001-of-00002.parquet are 'train', test.parquet is 'test'). The
text column is read with pyarrow into memory (only that column); larger
corpora are read memory-mapped through `hf:` (recipes/data/sources/
hf_source.py), which also reads parquet files.
"""

import os
import re

from recipes.data.sources import texts as texts_lib
from recipes.runtime.errors import UserError

SUFFIX = '.parquet'


def open(path: str, column: str = texts_lib.DEFAULT_COLUMN,  # pylint: disable=redefined-builtin
         label_column: str = '') -> texts_lib.TextSource:
  """The parquet file or folder of them at `path` (without 'parquet:').

  Raises:
    UserError: pyarrow not installed, no such file or folder, a file
      pyarrow cannot read, no such column or one that is not text, bytes
      that are not UTF-8, a split without text, or (`label_column` named)
      no such label column or a label that is not a class.
  """
  try:
    import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise UserError(f'parquet: files need pyarrow ({e}): pip install '
                    "'jax-model-zoo[text]'.") from None
  path = os.path.abspath(os.path.expanduser(path))
  source = f'parquet:{path}'
  if os.path.isdir(path):
    splits: dict[str, list[str]] = {}
    for name in sorted(os.listdir(path)):
      if name.endswith(SUFFIX):
        split = re.split(r'[-.]', name, maxsplit=1)[0]
        splits.setdefault(split, []).append(os.path.join(path, name))
    if not splits:
      raise UserError(f'{source}: the folder holds no {SUFFIX} files.')
  elif os.path.isfile(path):
    splits = {'train': [path]}
  else:
    raise UserError(f'{source}: there is no file or folder {path}.')
  column = column or texts_lib.DEFAULT_COLUMN
  found, labels = {}, {}
  columns = [column, label_column] if label_column else [column]
  for split, files in splits.items():
    tables = []
    for file in files:
      try:
        names = pq.read_schema(file).names
        if column not in names:
          raise UserError(f'{file} has no column {column!r} (its columns: '
                          f'{", ".join(names)}); name the text column with '
                          '--text_column.')
        if label_column and label_column not in names:
          raise texts_lib.no_label_column(file, label_column, names)
        tables.append(pq.read_table(file, columns=columns))
      except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is both.
        raise UserError(f'{file} cannot be read as parquet ('
                        f'{" ".join(str(e).split())[:200]}).') from None
    import pyarrow as pa  # pylint: disable=g-import-not-at-top
    try:
      table = pa.concat_tables(tables)
    except pa.ArrowInvalid as e:
      raise UserError(f'the files of split {split!r} of {source} have '
                      f'different column types ({e}).') from None
    found[split] = texts_lib.ArrowTexts(table.column(column), split, source,
                                        column)
    if label_column:
      labels[split] = found[split].labels(table.column(label_column),
                                          label_column)
  return texts_lib.TextSource(source, column, found, label_column, labels)

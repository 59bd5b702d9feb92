"""Text prepared into token sequences on a run's first use, as TFDS prepares
its datasets: `--config.dataset=fortune:/usr/share/games/fortunes
--config.tokenizer=bytes --config.seq_len=256` trains with one command.

The text is tokenized and packed by `python -m recipes.data.prepare`'s rules
into a directory named by what it was made from: the source, the
tokenizer (its file's checksum), the sequence length, the text column (and
for a classifier the label column and the classes kept) and the size and
time of each local file of the source. A later run with the
same settings reads that directory; one with other settings, or after the
text changed, prepares another beside it. Nothing is ever deleted.

Processes of one run that share the directory prepare it once: the first
takes a lock beside it and writes, the others wait for the lock and then
find it complete (a host of a multi-host job prepares its own copy, the same
bytes, where the directory is not shared).
"""

import contextlib
import fcntl
import hashlib
import json
import os
from typing import Iterator

from absl import logging

from recipes.data import prepare
from recipes.data.sources import array_records
from recipes.data.text import tokenizer as tokenizer_lib
from recipes.runtime.errors import UserError

DEFAULT_DIR = '~/.cache/jax-model-zoo/tokens'
TEXT_ONLY = prepare.TEXT_ONLY  # Sources of text only: jsonl, parquet, ...
TEXT = (*TEXT_ONLY, 'hf')  # The sources a tokenizer reads.


def tokens_dataset(dataset: str, tokenizer: str, seq_len: int, column: str,
                   data_dir: str = '', label_column: str = '',
                   classes: str = '') -> str:
  """`tokens:DIR` for the text `dataset` prepared with these settings,
  preparing it first where no run has.

  Args:
    dataset: jsonl:PATH, parquet:PATH, hf:NAME_OR_PATH or fortune:PATH.
    tokenizer: a tokenizer file or folder, or 'bytes'.
    seq_len: tokens in each packed sequence.
    column: the text column; '': 'text'.
    data_dir: the local folder that holds prepared directories; '':
      DEFAULT_DIR.
    label_column: labelled text for a classifier: the column of labels
      (recipes/data/text/labelled_records.py); '': packed sequences.
    classes: with label_column, the classes kept (comma-separated); '':
      all.

  Raises:
    UserError: a dataset that is not text, no seq_len, a data_dir that is
      not a local folder, or whatever preparing it raises (one line each).
  """
  prefix, _, where = dataset.partition(':')
  if prefix not in TEXT or not where:
    raise UserError(f'tokenizer={tokenizer!r} tokenizes text, and dataset '
                    f'{dataset!r} is not text: give jsonl:PATH, parquet:PATH, '
                    'hf:NAME_OR_PATH or fortune:PATH, or tokens:DIR (already '
                    "prepared) with --config.tokenizer=''.")
  if seq_len < 1:
    raise UserError(f'text is packed into sequences of seq_len tokens, and '
                    f'seq_len is {seq_len}; set --config.seq_len=N, e.g. '
                    '256.')
  if '://' in data_dir:
    raise UserError(f'data_dir {data_dir} is not a local folder: text is '
                    'prepared into local files. Set --config.data_dir to a '
                    'local folder, or prepare it with python -m '
                    'recipes.data.prepare and copy it.')
  root = os.path.abspath(os.path.expanduser(data_dir or DEFAULT_DIR))
  if prefix != 'hf':
    where = os.path.abspath(os.path.expanduser(where))
  source = f'{prefix}:{where}'
  name = os.path.basename(where.rstrip('/')) or prefix
  dst = os.path.join(root, f'{prefix}-{name}-{seq_len}-'
                     f'{_key(source, where, tokenizer, seq_len, column)}'
                     + (f'-{_labels_key(label_column, classes)}'
                        if label_column else ''))
  with _waiting_lock(root, dst + '.lock'):
    # The manifest is written last: there, the directory is complete.
    if not os.path.isfile(os.path.join(dst, array_records.MANIFEST)):
      logging.info('Preparing %s with tokenizer %s into %s, once: later '
                   'runs with the same settings read it.', source, tokenizer,
                   dst)
      prepare.prepare(source, dst, text=prepare.Text(
          tokenizer, seq_len, column, label_column, classes))
  return f'tokens:{dst}'


def _key(source: str, where: str, tokenizer: str, seq_len: int,
         column: str) -> str:
  """12 hex digits that change with any setting or local file of the
  source."""
  files = []
  for folder, _, names in sorted(os.walk(where)) if os.path.isdir(
      where) else [(os.path.dirname(where), [], [os.path.basename(where)])]:
    for name in sorted(names):
      with contextlib.suppress(OSError):
        stat = os.stat(os.path.join(folder, name))
        files.append([os.path.join(folder, name), stat.st_size,
                      stat.st_mtime_ns])
  loaded = tokenizer_lib.load(tokenizer)  # UserError for a bad one.
  settings = [source, loaded.path, loaded.sha256, seq_len, column or 'text',
              files]
  return hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:12]


def _labels_key(label_column: str, classes: str) -> str:
  """8 hex digits that change with the label column and the classes."""
  return hashlib.sha256(json.dumps([label_column, classes]).encode()
                        ).hexdigest()[:8]


@contextlib.contextmanager
def _waiting_lock(root: str, path: str) -> Iterator[None]:
  """Holds an exclusive lock on `path`, waiting while another process of
  this machine holds it."""
  try:
    os.makedirs(root, exist_ok=True)
    handle = open(path, 'a')  # pylint: disable=consider-using-with
  except OSError as e:
    raise UserError(f'cannot write in {root} ({e.strerror or e}), where '
                    'text is prepared; set --config.data_dir to a writable '
                    'folder.') from None
  with handle:
    fcntl.flock(handle, fcntl.LOCK_EX)  # Released when closed.
    yield

"""The files a run was trained on, kept in WORKDIR/data_files.json.

The data order is a function of the seed, the step and the list of
examples: a run resumed on an image folder whose files were added, removed
or replaced would silently train in another order than the first run's.
The first run records a fingerprint of each split it reads from such files
(Dataset.files): for each folder, how many files and a hash of their names
and sizes, enough to say where the data changed without keeping the whole
list. A later run that reads a recorded split must find the same files, or
stops before writing anything, unless `config.allow_changed_data`.
"""

import hashlib
import os
from typing import Sequence

import jax
from absl import logging

from recipes.checkpoint import records
from recipes.runtime import storage
from recipes.runtime.errors import UserError

FILE = 'data_files.json'


def fingerprint(files: Sequence[tuple[str, int | None]]
                ) -> dict[str, list]:
  """{folder: [number of files, hash of their names and sizes]}.

  Args:
    files: (name relative to the dataset's folder, size or None), in order.
  """
  folders = {}
  for name, size in files:
    folder = folders.setdefault(os.path.dirname(name), [0, hashlib.sha256()])
    folder[0] += 1
    folder[1].update(f'{name}\t{size}\n'.encode())
  return {name: [count, digest.hexdigest()[:16]]
          for name, (count, digest) in folders.items()}


def _valid(recorded) -> bool:
  return isinstance(recorded, dict) and all(
      isinstance(folders, dict) and all(
          isinstance(entry, list) and len(entry) == 2
          and isinstance(entry[0], int) and isinstance(entry[1], str)
          for entry in folders.values())
      for folders in recorded.values())


def check_and_record(workdir: str, files: dict[str, Sequence], dataset: str,
                     allow_changed: bool):
  """Records the fingerprint of each split in `files`, or checks it against
  the one recorded for that split.

  Args:
    workdir: the run's directory.
    files: {split string: (name, size) of its files} (Dataset.files); {}
      for data not read from such files (nothing is checked or written).
    dataset: the config's dataset, for the message.
    allow_changed: go on with changed files (logging what changed), and
      record them as they are now.

  Raises:
    UserError: a split's files changed and `allow_changed` is False.
  """
  if not files:
    return
  file = storage.path(workdir) / FILE
  recorded = (records.read(file, _valid, 'the JSON of folders, counts and '
                           'hashes this file holds') if file.exists() else {})
  now = {split: fingerprint(listing) for split, listing in files.items()}
  for split, folders in now.items():
    if split in recorded and recorded[split] != folders:
      changed = _changes(recorded[split], folders)
      more = (f' (and {len(changed) - 1} more folder'
              f'{"s" * (len(changed) > 2)})' if len(changed) > 1 else '')
      message = (f'split {split!r} of {dataset} is not the files {workdir} '
                 f'was trained on: {changed[0]}{more}')
      if not allow_changed:
        raise UserError(
            f'{message}; a resumed run would see its examples in another '
            'order. Restore the files, use another --workdir, or set '
            '--config.allow_changed_data=True to go on with them as they '
            'are.')
      logging.warning('%s; going on with them as they are '
                      '(allow_changed_data).', message)
  if {**recorded, **now} != recorded and jax.process_index() == 0:
    records.write(file, {**recorded, **now})


def _changes(before: dict[str, list], after: dict[str, list]) -> list[str]:
  """What changed, a phrase per folder, in the folders' order."""
  changes = []
  for folder in sorted(before.keys() | after.keys()):
    if before.get(folder) == after.get(folder):
      continue
    name = repr(folder or '.')
    was, count = before.get(folder, [0])[0], after.get(folder, [0])[0]
    if count != was:
      changes.append(f'folder {name} has {count} files, had {was}')
    else:
      changes.append(f'the {count} files of folder {name} have other names '
                     'or sizes')
  return changes

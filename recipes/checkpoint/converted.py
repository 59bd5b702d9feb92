"""A converted model as a checkpoint that `--config.init_from=DIR` reads.

The layout is that of the recipes' own checkpoints
(recipes/checkpoint/store.py): orbax's CheckpointManager in DIR with one
step, `DIR/0/default`, a PyTree {'params': ..., 'batch_stats': ...} (batch
statistics only for models that have them). Next to it, `DIR/model.json`
records the zoo model, the `zoo.create` arguments the weights need, the
source and the file.
"""

import contextlib
import json
import os
from typing import Any

import orbax.checkpoint as ocp

from recipes.runtime import storage
from zoo.convert.transfer import ConversionError, Converted

MODEL_FILE = 'model.json'
# In the names of what orbax writes before a checkpoint is complete.
UNFINISHED = '.orbax-checkpoint-tmp'


def save(converted: Converted, directory: str | os.PathLike,
         file: str) -> dict[str, Any]:
  """Writes `converted` (from `file`) to `directory`, which must be empty
  or new; returns what model.json says.

  Args:
    converted: the converted model's variables, name and arguments.
    directory: where to write it: new, or empty (gs:// too).
    file: the source weights file it was converted from.

  Returns:
    The record written to `directory`/model.json.

  Raises:
    ConversionError: `directory` is a file, or is not empty.
  """
  path = storage.path(directory)  # gs:// too; local paths made absolute.
  existed = path.exists()
  if existed:
    if not path.is_dir():
      raise ConversionError(f'{directory} is a file; give a new or empty '
                            'directory.')
    if any(UNFINISHED not in entry.name for entry in path.iterdir()):
      raise ConversionError(f'{directory} is not empty; give a new or empty '
                            'directory (nothing there is overwritten).')
    _empty(path)  # Left by a conversion stopped while writing.
  tree = {k: v for k, v in converted.variables.items() if v}
  record = {'model': converted.name, 'model_kwargs': converted.kwargs,
            'source': converted.source, 'file': str(storage.path(file)),
            'not_carried_over': {k: v for k, v in converted.ignored.items()
                                 if v != 'a step counter'}}
  try:
    with ocp.CheckpointManager(
        path, item_handlers=ocp.StandardCheckpointHandler(),
        options=ocp.CheckpointManagerOptions(create=True)) as mngr:
      mngr.save(0, args=ocp.args.StandardSave(tree))
      mngr.wait_until_finished()
    (path / MODEL_FILE).write_text(json.dumps(record, indent=2) + '\n')
  except BaseException:  # A full disk, Ctrl-C: free the space now.
    # orbax's threads may still be writing, so some of the unfinished
    # checkpoint can stay; the next save into `directory` removes it.
    with contextlib.suppress(OSError):
      _empty(path)
      if not existed:
        path.rmdir()
    raise
  return record


def _empty(path):
  """Removes what the directory `path` holds."""
  for entry in path.iterdir():
    if entry.is_dir():
      entry.rmtree(missing_ok=True)
    else:
      entry.unlink(missing_ok=True)

"""Small JSON records kept beside a run's checkpoints (class_names.json,
data_files.json; config.json and a converted directory's model.json as
export reads them): read back with one line for a damaged one, written
whole.
"""

import json
from typing import Any, Callable

from etils import epath

from recipes.runtime import storage
from recipes.runtime.errors import UserError


def read(file: epath.Path, valid: Callable[[Any], bool], what: str,
         advice: str = 'restore it, or delete it if the data has not changed'
         ) -> Any:
  """The JSON value in `file`, which `valid` accepts.

  Args:
    file: the record.
    valid: whether a parsed value has the record's form.
    what: the form, for the message ('a JSON list of names').
    advice: what to do about a damaged one, for the message.

  Raises:
    UserError: the file is not such JSON (binary, cut short, garbled).
  """
  try:
    value = json.loads(file.read_bytes().decode('utf-8'))
    if valid(value):
      return value
  except ValueError:  # Not UTF-8, not JSON.
    pass
  raise UserError(f'{file} is damaged (not {what}); {advice}.')


def write(file: epath.Path, value: Any):
  """Writes `value` as JSON, whole: another process never reads half of it
  (storage.write_whole)."""
  storage.write_whole(file, json.dumps(value, indent=1))

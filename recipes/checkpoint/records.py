"""Small JSON records a run keeps in its workdir (class_names.json,
data_files.json): read back with one line for a damaged one, written whole.
"""

import json
from typing import Any, Callable

from etils import epath

from recipes.runtime.errors import UserError


def read(file: epath.Path, valid: Callable[[Any], bool], what: str) -> Any:
  """The JSON value in `file`, which `valid` accepts.

  Args:
    file: the record.
    valid: whether a parsed value has the record's form.
    what: the form, for the message ('a JSON list of names').

  Raises:
    UserError: the file is not such JSON (binary, cut short, garbled).
  """
  try:
    value = json.loads(file.read_bytes().decode('utf-8'))
    if valid(value):
      return value
  except ValueError:  # Not UTF-8, not JSON.
    pass
  raise UserError(f'{file} is damaged (not {what}); restore it, or delete '
                  'it if the data has not changed.')


def write(file: epath.Path, value: Any):
  """Writes `value` as JSON in a file beside, then renames it: another
  process never reads half of it."""
  part = file.with_name(file.name + '.part')
  part.write_text(json.dumps(value, indent=1))
  part.replace(file)

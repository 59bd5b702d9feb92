"""The class names a run was trained on, kept in WORKDIR/class_names.json.

A label is only an index: a run resumed (or evaluated) on a folder whose
classes differ would silently train 'cat' into the output that meant 'dog'.
The first run records the names of its data's labels; every later run in
the workdir must read the same names, or stops before writing anything.
"""

import jax

from recipes.checkpoint import records
from recipes.runtime import storage
from recipes.runtime.errors import UserError

FILE = 'class_names.json'


def check_and_record(workdir: str, class_names: tuple[str, ...],
                     dataset: str):
  """Records `class_names` in `workdir`, or checks them against the names
  recorded there.

  Args:
    workdir: the run's directory.
    class_names: label i's name at i; () for data without names (nothing
      is checked or written).
    dataset: the config's dataset, for the message.

  Raises:
    UserError: the workdir was trained on other classes.
  """
  if not class_names:
    return
  file = storage.path(workdir) / FILE
  if file.exists():
    recorded = tuple(records.read(
        file, lambda names: isinstance(names, list) and all(
            isinstance(name, str) for name in names), 'a JSON list of names'))
    if recorded != tuple(class_names):
      difference = _first_difference(recorded, class_names)
      raise UserError(
          f'{workdir} was trained on {_describe(recorded)}, but {dataset} '
          f'has {_describe(class_names)}{difference}; use the same data, or '
          'another --workdir.')
  elif jax.process_index() == 0:
    records.write(file, list(class_names))


def _describe(names) -> str:
  shown = ', '.join(map(repr, names[:4]))
  return f'{len(names)} classes ({shown}{", ..." if len(names) > 4 else ""})'


def _first_difference(a, b) -> str:
  for label, (x, y) in enumerate(zip(a, b)):
    if x != y:
      return f' (label {label} was {x!r}, is {y!r})'
  return ''

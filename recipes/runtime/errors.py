"""The one exception type for mistakes a user can fix, a check that several
commands share, and a library's error told in one line."""

import re


class UserError(Exception):
  """Bad input (config, data, flags): printed as one line, without traceback.

  The message says what was wrong and what to do about it.
  """


def check_divisible(name: str, batch_size: int, num_devices: int,
                    devices: str = 'devices'):
  """Checks that a batch size splits evenly across the devices.

  Args:
    name: what the batch size is called in the message, e.g. a flag.
    batch_size: the batch size to check.
    num_devices: how many parts it must split into.
    devices: what the parts are called in the message.

  Raises:
    UserError: `batch_size` is not a positive multiple of `num_devices`;
      the message suggests the nearest ones.
  """
  if batch_size <= 0:
    raise UserError(f'{name} is {batch_size}; it must be a positive multiple '
                    f'of the {num_devices} {devices}, e.g. {num_devices}.')
  if batch_size % num_devices:
    below = max(num_devices, batch_size // num_devices * num_devices)
    above = (batch_size // num_devices + 1) * num_devices
    nearest = f'{below} or {above}' if below != above else f'{above}'
    raise UserError(
        f'{name} {batch_size} is not divisible by the {num_devices} {devices}; '
        f'use a multiple of {num_devices}, e.g. {nearest}.')


# An error line longer than this is cut in the middle: a value repeated whole
# (a 100,000-character model name) would bury what to do, said at the end.
MAX_LINE = 1000


def shorten(line: str, limit: int = MAX_LINE) -> str:
  """`line` cut in the middle to at most about `limit` characters.

  Args:
    line: an error line.
    limit: the most characters kept, beginning and end together.

  Returns:
    The line, or its first two thirds and last third of `limit` around a
    note of how many characters were left out.
  """
  if len(line) <= limit:
    return line
  head, tail = limit * 2 // 3, limit // 3
  return (f'{line[:head]} [... {len(line) - head - tail:,} characters left '
          f'out ...] {line[-tail:]}')


def root_cause(error: BaseException) -> BaseException:
  """The innermost error of a chain, e.g. the storage error that orbax
  wrapped in its own.

  Args:
    error: an exception, possibly raised `from` another.

  Returns:
    The last exception along the `__cause__` chain (`error` if none).
  """
  while error.__cause__ is not None:
    error = error.__cause__
  return error


_TENSORSTORE_NOTES = re.compile(
    r" ?\[(tensorstore_spec|source locations|os_error_code)='[^']*'\]")


def describe(error: BaseException) -> str:
  """The error in one line; of a long message the end, where storage
  errors name their cause (e.g. 'No space left on device').

  Args:
    error: the exception to describe.

  Returns:
    'TypeName: message', whitespace collapsed; a message over 240
    characters is cut to '...' and its last 200.
  """
  # TensorStore (under orbax) ends its messages, after the reason, with
  # notes for its own developers: the whole spec as JSON, source lines.
  text = _TENSORSTORE_NOTES.sub('', ' '.join(str(error).split()))
  if len(text) > 240:
    text = '...' + text[-200:]
  return f'{type(error).__name__}: {text}'

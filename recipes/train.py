"""Command-line entry point: `python -m recipes.train --config=... --workdir=...`.

Any config field can be overridden, e.g. `--config.batch_size=256`; unknown
fields are rejected. Mistakes in the input end the run with one line saying
what was wrong and what to do (details in the log at debug level).
"""

import difflib
import logging as logging_lib
import os
import re
import sys
import tempfile

import jax
import ml_collections
from absl import app, flags, logging
from ml_collections import config_flags

from recipes import distributed, input_pipeline, loop
from recipes.errors import UserError

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Training config file (see configs/).', lock_config=True)
_WORKDIR = flags.DEFINE_string(
    'workdir', None, 'Directory for summaries and the final config.')
_DISTRIBUTED = flags.DEFINE_bool(
    'distributed', False, 'Initialize jax.distributed with auto-detection '
    '(TPU pods, SLURM); local multi-process runs are set up by launch/local.sh '
    'through environment variables instead.')
flags.mark_flags_as_required(['config', 'workdir'])


class _ConfigFileParser(flags.ArgumentParser):
  """config_flags' parser of --config, with a bad file as a UserError.

  config_flags defers a missing file's error to the first use of the config
  and puts the traceback of others into the flag error. Keeps the loaded
  config to explain bad overrides of it.
  """

  def __init__(self, parser: flags.ArgumentParser):
    self._parser = parser
    self.config = None

  def parse(self, argument):
    path = argument.split(':', 1)[0]  # path:argument_of_get_config
    if not os.path.isfile(path):
      raise UserError(f'config file {path!r} not found; give the path of a '
                      'config, e.g. --config=configs/fashion_mnist_pmap.py.')
    try:
      config = self._parser.parse(argument)
      config.keys()  # A file that could not be read raises here.
    except SyntaxError as e:
      raise UserError(f'config file {path!r} has a syntax error in line '
                      f'{e.lineno}: {e.msg}; fix the file.') from e
    except Exception as e:  # pylint: disable=broad-except
      cause = e.__cause__ or e.__context__ or e  # What config_flags wrapped.
      raise UserError(f'config file {path!r} failed to load '
                      f'({type(cause).__name__}: {_one_line(cause)}); fix '
                      'the file.') from e
    self.config = config
    return config

  def flag_type(self):
    return self._parser.flag_type()


_CONFIG_FILE = _ConfigFileParser(flags.FLAGS[_CONFIG.name].parser)
flags.FLAGS[_CONFIG.name].parser = _CONFIG_FILE


def _one_line(error: BaseException) -> str:
  # config_flags wraps some messages in quotes with escaped newlines.
  text = str(error.args[0] if error.args else error)
  text = text.replace("\\'", "'").replace('\\n', ' ')
  if len(text) > 1 and text[0] == text[-1] == "'":
    text = text[1:-1]
  return ' '.join(text.split())


class _OnlyWarningsFromLibraries(logging_lib.Filter):
  """Orbax logs every checkpoint read and write at INFO; keep its warnings."""

  def filter(self, record):
    return record.levelno >= logging_lib.WARNING or (
        f'{os.sep}orbax{os.sep}' not in record.pathname)


def _prepare_workdir(workdir: str):
  """Creates the workdir and checks that files can be written there.

  (The loop writes config.json once the config has passed its checks, so a
  bad input leaves the one of the run before in place.)
  """
  try:
    os.makedirs(workdir, exist_ok=True)
    with tempfile.TemporaryFile(dir=workdir):
      pass
  except OSError as e:
    raise UserError(f'cannot write to workdir {workdir!r} ({e.strerror}); '
                    'choose a writable --workdir.') from e


def run(config, workdir: str, use_distributed: bool = False):
  """Trains with `config` in `workdir`; a UserError exits with one line."""
  try:
    input_pipeline.hide_accelerators_from_tensorflow()
    distributed.initialize(use_distributed)
    logging.info('JAX %s: process %d of %d, %d local devices %s, %d in all.',
                 jax.__version__, jax.process_index(), jax.process_count(),
                 jax.local_device_count(), jax.local_devices(),
                 jax.device_count())
    _prepare_workdir(workdir)
    return loop.train_and_evaluate(config, workdir)
  except UserError as e:
    logging.debug('Details of the error below:', exc_info=True)
    sys.exit(f'error: {e}')


def _field_names(config, prefix: str = '') -> list[str]:
  names = []
  for key, value in config.items():
    names.append(prefix + key)
    if isinstance(value, ml_collections.ConfigDict):
      names += _field_names(value, f'{prefix}{key}.')
  return names


def _unknown_field(config, argv) -> str | None:
  """'unknown config field ...' with the close names, for an override."""
  names = _field_names(config)
  for arg in argv:
    match = re.match(r'--?(?:no)?config\.([^=]+)', arg)
    if match and match[1] not in names:
      field = match[1]
      others = [n for n in names if not field.startswith(n + '.')]
      close = [f"'{n}'" for n in difflib.get_close_matches(field, others)]
      if not close:
        return (f"unknown config field '{field}'; see configs/default.py for "
                'all fields.')
      if len(close) > 1:
        close = [', '.join(close[:-1]), close[-1]]
      return (f"unknown config field '{field}'; did you mean "
              f"{' or '.join(close)}? See configs/default.py for all fields.")
  return None


def _wrong_type(config, error: flags.IllegalFlagValueError) -> str | None:
  """'config field x must be an int, not ...' for a value it cannot parse."""
  # absl's text is f'flag --{name}={value}: {error of the parser}'.
  text = str(error).removesuffix(f': {error.__context__}')
  match = re.fullmatch(r'flag --config\.([\w.]+)=(.*)', text, re.DOTALL)
  if not match or match[1] not in _field_names(config):
    return None
  field, value = match.groups()
  current = config
  for key in field.split('.'):
    current = current[key]
  if isinstance(current, ml_collections.ConfigDict):
    current = current.to_dict()
  kind = {bool: 'true or false', int: 'an int', float: 'a float'}.get(
      type(current), f'a {type(current).__name__}')
  example = str(current).lower() if isinstance(current, bool) else current
  return (f'config field {field} must be {kind}, not {value!r}; e.g. '
          f'--config.{field}={example}.')


def _flag_error(error: Exception, argv) -> str:
  """One line for a flag parsing error, naming the flag and how to fix it."""
  message = None
  if isinstance(error, UserError):
    message = str(error)
  elif _CONFIG_FILE.config is not None:
    if isinstance(error, (AttributeError, KeyError)):  # From overrides.
      message = _unknown_field(_CONFIG_FILE.config, argv)
    elif isinstance(error, flags.IllegalFlagValueError):
      message = _wrong_type(_CONFIG_FILE.config, error)
  return message or _one_line(error)


def _parse_flags(argv):
  """absl's flag parsing, with mistakes in the flags reported in one line."""
  try:
    return flags.FLAGS(argv)
  except Exception as e:  # pylint: disable=broad-except
    logging.debug('Flag parsing failed:', exc_info=True)
    sys.exit(f'error: {_flag_error(e, argv)}')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.get_absl_handler().addFilter(_OnlyWarningsFromLibraries())
  run(_CONFIG.value, _WORKDIR.value, _DISTRIBUTED.value)


if __name__ == '__main__':
  app.run(main, flags_parser=_parse_flags)

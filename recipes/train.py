"""Trains a model: `python -m recipes.train --config=FILE --workdir=DIR`.

The config file (configs/ has one per recipe and dataset) sets the fields
that `--help` lists; `--config.FIELD=VALUE` overrides any of them, e.g.
`--config.batch_size=256`, and unknown fields are rejected. The same command
again resumes from the workdir's latest checkpoint. Mistakes in the input end
the run with one line saying what was wrong and what to do (`--verbosity=1`
first on the command line puts the details in the log).
"""

import difflib
import importlib.machinery
import importlib.util
import os
import re
import sys
import textwrap
import uuid

import jax
import ml_collections
from absl import app, flags, logging
from ml_collections import config_flags

from recipes.config import defaults as default
from recipes.runtime import library_noise

library_noise.import_tensorflow()  # Before anything else loads it.

# pylint: disable-next=wrong-import-position
from recipes import loop
from recipes.config import validation
from recipes.runtime import storage
from recipes.data import in_memory
from recipes.parallel import distributed
from recipes.runtime.errors import UserError

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'The config file, e.g. configs/fashion_mnist_pmap.py.',
    lock_config=True)
_WORKDIR = flags.DEFINE_string(
    'workdir', None, 'Directory (or gs:// path) for checkpoints, summaries '
    'and the final config; a run resumes from it.')
_DISTRIBUTED = flags.DEFINE_bool(
    'distributed', False, 'Initialize jax.distributed with auto-detection '
    '(TPU pods, SLURM); local multi-process runs are set up by launch/local.sh '
    'through environment variables instead.')
flags.mark_flags_as_required(['config', 'workdir'])


class _ConfigFileParser(flags.ArgumentParser):
  """Loads --config=FILE[:ARGUMENT]: FILE's get_config(ARGUMENT), locked.

  Replaces config_flags' own parser, which splits at the first ':' (so a
  directory with one in its name cannot be used), defers a missing file's
  error to the first use of the config and puts tracebacks into flag errors:
  here each failure is one UserError. Keeps the loaded config to explain bad
  overrides of it.
  """

  def __init__(self):
    self.config = None

  def parse(self, argument):
    path, args = _split_config_argument(argument)
    # A config may import its neighbours as a package ('from configs import
    # default'): the directory above the config's is importable while it
    # loads, from whatever directory the command runs.
    above = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    sys.path.insert(0, above)
    try:
      loader = importlib.machinery.SourceFileLoader('config_file', path)
      module = importlib.util.module_from_spec(
          importlib.util.spec_from_loader(loader.name, loader))
      loader.exec_module(module)
      config = module.get_config(*args)
    except SyntaxError as e:
      raise UserError(f'config file {path!r} has a syntax error in line '
                      f'{e.lineno}: {e.msg}; fix the file.') from e
    except Exception as e:  # pylint: disable=broad-except
      raise UserError(f'config file {path!r} failed to load '
                      f'({type(e).__name__}: {_one_line(e)}); fix the '
                      'file.') from e
    finally:
      sys.path.remove(above)
    if not isinstance(config, ml_collections.ConfigDict):
      raise UserError(f'get_config() in {path!r} returned a '
                      f'{type(config).__name__}, not an ml_collections.'
                      'ConfigDict; start from recipes/defaults.get_config() '
                      'and return that.')
    config.lock()  # Overrides may change fields, not add them.
    self.config = config
    return config

  def flag_type(self):
    return 'config object'


def _split_config_argument(argument: str) -> tuple[str, tuple[str, ...]]:
  """(file, get_config's arguments) of FILE[:ARGUMENT]; FILE may hold ':'."""
  if os.path.isfile(argument):
    return argument, ()
  colons = [i for i, c in enumerate(argument) if c == ':']
  for i in reversed(colons):
    if os.path.isfile(argument[:i]):
      return argument[:i], (argument[i + 1:],)
  given = ' (FILE:ARGUMENT passes ARGUMENT to get_config)' if colons else ''
  raise UserError(f'config file {argument!r} not found{given}; give the '
                  'path of a config, e.g. '
                  '--config=configs/fashion_mnist_pmap.py.')


_CONFIG_FILE = _ConfigFileParser()
flags.FLAGS[_CONFIG.name].parser = _CONFIG_FILE


def _one_line(error: BaseException) -> str:
  # config_flags wraps some messages in quotes with escaped newlines.
  text = str(error.args[0] if error.args else error)
  text = text.replace("\\'", "'").replace('\\n', ' ')
  if len(text) > 1 and text[0] == text[-1] == "'":
    text = text[1:-1]
  return ' '.join(text.split())


def _prepare_workdir(workdir: str):
  """Creates the workdir and checks that files can be written there, by
  writing and removing a small file (for a bucket nothing else tells).

  (The loop writes config.json once the config has passed its checks, so a
  bad input leaves the one of the run before in place.)
  """
  path = storage.path(workdir)
  probe = path / f'.write-test-{uuid.uuid4().hex}'
  try:
    path.mkdir(parents=True, exist_ok=True)
    probe.write_bytes(b'')
    probe.unlink()
  except Exception as e:  # pylint: disable=broad-except
    # OSError from disks; storage clients raise their own errors too.
    reason = (e.strerror if isinstance(e, OSError) and e.strerror else
              f'{type(e).__name__}: {" ".join(str(e).split())[:200]}')
    raise UserError(f'cannot write to workdir {workdir!r} ({reason}); '
                    'choose a writable --workdir.') from e


def run(config, workdir: str, use_distributed: bool = False):
  """Trains with `config` in `workdir`; a UserError exits with one line."""
  try:
    validation.check(config)  # Before anything is loaded or written.
    in_memory.hide_accelerators_from_tensorflow()
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


def _fields(config, prefix: str = ''):
  """(name, value) of every field, nested ones as 'mesh' and 'mesh.data'."""
  for key, value in config.items():
    yield prefix + key, value
    if isinstance(value, ml_collections.ConfigDict):
      yield from _fields(value, f'{prefix}{key}.')


def _field_names(config) -> list[str]:
  return [name for name, _ in _fields(config)]


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
        return (f"unknown config field '{field}'; see recipes/config/defaults.py for "
                'all fields.')
      if len(close) > 1:
        close = [', '.join(close[:-1]), close[-1]]
      return (f"unknown config field '{field}'; did you mean "
              f"{' or '.join(close)}? See recipes/config/defaults.py for all fields.")
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


def _missing_flags() -> str:
  missing = [f'--{holder.name}' for holder in (_CONFIG, _WORKDIR)
             if flags.FLAGS[holder.name].value is None]
  return (f'{" and ".join(missing)} {"is" if len(missing) == 1 else "are"} '
          'missing; e.g. python -m recipes.train '
          '--config=configs/fashion_mnist_pmap.py --workdir=/tmp/fashion_mnist '
          '(--help lists the flags and config fields).')


def _flag_error(error: Exception, argv) -> str:
  """One line for a flag parsing error, naming the flag and how to fix it."""
  message = None
  if isinstance(error, UserError):
    message = str(error)
  elif 'must have a value other than None' in str(error):
    message = _missing_flags()
  elif _CONFIG_FILE.config is not None:
    if isinstance(error, (AttributeError, KeyError)):  # From overrides.
      message = _unknown_field(_CONFIG_FILE.config, argv)
    elif isinstance(error, flags.IllegalFlagValueError):
      message = _wrong_type(_CONFIG_FILE.config, error)
  return message or _one_line(error)


_HELP_FLAGS = ('-h', '-?', '-help', '--help', '--helpshort', '--helpfull')


def _config_argument(argv) -> str | None:
  for i, arg in enumerate(argv):
    if arg in ('-config', '--config') and i + 1 < len(argv):
      return argv[i + 1]
    if arg.startswith(('-config=', '--config=')):
      return arg.split('=', 1)[1]
  return None


def _help(argv) -> str:
  """This command's flags, and the config's fields with their values.

  (absl's own help would list the flags of every library loaded, TensorFlow's
  and absltest's among them, and not the config fields.)
  """
  path = _config_argument(argv)
  config = _CONFIG_FILE.parse(path) if path else default.get_config()
  lines = [__doc__.strip(), '', 'Flags:']
  for holder in (_CONFIG, _WORKDIR, _DISTRIBUTED):
    flag = flags.FLAGS[holder.name]
    name = f'--[no]{flag.name}' if flag.boolean else f'--{flag.name}'
    lines.append(textwrap.fill(f'{name}: {flag.help}', 79,
                               initial_indent='  ', subsequent_indent='    '))
  lines.append('  --verbosity=1: the log at debug level, with the details of '
               'errors.')
  values = (f'as {_split_config_argument(path)[0]} sets them' if path else
            'and their defaults')
  lines += ['', textwrap.fill(
      f'Config fields {values} (recipes/config/defaults.py says what each does); '
      'override any with --config.FIELD=VALUE:', 79)]
  fields = [(name, value) for name, value in _fields(config)
            if not isinstance(value, ml_collections.ConfigDict) or not value]
  width = max(len(name) for name, _ in fields)
  for name, value in fields:
    if isinstance(value, ml_collections.ConfigDict):
      value = value.to_dict()  # An empty one: its repr is not '{}'.
    lines.append(f'  {name:<{width}}  {value!r}')
  if '--helpfull' in argv:
    lines += [flags.FLAGS.module_help(module) for module in ('absl.logging',
                                                             'absl.app')]
  return '\n'.join(lines)


def _parse_flags(argv):
  """absl's flag parsing, with mistakes in the flags reported in one line."""
  try:
    if any(arg in _HELP_FLAGS for arg in argv[1:]):
      print(_help(argv))
      sys.exit(0)
    return flags.FLAGS(argv)
  except Exception as e:  # pylint: disable=broad-except
    logging.debug('Flag parsing failed:', exc_info=True)
    sys.exit(f'error: {_flag_error(e, argv)}')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if not logging.level_debug():  # --verbosity=1 shows everything.
    library_noise.keep_out(logging.get_absl_handler())
  try:
    run(_CONFIG.value, _WORKDIR.value, _DISTRIBUTED.value)
  except SystemExit as e:  # A UserError: 'error: ...'.
    _exit_at_once(e.code)
  _exit_at_once(0)


def _exit_at_once(status: int | str | None):
  """Ends the process now that the run's checkpoints and summaries are
  written, without Python's teardown of tf.data's iterators and JAX's
  runtime: that took up to 30 s after a stop by SIGTERM, when a scheduler
  sends SIGKILL (SLURM: 30 s after `scancel`). Every process stopped at the
  same step, so they leave jax.distributed together.

  `status` as sys.exit takes it: a message means an error, printed here.
  Then nothing is waited for: after a failed save, orbax's writer threads
  wait minutes for a directory that will never exist.
  """
  if not status and jax.distributed.is_initialized():
    jax.distributed.shutdown()
  logging.flush()
  if isinstance(status, str):
    print(status, file=sys.stderr)
    status = 1
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status or 0)


if __name__ == '__main__':
  app.run(main, flags_parser=_parse_flags)

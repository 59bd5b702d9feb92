"""Command-line entry point: `python -m recipes.train --config=... --workdir=...`.

Any config field can be overridden, e.g. `--config.batch_size=256`; unknown
fields are rejected. Mistakes in the input end the run with one line saying
what was wrong and what to do (details in the log at debug level).
"""

import logging as logging_lib
import os
import sys

import jax
import tensorflow as tf
from absl import app, flags, logging
from ml_collections import config_flags

from recipes import distributed
from recipes import loop
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


def _hide_accelerators_from_tensorflow():
  # tf.data runs on the host; TensorFlow must not grab GPU/TPU memory.
  for kind in ('GPU', 'TPU'):
    tf.config.set_visible_devices([], kind)


def _prepare_workdir(config, workdir: str):
  """Creates the workdir; process 0 writes the final config there."""
  try:
    os.makedirs(workdir, exist_ok=True)
    if jax.process_index() == 0:
      with open(os.path.join(workdir, 'config.json'), 'w') as f:
        f.write(config.to_json_best_effort(indent=2, sort_keys=True))
  except OSError as e:
    raise UserError(f'cannot write to workdir {workdir!r} ({e.strerror}); '
                    'choose a writable --workdir.') from e


def run(config, workdir: str, use_distributed: bool = False):
  """Trains with `config` in `workdir`; a UserError exits with one line."""
  try:
    _hide_accelerators_from_tensorflow()
    distributed.initialize(use_distributed)
    logging.info('JAX %s: process %d of %d, %d local devices %s, %d in all.',
                 jax.__version__, jax.process_index(), jax.process_count(),
                 jax.local_device_count(), jax.local_devices(),
                 jax.device_count())
    _prepare_workdir(config, workdir)
    return loop.train_and_evaluate(config, workdir)
  except UserError as e:
    logging.debug('Details of the error below:', exc_info=True)
    sys.exit(f'error: {e}')


def _parse_flags(argv):
  """absl's flag parsing, with override mistakes reported in one line."""
  try:
    return flags.FLAGS(argv)
  except (AttributeError, KeyError) as e:  # From config_flags' overrides.
    logging.debug('Flag parsing failed:', exc_info=True)
    sys.exit(f'error: unknown config field {_one_line(e)}')
  except Exception as e:  # pylint: disable=broad-except
    logging.debug('Flag parsing failed:', exc_info=True)
    sys.exit(f'error: {_one_line(e)}')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.get_absl_handler().addFilter(_OnlyWarningsFromLibraries())
  config = _CONFIG.value
  try:
    config.keys()  # A config file that failed to load raises its error here.
  except Exception as e:  # pylint: disable=broad-except
    logging.debug('Loading the config failed:', exc_info=True)
    sys.exit(f'error: cannot load --config: {_one_line(e)}')
  run(config, _WORKDIR.value, _DISTRIBUTED.value)


if __name__ == '__main__':
  app.run(main, flags_parser=_parse_flags)

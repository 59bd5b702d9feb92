"""Trains a model: `python -m recipes.train --config=FILE --workdir=DIR`.

Without --workdir the run goes to a new runs/DATE-TIME_CONFIG/ in the current
directory, whose name is the command's first line.

The config file (configs/ has one per recipe and dataset) sets the fields
that `--help` lists; `--config.FIELD=VALUE` overrides any of them, e.g.
`--config.batch_size=256`, and unknown fields are rejected. The same command
again resumes from the workdir's latest checkpoint. Mistakes in the input end
the run with one line saying what was wrong and what to do (`--verbosity=1`
first on the command line puts the details in the log).
"""

import os
import sys
import time
import uuid

import jax
import numpy as np
from absl import app, logging
from jax.experimental import multihost_utils

from recipes.runtime import library_noise, startup

library_noise.import_tensorflow()  # Before anything else loads it.

# pylint: disable=wrong-import-position
from recipes import loop
from recipes.config import command_line, validation
from recipes.data.pipeline import in_memory
from recipes.parallel import distributed
from recipes.runtime import compilation_cache, errors, lease, storage
from recipes.runtime.errors import UserError

# pylint: enable=wrong-import-position


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


def _new_workdir(config_name: str) -> str:
  """runs/DATE-TIME_CONFIG, with a number after it if taken; in a
  multi-process run, the name process 0 chose, on every process."""
  base = f'runs/{time.strftime("%Y%m%d-%H%M%S")}_{config_name}'
  workdir, number = base, 1
  while os.path.exists(workdir):
    number += 1
    workdir = f'{base}_{number}'
  if jax.process_count() > 1:
    padded = np.frombuffer(workdir.encode().ljust(512), np.uint8)
    workdir = bytes(multihost_utils.broadcast_one_to_all(padded)).decode()
  return workdir.rstrip()


def run(config, workdir: str | None, use_distributed: bool = False,
        config_name: str = 'run'):
  """Runs `config` (trains, or evaluates with mode=eval) in `workdir`.

  Args:
    config: the checked or unchecked config; checked first.
    workdir: the run's directory, local or gs://; None: a new one (see
      `_new_workdir`), printed first. Not for mode=eval.
    use_distributed: initialize jax.distributed by auto-detection.
    config_name: names the new workdir.

  Returns:
    The final eval metrics (see loop.train_and_evaluate).

  Raises:
    SystemExit: with one line 'error: ...' for a mistake in the input.
  """
  try:
    validation.check(config)  # Before anything is loaded or written.
    if workdir is None and config.mode == 'eval':
      raise UserError('--workdir is missing: name the run to evaluate.')
    if workdir is not None:
      storage.checkpoint_path(workdir)  # Bad names are one line here.
    for location in (config.data_dir, config.init_from):
      if location:
        storage.path(location)
    in_memory.hide_accelerators_from_tensorflow()
    distributed.initialize(use_distributed)
    compilation_cache.use(config.compilation_cache_dir)
    if workdir is None:
      workdir = _new_workdir(config_name)
      if jax.process_index() == 0:
        print(f'Workdir: {workdir} (the same command with --workdir={workdir} '
              'resumes it)', flush=True)
    logging.info('JAX %s: process %d of %d, %d local devices %s, %d in all.',
                 jax.__version__, jax.process_index(), jax.process_count(),
                 jax.local_device_count(), jax.local_devices(),
                 jax.device_count())
    _prepare_workdir(workdir)
    if config.mode == 'eval':  # Reads checkpoints, beside a training run.
      return loop.train_and_evaluate(config, workdir)
    with lease.held(workdir):  # One training run per workdir.
      return loop.train_and_evaluate(config, workdir)
  except UserError as e:
    logging.debug('Details of the error below:', exc_info=True)
    sys.exit(f'error: {errors.shorten(str(e))}')
  except Exception as e:  # pylint: disable=broad-except
    cause = errors.root_cause(e)
    if not storage.unreachable(cause):
      raise
    logging.debug('Details of the error below:', exc_info=True)
    sys.exit(errors.shorten(
        f'error: the storage of {workdir} could not be reached '
        f'({errors.describe(cause)}). The checkpoints saved so far are kept; '
        'once it answers again, run the same command to resume.'))


def main(argv, mode: str | None = None):
  """The command: runs the flags' config, in `mode` if given."""
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if not logging.level_debug():  # --verbosity=1 shows everything.
    library_noise.keep_out(logging.get_absl_handler())
  config = command_line.CONFIG.value
  if mode:
    config.mode = mode
  path = command_line.CONFIG_FILE.path or 'defaults'
  name = os.path.splitext(os.path.basename(path))[0]
  try:
    run(config, command_line.WORKDIR.value, command_line.DISTRIBUTED.value,
        name)
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
  startup.loaded()
  app.run(main, flags_parser=command_line.parser('recipes.train', __doc__,
                                                 required=('config',)))

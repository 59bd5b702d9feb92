"""Starts JAX's multi-controller runtime when a launch asks for it.

Two ways in:
- `--distributed`, or RECIPES_DISTRIBUTED=1 in the environment (set by
  launch/pod.sh and launch/slurm.sbatch): calls `jax.distributed.initialize()`
  without arguments, so JAX detects the TPU pod or SLURM job itself.
- The environment variables that launch/local.py sets for each process:
  JAX_COORDINATOR_ADDRESS (host:port of process 0), JAX_NUM_PROCESSES and
  JAX_PROCESS_ID; with them, initialize() gets explicit arguments.
Must run before anything else touches JAX's devices; a program that runs
several times (train.run again, e.g. one evaluation after another) keeps the
runtime its first run started.
"""

import os

import jax
from absl import logging

from recipes.runtime.errors import UserError

_ENV = ('JAX_COORDINATOR_ADDRESS', 'JAX_NUM_PROCESSES', 'JAX_PROCESS_ID')


def initialize(requested: bool):
  """Initializes jax.distributed if requested or set up by the environment.

  Args:
    requested: the `--distributed` flag: initialize even without the
      environment variables (JAX then detects a TPU pod or SLURM job).

  Raises:
    UserError: if only some of the JAX_* variables are set.
  """
  if jax.distributed.is_initialized():  # By an earlier run of this program.
    return
  explicit = {name: os.environ.get(name) for name in _ENV}
  if any(explicit.values()):
    missing = [name for name, value in explicit.items() if not value]
    if missing:
      raise UserError(f'{", ".join(missing)} not set: a local multi-process '
                      f'run needs all of {", ".join(_ENV)} (launch/local.sh '
                      'sets them).')
    jax.distributed.initialize(
        coordinator_address=explicit['JAX_COORDINATOR_ADDRESS'],
        num_processes=int(explicit['JAX_NUM_PROCESSES']),
        process_id=int(explicit['JAX_PROCESS_ID']))
  elif requested or os.environ.get('RECIPES_DISTRIBUTED') == '1':
    jax.distributed.initialize()  # TPU pods and SLURM: JAX detects the rest.
  else:
    return
  logging.info('jax.distributed initialized: process %d of %d.',
               jax.process_index(), jax.process_count())


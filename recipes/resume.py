"""Where a run's state starts: the workdir's latest checkpoint, or the
parameters of another run (`config.init_from`)."""

import jax
import jax.numpy as jnp
from absl import logging
from flax import traverse_util

from recipes import checkpoints


def restore_latest(mngr, strategy, state):
  """The state of the latest checkpoint and its step, or (state, 0)."""
  restored, _ = checkpoints.restore_latest(
      mngr, strategy.checkpoint_target(state))
  if restored is None:
    return state, 0
  state = strategy.from_checkpoint(restored)
  step = int(strategy.to_host(state.step))
  logging.info('Resuming from the checkpoint of step %d in %s.', step,
               mngr.directory)
  return state, step


def init_from(path: str, strategy, state):
  """`state` with the parameters and batch statistics of another run's
  checkpoint (or a converted one) where they fit."""
  target = strategy.checkpoint_target(state)
  loaded, kept = checkpoints.load_params(
      path, {'params': target.params, 'batch_stats': target.batch_stats})
  whole = strategy.to_checkpoint(state)
  variables = traverse_util.flatten_dict(
      {'params': whole.params, 'batch_stats': whole.batch_stats}, sep='/')
  variables.update(loaded)
  variables = traverse_util.unflatten_dict(variables, sep='/')
  stats = sum(name.startswith('batch_stats/') for name in loaded)
  logging.info('Initialized %d parameter arrays%s from %s.',
               len(loaded) - stats,
               f' and {stats} batch statistics' if stats else '', path)
  if kept:
    logging.warning('Not in %s with the same shape, so trained from scratch: '
                    '%s.', path, ', '.join(kept))
  whole = whole.replace(params=variables['params'],
                        batch_stats=variables.get('batch_stats',
                                                  whole.batch_stats))
  if whole.ema_params is not None:
    # The average starts from the loaded parameters, as from initial ones.
    whole = whole.replace(ema_params=jax.tree.map(jnp.copy, whole.params))
  return strategy.from_checkpoint(whole)

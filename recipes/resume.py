"""Where a run's state starts: the workdir's latest checkpoint, or the
parameters of another run (`config.init_from`)."""

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
  """`state` with the parameters of another run's checkpoint where they fit."""
  target = strategy.checkpoint_target(state).params
  loaded, kept = checkpoints.load_params(path, target)
  whole = strategy.to_checkpoint(state)
  params = traverse_util.flatten_dict(whole.params, sep='/')
  params.update(loaded)
  logging.info('Initialized %d parameter arrays from %s.', len(loaded), path)
  if kept:
    logging.warning('Not in %s with the same shape, so trained from scratch: '
                    '%s.', path, ', '.join(kept))
  return strategy.from_checkpoint(
      whole.replace(params=traverse_util.unflatten_dict(params, sep='/')))

"""Train-state checkpoints in WORKDIR/checkpoints, written and read with orbax.

A checkpoint keeps each global array whole, not its layout: `restore` places
every array with the sharding of the target it is given, so a state saved
under one mesh (say data=8) restores onto another (data=4, tensor=2) or onto
fewer devices. The target is a TrainState of `jax.ShapeDtypeStruct`s carrying
the new shardings, e.g. `ShardedStrategy.abstract_state`.

Saving is asynchronous: `save` returns once the arrays are copied off the
devices and orbax writes them in the background (a checkpoint appears under
its step number only when complete). `manager(...).close()` waits for it.

Every process calls these functions; orbax writes each array's shards from
the processes that hold them.
"""

import os

import jax
import orbax.checkpoint as ocp
from absl import logging
from etils import epath
from flax import traverse_util
from jax.experimental import multihost_utils

from recipes.errors import UserError
from recipes.train_state import TrainState


def manager(workdir: str, max_to_keep: int | None = 3) -> ocp.CheckpointManager:
  """Manages the numbered checkpoints in `workdir`/checkpoints."""
  return ocp.CheckpointManager(
      os.path.join(os.path.abspath(workdir), 'checkpoints'),
      item_handlers=ocp.StandardCheckpointHandler(),
      options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                           create=True))


def save(mngr: ocp.CheckpointManager, step: int, state: TrainState):
  """Starts writing `state` (global arrays) as checkpoint `step`.

  The devices' copy may change as soon as this returns; the previous save,
  if still writing, is waited for first.
  """
  mngr.save(step, args=ocp.args.StandardSave(state))


def restore(mngr: ocp.CheckpointManager, target: TrainState,
            step: int | None = None) -> TrainState | None:
  """Checkpoint `step` (default: the latest) placed as `target` says.

  Returns None when there is no checkpoint.
  """
  step = mngr.latest_step() if step is None else step
  if step is None:
    return None
  return mngr.restore(step, args=ocp.args.StandardRestore(target))


def _shapes(tree) -> dict[str, tuple[int, ...]]:
  """{'params/Conv_0/kernel': shape, ...} for a state or its saved metadata."""

  def name(key):
    for field in ('key', 'name', 'idx'):
      if hasattr(key, field):
        return str(getattr(key, field))
    return str(key)

  return {'/'.join(name(k) for k in path): tuple(leaf.shape)
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _check_fits(saved: dict, wanted: dict, where: str):
  """A UserError naming the first array the checkpoint does not fit."""
  for name in list(wanted) + [n for n in saved if n not in wanted]:
    if saved.get(name) != wanted.get(name):
      there = f'shape {saved[name]}' if name in saved else 'missing'
      here = f'shape {wanted[name]}' if name in wanted else 'missing'
      raise UserError(
          f'the checkpoint {where} does not fit this run: {name} is {there} '
          f'there and {here} here (another model, size or optimizer?). '
          'Use another --workdir, or move its checkpoints away to start '
          'afresh.')


def _set_aside(mngr: ocp.CheckpointManager, step: int):
  """Renames an unreadable checkpoint so the run can write that step again."""
  path = os.path.join(str(mngr.directory), str(step))
  if jax.process_index() == 0:
    os.replace(path, f'{path}.unreadable')
  multihost_utils.sync_global_devices(f'set aside checkpoint {step}')
  mngr.reload()


def restore_latest(mngr: ocp.CheckpointManager, target: TrainState):
  """(state, step) from the latest readable checkpoint, or (None, 0).

  A checkpoint that cannot be read (truncated files, missing metadata) is set
  aside with a warning and the one before it is tried; an unfinished one (a
  leftover temporary directory) is ignored with a warning. One written for another
  model or optimizer is a UserError: it is kept and nothing is overwritten.
  """
  wanted = _shapes(target)
  for name in sorted(os.listdir(mngr.directory)):
    if '.orbax-checkpoint-tmp' in name:  # Orbax never lists these as steps.
      logging.warning('Ignoring %s: an unfinished checkpoint (the run was '
                      'stopped while saving it).',
                      os.path.join(str(mngr.directory), name))
  for step in sorted(mngr.all_steps(), reverse=True):
    where = os.path.join(str(mngr.directory), str(step))
    try:
      saved = _shapes(mngr.item_metadata(step))
    except Exception as e:  # pylint: disable=broad-except
      saved, error = None, e
    if saved is not None:
      _check_fits(saved, wanted, where)
      try:
        return restore(mngr, target, step), step
      except Exception as e:  # pylint: disable=broad-except
        error = e
    logging.warning('Checkpoint %s cannot be read (%s: %s); setting it aside '
                    'as %s.unreadable and trying the one before.', where,
                    type(error).__name__, str(error)[:200], where)
    _set_aside(mngr, step)
  return None, 0


def _step_directory(path: str) -> str:
  """The checkpoint directory `path` names: a step's directory, or the latest
  step of a checkpoints directory or of a run's workdir."""
  path = os.path.abspath(path)
  if os.path.isdir(os.path.join(path, 'default')):
    return path
  for directory in (os.path.join(path, 'checkpoints'), path):
    if os.path.isdir(directory):
      steps = [int(n) for n in os.listdir(directory) if n.isdigit()]
      if steps:
        return os.path.join(directory, str(max(steps)))
  raise UserError(f'no checkpoint found at --config.init_from={path!r}; give '
                  'a run\'s workdir, its checkpoints directory, or one step '
                  'directory in it.')


def load_params(path: str, target) -> tuple[dict, list[str]]:
  """Parameters from another run's checkpoint at `path`, e.g. to fine-tune.

  `target` is this run's params tree of `jax.ShapeDtypeStruct`s with
  shardings. Returns (the loaded parameters that have the same name and
  shape there, flat {'Dense_0/kernel': array}, and the names of the others,
  which the caller keeps as initialized -- typically a new classifier head).
  """
  directory = _step_directory(path)
  handler = ocp.PyTreeCheckpointHandler()
  try:
    saved = _shapes(
        handler.metadata(epath.Path(directory, 'default')).tree['params'])
  except Exception as e:  # pylint: disable=broad-except
    raise UserError(f'cannot read the checkpoint {directory} for '
                    f'--config.init_from ({type(e).__name__}: '
                    f'{str(e)[:200]}).') from e
  wanted = traverse_util.flatten_dict(target, sep='/')
  loadable = {name: leaf for name, leaf in wanted.items()
              if saved.get(name) == tuple(leaf.shape)}
  if not loadable:
    raise UserError(f'no parameter of this model has the same name and shape '
                    f'in {directory} (--config.init_from): another model?')
  item = {'params': traverse_util.unflatten_dict(loadable, sep='/')}
  restored = ocp.Checkpointer(handler).restore(
      epath.Path(directory, 'default'),
      args=ocp.args.PyTreeRestore(
          item=item, partial_restore=True,
          restore_args=ocp.checkpoint_utils.construct_restore_args(item)))
  loaded = traverse_util.flatten_dict(restored['params'], sep='/')
  return loaded, sorted(set(wanted) - set(loaded))

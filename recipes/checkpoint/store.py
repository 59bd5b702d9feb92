"""Train-state checkpoints in WORKDIR/checkpoints, written and read with orbax.

A checkpoint keeps each global array whole, not its layout: `restore` places
every array with the sharding of the target it is given, so a state saved
under one mesh (say data=8) restores onto another (data=4, tensor=2) or onto
fewer devices. The target is a TrainState of `jax.ShapeDtypeStruct`s carrying
the new shardings, e.g. `ShardedStrategy.abstract_state`.

Saving is asynchronous: `save` returns once the arrays are copied off the
devices and orbax writes them in the background (a checkpoint appears under
its step number only when complete). `manager(...).close()` waits for it.
Once the files are written, still in the background, their checksums are
written next to them (recipes/checkpoint/checksums.py) and checked before a
restore.
A save that fails is a UserError at the next `check_saved` or `save`.

Every process calls these functions; orbax writes each array's shards from
the processes that hold them.
"""

import contextlib
import dataclasses
import gc
import os
import sys

import jax
import orbax.checkpoint as ocp
from absl import logging
from etils import epath
from jax.experimental import multihost_utils

from recipes.checkpoint import checksums
from recipes.core.train_state import TrainState
from recipes.runtime import storage
from recipes.runtime.errors import UserError, describe, root_cause


# orbax writes an array that several devices hold whole in slices, one per
# copy, so that every host shares the writing; each slice is cut by a small
# program compiled for its shape and device (about 0.5 s of CPU at a run's
# first save of a small model on 8 devices). Under 1 MiB a slice saves no
# time, being a storage request either way: such an array is written whole
# by one device. Set on orbax's registered handler for jax.Array (its
# constructor's min_slice_bytes_for_replica_parallel): registering another
# would drop its array metadata store, and orbax warns at every override.
MIN_SLICE_BYTES = 1 << 20
ocp.type_handlers.get_type_handler(
    jax.Array)._min_slice_bytes_for_replica_parallel = MIN_SLICE_BYTES  # pylint: disable=protected-access


class _Handler(ocp.StandardCheckpointHandler):
  """orbax's handler for a tree of arrays, adding the checksums.

  orbax calls `finalize` in its background thread, on process 0 only, once
  every process has written its part and before the checkpoint is committed:
  so a committed checkpoint always has its checksums.
  """

  def finalize(self, directory: epath.Path):
    super().finalize(directory)
    # orbax merges each process's array database (ocdbt.process_N) into the
    # item's own; where it did not (it skips the merge when it cannot find
    # them, as under a path with '['), the checkpoint would read as empty:
    # it is never checksummed nor committed.
    parts = [p.name for p in directory.iterdir()
             if p.name.startswith('ocdbt.process_')]
    if parts and not (directory / 'manifest.ocdbt').exists():
      raise OSError(f'the checkpoint is incomplete: orbax did not merge '
                    f'{", ".join(sorted(parts))} into {directory}')
    checksums.write(directory)


@ocp.args.register_with_handler(_Handler, for_save=True)
@dataclasses.dataclass
class _Save(ocp.args.StandardSave):
  pass


@ocp.args.register_with_handler(_Handler, for_restore=True)
@dataclasses.dataclass
class _Restore(ocp.args.StandardRestore):
  pass


class _Manager(ocp.CheckpointManager):
  """orbax's manager, kept away from JAX's preemption sync point.

  That sync point belongs to the training loop (recipes/runtime/preemption.py
  counts its step boundaries). JAX agrees on where to stop from the number
  each process gave it last; orbax would also give it the step being saved,
  from the save and from its background thread once a save commits. That
  moves a process's number back, so the processes can agree on a boundary
  one of them has already passed (it trains on while the other saves alone)
  or both have (neither stops).
  The loop decides when to save, so the manager needs no answer of its own.
  """

  def reached_preemption(self, step: int) -> bool:
    del step
    return False


def manager(workdir: str | os.PathLike,
            max_to_keep: int | None = 3) -> ocp.CheckpointManager:
  """Manages the numbered checkpoints in `workdir`/checkpoints, keeping the
  newest `max_to_keep` (None: all).

  Args:
    workdir: the run's directory (local, or a bucket's gs:// path).
    max_to_keep: how many of the newest checkpoints to keep; None: all.

  Returns:
    An orbax CheckpointManager for `workdir`/checkpoints.
  """
  return _Manager(
      storage.path(workdir) / 'checkpoints',
      item_handlers=_Handler(),
      options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                           create=True))


@contextlib.contextmanager
def opened(workdir: str | os.PathLike, max_to_keep: int | None = 3):
  """`manager(...)` as a context that waits for the last save on exit.

  A save that failed then is a UserError. When the run is already ending
  with an error, that error is the one reported: the manager is closed
  without raising another.

  Args:
    workdir: the run's directory (local, or a bucket's gs:// path).
    max_to_keep: how many of the newest checkpoints to keep; None: all.

  Yields:
    The CheckpointManager, closed (its last save waited for) on exit.

  Raises:
    UserError: the last save failed (and the run was not already failing).
  """
  mngr = manager(workdir, max_to_keep)
  try:
    yield mngr
  except BaseException:
    try:
      # A save still writing to storage that does not answer would never
      # finish: the process ends without waiting for it.
      if not mngr.is_saving_in_progress():
        mngr.close()
    except Exception:  # pylint: disable=broad-except
      logging.debug('Closing the checkpoint manager failed too.',
                    exc_info=True)
    raise
  step = mngr.latest_step()
  try:
    mngr.close()
  except Exception as e:  # pylint: disable=broad-except
    raise _save_failed(mngr, step, e) from e


def _save_failed(mngr: ocp.CheckpointManager, step: int | None,
                 error: Exception) -> UserError:
  cause = root_cause(error)
  try:
    mngr.reload()  # What is on disk, without the failed save.
    earlier = [s for s in mngr.all_steps() if step is None or s < step]
    kept = (f'the last complete one is of step {max(earlier)}' if earlier
            else 'there is no complete one yet')
  except Exception:  # pylint: disable=broad-except
    # The storage itself failed: it cannot say what it holds either.
    kept = 'the ones saved before are kept'
  advice = ('Once the storage answers again, run the same command to resume.'
            if storage.unreachable(cause) else
            'Make room or make the directory writable, then run the same '
            'command again to resume.')
  return UserError(
      f'saving the checkpoint of step {step} in {mngr.directory} failed '
      f'({describe(cause)}); {kept}. {advice}')


def check_saved(mngr: ocp.CheckpointManager):
  """A UserError if the last save, once finished, has failed; quick.

  Args:
    mngr: the run's checkpoint manager.

  Returns:
    None; at once too while the last save is still writing.

  Raises:
    UserError: the last save has finished and failed.
  """
  if mngr.is_saving_in_progress():
    return
  step = mngr.latest_step()  # Still listed if its save failed.
  try:
    mngr.wait_until_finished()  # Returns at once; raises its error.
  except Exception as e:  # pylint: disable=broad-except
    raise _save_failed(mngr, step, e) from e


def save(mngr: ocp.CheckpointManager, step: int, state: TrainState):
  """Starts writing `state` (global arrays) as checkpoint `step`.

  The devices' copy may change as soon as this returns. The previous save,
  if still writing, is waited for first. A UserError if it or this one
  failed.

  Args:
    mngr: the run's checkpoint manager.
    step: the step number the checkpoint is saved as.
    state: the TrainState to save, of global arrays.

  Returns:
    None, once the arrays are copied off the devices.

  Raises:
    UserError: the previous save failed, or this one could not start.
  """
  previous = mngr.latest_step()
  try:
    mngr.wait_until_finished()
  except Exception as e:  # pylint: disable=broad-except
    raise _save_failed(mngr, previous, e) from e
  try:
    mngr.save(step, args=_Save(state))
  except Exception as e:  # pylint: disable=broad-except
    raise _save_failed(mngr, step, e) from e


def restore(mngr: ocp.CheckpointManager, target: TrainState,
            step: int | None = None) -> TrainState | None:
  """Checkpoint `step` (default: the latest) placed as `target` says.

  Returns None when there is no checkpoint.

  Args:
    mngr: the run's checkpoint manager.
    target: a TrainState of `jax.ShapeDtypeStruct`s with the shardings to
      place each array with.
    step: the checkpoint to read; default: the latest.

  Returns:
    The restored TrainState, or None when there is no checkpoint.
  """
  step = mngr.latest_step() if step is None else step
  if step is None:
    return None
  return mngr.restore(step, args=_Restore(target))


def array_shapes(tree) -> dict[str, tuple[int, ...]]:
  """{'params/Conv_0/kernel': shape, ...} for a state or its saved metadata.

  Args:
    tree: a state, or a checkpoint's metadata tree, of leaves with `shape`.

  Returns:
    A dict from each leaf's '/'-joined path to its shape.
  """

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
      cause = ('it was saved with a different --config.ema_decay (a moving '
               'average or none); resume with the setting it was saved with'
               if name.startswith('ema_params/') else
               'another model, size or optimizer?')
      raise UserError(
          f'the checkpoint {where} does not fit this run: {name} is {there} '
          f'there and {here} here ({cause}). Use another --workdir, or move '
          'its checkpoints away to start afresh.')


def _set_aside(mngr: ocp.CheckpointManager, step: int):
  """Renames a damaged checkpoint, keeping it, so the run can write that
  step again."""
  path = mngr.directory / str(step)
  if jax.process_index() == 0:
    path.rename(path.parent / f'{step}.unreadable')
  multihost_utils.sync_global_devices(f'set aside checkpoint {step}')
  mngr.reload()


def damage(directory: epath.Path) -> str | None:
  """What is wrong with the files of the checkpoint in `directory` (one
  step's, e.g. checkpoints/900), as process 0 finds it, or None.

  Every process calls it: one process reads the files, every process gets
  its answer.
  """
  found = None
  if jax.process_index() == 0:
    found = checksums.problem(directory / 'default')
  damaged = multihost_utils.broadcast_one_to_all(found is not None)
  return (found or 'found damaged by process 0') if damaged else None


@contextlib.contextmanager
def _leftovers_logged():
  """Errors left behind by a failed read, in the log at debug level.

  When orbax's read of a damaged file fails, its other reads still pending
  are abandoned: Python reports each when it is collected, and TensorStore's
  callbacks find orbax's event loop closed, each with a long traceback on
  stderr (through sys.unraisablehook). The failure itself is reported once,
  by the caller.
  """
  previous = sys.unraisablehook

  def log(unraisable):
    logging.debug('After a failed checkpoint read: %s: %s',
                  unraisable.exc_type.__name__, unraisable.exc_value)

  sys.unraisablehook = log
  try:
    yield
  finally:
    gc.collect()  # Abandoned reads are reported now, to `log`.
    sys.unraisablehook = previous


def restore_latest(mngr: ocp.CheckpointManager, target: TrainState):
  """(state, step) from the latest usable checkpoint, or (None, 0).

  - An unfinished checkpoint (the run was stopped while saving it) is never
    listed as a step; its leftover is named in a warning.
  - A damaged one (a file that does not match its checksum, is missing or
    cannot be read) is set aside as STEP.unreadable, with a warning naming
    the file, once an older one has been restored in its place.
  - When every checkpoint is damaged (or was set aside before), nothing is
    renamed and the run stops: a UserError listing them and saying how to
    start afresh. It never quietly starts again from step 1.
  - A complete, readable checkpoint of other shapes (another model, size or
    optimizer) is a UserError, and nothing is touched.

  Args:
    mngr: the run's checkpoint manager.
    target: a TrainState of `jax.ShapeDtypeStruct`s with the shardings to
      place each array with (e.g. `ShardedStrategy.abstract_state`).

  Returns:
    (state, step) of the newest usable checkpoint, or (None, 0) when there
    is none.

  Raises:
    UserError: every checkpoint is damaged, or the newest readable one does
      not fit `target`'s shapes.
  """
  wanted = array_shapes(target)
  # In a bucket the directory exists only once it holds a checkpoint.
  entries = (sorted(mngr.directory.iterdir()) if mngr.directory.exists()
             else [])
  for path in entries:
    if '.orbax-checkpoint-tmp' in path.name:
      logging.warning('Ignoring %s: an unfinished checkpoint (the run was '
                      'stopped while saving it).', path)
  damaged = []
  for step in sorted(mngr.all_steps(), reverse=True):
    where = mngr.directory / str(step)
    problem = damage(where)
    if problem is None:
      try:
        saved = array_shapes(mngr.item_metadata(step))
      except Exception as e:  # pylint: disable=broad-except
        problem = f'its metadata cannot be read ({describe(e)})'
      else:
        if not saved:  # Metadata files gone: not another model.
          problem = 'its metadata lists no arrays'
    if problem is None:
      _check_fits(saved, wanted, where)
      try:
        with _leftovers_logged():
          state = restore(mngr, target, step)
      except Exception as e:  # pylint: disable=broad-except
        problem = f'it cannot be read ({describe(e)})'
    if problem is not None:
      logging.warning('Checkpoint %s is damaged: %s.', where, problem)
      damaged.append(step)
      continue
    for newer in damaged:
      logging.warning('Setting the damaged checkpoint %s aside as '
                      '%s.unreadable.', mngr.directory / str(newer),
                      mngr.directory / str(newer))
      _set_aside(mngr, newer)
    return state, step
  set_aside = [p.name for p in entries if p.name.endswith('.unreadable')]
  if damaged or set_aside:
    names = [str(s) for s in damaged] + set_aside
    raise UserError(
        f'no usable checkpoint in {mngr.directory}: {", ".join(names)} '
        f'{"is" if len(names) == 1 else "are"} damaged (see the warnings '
        'above). To start afresh, move that directory away or use another '
        '--workdir.')
  return None, 0

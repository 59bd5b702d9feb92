"""Train-state checkpoints in WORKDIR/checkpoints, written and read with orbax.

A checkpoint keeps each global array whole, not its layout: `restore` places
every array with the sharding of the target it is given, so a state saved
under one mesh (say data=8) restores onto another (data=4, tensor=2) or onto
fewer devices. The target is a TrainState of `jax.ShapeDtypeStruct`s carrying
the new shardings, e.g. `ShardedStrategy.abstract_state`.

Every process calls these functions; orbax writes each array's shards from
the processes that hold them.
"""

import os

import orbax.checkpoint as ocp

from recipes.train_state import TrainState


def manager(workdir: str, max_to_keep: int | None = 3) -> ocp.CheckpointManager:
  """Manages the numbered checkpoints in `workdir`/checkpoints."""
  return ocp.CheckpointManager(
      os.path.join(os.path.abspath(workdir), 'checkpoints'),
      options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                           create=True))


def save(mngr: ocp.CheckpointManager, step: int, state: TrainState):
  """Writes `state` (global arrays) as checkpoint `step` and waits for it."""
  mngr.save(step, args=ocp.args.StandardSave(state))
  mngr.wait_until_finished()


def restore(mngr: ocp.CheckpointManager, target: TrainState,
            step: int | None = None) -> TrainState | None:
  """Checkpoint `step` (default: the latest) placed as `target` says.

  Returns None when there is no checkpoint.
  """
  step = mngr.latest_step() if step is None else step
  if step is None:
    return None
  return mngr.restore(step, args=ocp.args.StandardRestore(target))

"""Where a run's state starts: the workdir's latest checkpoint, or the
parameters of another run or a conversion (`config.init_from`) or of
published weights (`config.pretrained`, through
recipes/experiment.py's `given_weights`)."""

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from absl import logging
from etils import epath
from flax import traverse_util

from recipes.checkpoint import store
from recipes.runtime import storage
from recipes.runtime.errors import UserError


def restore_latest(mngr, strategy):
  """The state of the latest checkpoint and its step, or (None, 0).

  No initial state is needed (nor made): a resumed run skips creating one.

  Args:
    mngr: the run's checkpoint manager.
    strategy: the run's strategy, which places the restored arrays.

  Returns:
    (state, step): the restored state and its step, or (None, 0) where there
    is no checkpoint.

  Raises:
    UserError: no checkpoint is usable, or one does not fit this run (see
      `store.restore_latest`).
  """
  restored, _ = store.restore_latest(mngr, strategy.checkpoint_target())
  if restored is None:
    return None, 0
  state = strategy.from_checkpoint(restored)
  step = int(strategy.to_host(state.step))
  logging.info('Resuming from the checkpoint of step %d in %s.', step,
               mngr.directory)
  return state, step


def init_from(path: str, strategy, state):
  """`state` with the parameters and batch statistics of another run's
  checkpoint (or a converted one) where they fit.

  Args:
    path: another run's workdir, its checkpoints directory, one step
      directory, or a directory `python -m recipes.convert` wrote.
    strategy: the run's strategy, which places the arrays.
    state: the freshly initialized state to take the other arrays from.

  Returns:
    `state` with the loaded parameters and batch statistics (and its moving
    average, if kept, restarted from them).

  Raises:
    UserError: no checkpoint at `path`, or none of its parameters fits.
  """
  target = strategy.checkpoint_target()
  loaded, kept = load_params(
      path, {'params': target.params, 'batch_stats': target.batch_stats})
  return _start_from(loaded, kept, path, strategy, state)


def init_from_weights(variables: dict, name: str, strategy, state):
  """`state` with the variables of published weights where they fit (their
  name and shape), for --config.pretrained.

  Args:
    variables: the converted weights' {'params': ..., 'batch_stats': ...},
      nested dicts of numpy arrays, the same on every process.
    name: what to call them in the log, e.g. 'resnet50.tv2_in1k'.
    strategy: the run's strategy, which places the arrays.
    state: the freshly initialized state to take the other arrays from.

  Returns:
    `state` with the weights' parameters and batch statistics.

  Raises:
    UserError: none of the weights' parameters fits the model.
  """
  target = strategy.checkpoint_target()
  wanted = traverse_util.flatten_dict(
      {'params': target.params, 'batch_stats': target.batch_stats}, sep='/')
  given = traverse_util.flatten_dict(variables, sep='/')
  loaded = {
      key: jax.make_array_from_callback(
          leaf.shape, leaf.sharding,
          lambda index, a=given[key], dtype=leaf.dtype: a[index].astype(dtype))
      for key, leaf in wanted.items()
      if key in given and tuple(given[key].shape) == tuple(leaf.shape)}
  if not any(key.startswith('params/') for key in loaded):
    raise UserError(f'no parameter of this model has the same name and shape '
                    f'in the weights {name} (--config.pretrained).')
  return _start_from(loaded, sorted(set(wanted) - set(loaded)), name,
                     strategy, state)


def _start_from(loaded: dict, kept: list[str], source: str, strategy, state):
  """`state` with the `loaded` arrays (flat names, placed as the state's)
  from `source`; the `kept` ones stay as initialized, with a warning."""
  whole = strategy.to_checkpoint(state)
  variables = traverse_util.flatten_dict(
      {'params': whole.params, 'batch_stats': whole.batch_stats}, sep='/')
  variables.update(loaded)
  variables = traverse_util.unflatten_dict(variables, sep='/')
  stats = sum(name.startswith('batch_stats/') for name in loaded)
  logging.info('Initialized %d parameter arrays%s from %s.',
               len(loaded) - stats,
               f' and {stats} batch statistics' if stats else '', source)
  if kept:
    logging.warning('Not in %s with the same shape, so trained from scratch: '
                    '%s.', source, ', '.join(kept))
  whole = whole.replace(params=variables['params'],
                        batch_stats=variables.get('batch_stats',
                                                  whole.batch_stats))
  if whole.ema_params is not None:
    # The average starts from the loaded parameters, as from initial ones.
    whole = whole.replace(ema_params=jax.tree.map(jnp.copy, whole.params))
  return strategy.from_checkpoint(whole)


def step_directory(name: str) -> epath.Path:
  """The checkpoint directory `name` names: a step's directory, or the latest
  step of a checkpoints directory or of a run's workdir."""
  path = storage.path(name)
  if (path / 'default').is_dir():
    return path
  for directory in (path / 'checkpoints', path):
    if directory.is_dir():
      steps = _steps(directory)
      if steps:
        return directory / str(max(steps))
  raise UserError(f'no checkpoint found at --config.init_from={name!r}; give '
                  'a run\'s workdir, its checkpoints directory, one step '
                  'directory in it, or a directory that python -m '
                  'recipes.convert wrote.')


def _steps(directory: epath.Path) -> list[int]:
  """The steps of the checkpoints in `directory` (a checkpoints folder)."""
  return [int(p.name) for p in directory.iterdir() if p.name.isdigit()]


def _check_intact(directory: epath.Path, name: str | epath.Path):
  """Checks the files of the checkpoint `directory` against their checksums
  as a resume does (`store.damage`), before anything is read from it.

  Args:
    directory: one step's directory (see `step_directory`).
    name: what the user gave, which `directory` was found from.

  Raises:
    UserError: the checkpoint is damaged; the message names the newest
      intact checkpoint before it, if there is one, to give instead.
  """
  problem = store.damage(directory)
  if problem is None:
    return
  which = (f'the checkpoint {directory}' if storage.path(name) == directory
           else f'the latest checkpoint of {name}, {directory},')
  before = sorted((s for s in _steps(directory.parent)
                   if not directory.name.isdigit() or s < int(directory.name)),
                  reverse=True)
  intact = next((directory.parent / str(s) for s in before
                 if store.damage(directory.parent / str(s)) is None), None)
  advice = (f'give an earlier one instead: {intact} is intact.' if intact
            else 'there is no intact one before it.')
  raise UserError(f'{which} is damaged ({problem}); nothing was read from '
                  f'it: {advice}')


def saved_shapes(directory: epath.Path,
                 collections: tuple[str, ...] = ('params', 'batch_stats')
                 ) -> dict[str, tuple[int, ...]]:
  """{'params/Dense_0/kernel': shape, ...} of the arrays of `collections` in
  the checkpoint step `directory`, from its metadata alone.

  Args:
    directory: one step's directory (see `step_directory`).
    collections: the state's fields to list.

  Returns:
    Each array's '/'-joined path and shape.

  Raises:
    UserError: the metadata cannot be read.
  """
  try:
    tree = ocp.PyTreeCheckpointHandler().metadata(directory / 'default').tree
    return {f'{collection}/{name}': shape
            for collection in collections if tree.get(collection)
            for name, shape in store.array_shapes(tree[collection]).items()}
  except Exception as e:  # pylint: disable=broad-except
    _check_intact(directory, directory)  # Damage, if that is why.
    raise UserError(f'cannot read the checkpoint {directory} '
                    f'({type(e).__name__}: {str(e)[:200]}).') from e


def load_params(path: str, target: dict) -> tuple[dict, list[str]]:
  """Variables from another run's checkpoint at `path`, e.g. to fine-tune.

  `target` is this run's {'params': tree, 'batch_stats': tree} of
  `jax.ShapeDtypeStruct`s with shardings (batch_stats may be empty). Returns
  (the loaded arrays that have the same name and shape there, flat
  {'params/Dense_0/kernel': array, 'batch_stats/BatchNorm_0/mean': array},
  and the names of the others, which the caller keeps as initialized --
  typically a new classifier head). Batch statistics come across where the
  checkpoint has them (a run's, or one written by `python -m recipes.convert`).

  Args:
    path: another run's workdir, its checkpoints directory, one step
      directory, or a directory `python -m recipes.convert` wrote.
    target: this run's {'params': ..., 'batch_stats': ...} of
      `jax.ShapeDtypeStruct`s with shardings.

  Returns:
    (loaded, kept): the loaded arrays by flat name, and the sorted names of
    the ones not found there with the same shape.

  Raises:
    UserError: no checkpoint at `path`, it is damaged (see `_check_intact`),
      its metadata cannot be read, or no parameter there has the same name
      and shape.
  """
  directory = step_directory(path)
  _check_intact(directory, path)
  saved = saved_shapes(directory, tuple(target))
  wanted = traverse_util.flatten_dict(
      {k: v for k, v in target.items() if v}, sep='/')
  loadable = {name: leaf for name, leaf in wanted.items()
              if saved.get(name) == tuple(leaf.shape)}
  if not any(name.startswith('params/') for name in loadable):
    raise UserError(f'no parameter of this model has the same name and shape '
                    f'in {directory} (--config.init_from): another model?')
  item = traverse_util.unflatten_dict(loadable, sep='/')
  restored = ocp.Checkpointer(ocp.PyTreeCheckpointHandler()).restore(
      directory / 'default',
      args=ocp.args.PyTreeRestore(
          item=item, partial_restore=True,
          restore_args=ocp.checkpoint_utils.construct_restore_args(item)))
  loaded = traverse_util.flatten_dict(restored, sep='/')
  return loaded, sorted(set(wanted) - set(loaded))

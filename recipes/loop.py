"""`train_and_evaluate`: the training loop shared by every strategy.

Reads the data, builds the model and optimizer from the config, then runs
train steps with periodic evaluation, CLU summaries and progress reports.
Only the placement of state and batches and the compiled steps depend on
`config.strategy` (recipes/parallel/pmap.py, recipes/parallel/sharded.py).
"""

import dataclasses
import functools
import math
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import logging
from clu import parameter_overview, periodic_actions
from flax import traverse_util

import zoo
from recipes import checkpoints, optimizers, preemption, storage, summaries, train_state, validation
from recipes.data import datasets, in_memory, streaming
from recipes.parallel import sharded
from recipes.dispatch import OneAhead
from recipes.errors import UserError, check_divisible
from recipes.parallel.pmap import PmapStrategy
from recipes.data.preprocess import Preprocessing
from recipes.parallel.sharded import ShardedStrategy
from recipes.watchdog import Watchdog


def _batch_divisor(config) -> tuple[int, str]:
  """What the global batch is split into, and how to name it."""
  if config.strategy == 'pmap':
    return jax.device_count(), 'devices'
  data, fsdp, _ = sharded.mesh_shape(config.mesh, jax.device_count())
  # Each process loads its own rows, so they must also divide evenly.
  return (math.lcm(data * fsdp, jax.process_count()),
          'batch shards (mesh.data x mesh.fsdp)')


def create_model(config: ml_collections.ConfigDict, num_classes: int):
  dtype = (jnp.dtype(config.half_precision_dtype) if config.half_precision
           else jnp.float32)
  try:
    return zoo.create(config.model, num_classes=num_classes, dtype=dtype,
                      **config.model_kwargs)
  except (TypeError, ValueError) as e:
    raise UserError(str(e)) from None


def _merge_all(metrics_list):
  """One metrics collection from many (already on the host)."""
  return functools.reduce(lambda a, b: a.merge(b), metrics_list)


class _PendingMetrics:
  """Train metrics since the last summary, checked for non-finite values.

  `check` fetches what the devices finished and, unless updates with
  non-finite values are skipped, stops the run at the first such step.
  """

  def __init__(self, strategy, stop_on_nonfinite: bool):
    self._strategy = strategy
    self._stop_on_nonfinite = stop_on_nonfinite
    self._unchecked, self._checked = [], []

  def add(self, step: int, metrics):
    self._unchecked.append((step, metrics))

  def check(self):
    for step, metrics in self._unchecked:
      metrics = self._strategy.to_host(metrics)
      if self._stop_on_nonfinite:
        _check_finite(step, metrics.compute())
      self._checked.append(metrics)
    self._unchecked = []

  def summary(self) -> dict:
    """The merged metrics since the last summary, computed."""
    self.check()
    merged = _merge_all(self._checked)
    self._checked = []
    with np.errstate(invalid='ignore'):  # 0/0 when every step was skipped.
      return merged.compute()


def _check_finite(step: int, values: dict):
  for name, what in (('loss', 'training loss'), ('grad_norm',
                                                  'gradient norm')):
    if not np.isfinite(values[name]):
      raise UserError(
          f'the {what} is {values[name]} at step {step}; lower '
          '--config.learning_rate, or set --config.skip_nonfinite_updates='
          'True to skip such updates. The checkpoints so far are kept.')


def evaluate(strategy, state, data, batch_size: int, at_batch=None):
  """Metrics over the whole eval split, each example counted exactly once.

  `at_batch(i, n)`, if given, is called before batch i of n (from 1); when
  it returns True the evaluation stops and returns None.
  """
  count = in_memory.num_eval_steps(data.num_eval, batch_size)
  one_ahead = OneAhead()
  metrics = []
  batches = strategy.place_batches(data.eval_batches(batch_size=batch_size))
  for index, batch in enumerate(batches, 1):
    if at_batch and at_batch(index, count):
      return None
    metrics.append(one_ahead(strategy.eval_step(state, batch)))
  return _merge_all(strategy.to_host(m) for m in metrics)


def _num_train_steps(config, per_epoch: int) -> int:
  steps = config.num_train_steps or int(config.num_epochs * per_epoch)
  if steps <= 0:
    raise UserError('nothing to train: set --config.num_epochs or '
                    '--config.num_train_steps to a positive value.')
  return steps


@dataclasses.dataclass(frozen=True)
class Setup:
  """What a run is built from: data, schedule, model, optimizer and seed."""

  data: datasets.InMemoryDataset | streaming.StreamingDataset
  steps_per_epoch: int
  num_steps: int
  eval_batch_size: int
  schedule: optax.Schedule
  model: nn.Module
  tx: optax.GradientTransformation
  rng: jax.Array
  state_options: dict  # How updates are made: train_state.options(config).

  @functools.cached_property
  def state(self) -> train_state.TrainState:
    """The initial state, whole on the default device (created on first use;
    the sharded strategy creates its state in shards instead)."""
    return train_state.create(self.model, self.tx, self.data.image_shape,
                              self.rng, **self.state_options)


def setup(config: ml_collections.ConfigDict) -> Setup:
  """Checks the config against the devices, loads data, initializes state."""
  divisor, devices = _batch_divisor(config)
  eval_batch_size = config.eval_batch_size or config.batch_size
  check_divisible('batch_size', config.batch_size, divisor, devices)
  check_divisible('eval_batch_size', eval_batch_size, divisor, devices)
  create_model(config, num_classes=1)  # A bad name fails before data loads.

  preprocessing = Preprocessing(config.augment, config.normalize,
                                config.image_size)
  data = datasets.load(config.dataset, config.data_dir or None,
                       config.train_split, config.eval_split, preprocessing)
  num_train = data.num_train
  per_epoch = in_memory.steps_per_epoch(num_train, config.batch_size)
  if per_epoch == 0:
    raise UserError(f'batch_size {config.batch_size} is larger than the '
                    f'{num_train} training examples.')
  num_steps = _num_train_steps(config, per_epoch)

  model = create_model(config, data.num_classes)
  schedule = optimizers.learning_rate_schedule(config, per_epoch, num_steps)
  tx = optimizers.create_optimizer(config, schedule)
  return Setup(data, per_epoch, num_steps, eval_batch_size, schedule, model,
               tx, jax.random.PRNGKey(config.seed),
               train_state.options(config))


def create_strategy(config: ml_collections.ConfigDict, run: Setup):
  """The strategy `config.strategy` and the initial state placed for it."""
  if config.strategy == 'sharded':
    strategy = ShardedStrategy.from_config(config, run.model, run.tx,
                                           run.data.image_shape)
    logging.info('Sharded state:\n%s', strategy.describe())
    return strategy, strategy.create_state(run.rng)
  parameter_overview.log_parameter_overview(run.state.params)
  strategy = PmapStrategy()
  return strategy, strategy.place_state(run.state)


def train_steps(strategy, state, batches, first_step: int, last_step: int):
  """Runs steps first_step..last_step; yields (step, state, metrics) after each."""
  one_ahead = OneAhead()
  for step in range(first_step, last_step + 1):
    with jax.profiler.StepTraceAnnotation('train', step_num=step):
      state, metrics = strategy.train_step(state, next(batches))
    one_ahead(metrics)
    yield step, state, metrics


def _restore_latest(mngr, strategy, state):
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


def _init_from(path: str, strategy, state):
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


def _evaluate_and_write(strategy, state, run, writer, step, watchdog,
                        should_stop=lambda: False):
  """Evaluates `state`, writes eval/ summaries for `step`; None if stopped."""

  def at_batch(index, count):
    watchdog.beat(f'the evaluation after step {step} (batch {index} of '
                  f'{count})')
    return should_stop()

  eval_metrics = evaluate(strategy, state, run.data, run.eval_batch_size,
                          at_batch)
  if eval_metrics is None:
    return None
  summary = eval_metrics.compute()
  writer.write_scalars(step, {f'eval/{k}': v for k, v in summary.items()})
  if jax.process_index() == 0:  # One copy of the metrics in the log.
    logging.info('step %d: eval loss %.4f, accuracy %.4f over %d examples',
                 step, summary['loss'], summary['accuracy'],
                 eval_metrics.accuracy.count)
  return summary


def evaluate_checkpoint(config: ml_collections.ConfigDict, workdir: str):
  """Evaluates the latest checkpoint in `workdir` and writes its eval/
  summaries there, without training (`--config.mode=eval`)."""
  run = setup(config)
  strategy, state = create_strategy(config, run)
  with checkpoints.opened(workdir, config.keep_checkpoints or None) as mngr:
    state, step = _restore_latest(mngr, strategy, state)
  if step == 0:
    raise UserError(f'no checkpoint to evaluate in {workdir}/checkpoints; '
                    'train first, or point --workdir at a trained run.')
  writer = summaries.create_writer(workdir)
  with Watchdog(config.stall_timeout_seconds) as watchdog:
    summary = _evaluate_and_write(strategy, state, run, writer, step, watchdog)
  writer.flush()
  return summary


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str):
  """Trains `config.model` on `config.dataset`; returns the final eval metrics.

  Resumes from the latest checkpoint in `workdir` if there is one. Stops
  early, with a checkpoint, on SIGTERM or SIGINT (recipes/preemption.py),
  and then returns None. `config.mode=eval` only evaluates.
  """
  validation.check(config)
  if config.mode == 'eval':
    return evaluate_checkpoint(config, workdir)
  run = setup(config)
  strategy, state = create_strategy(config, run)
  # The watchdog also sees the restore and the wait for the last save.
  with Watchdog(config.stall_timeout_seconds) as watchdog:
    watchdog.beat('restoring the latest checkpoint')
    with checkpoints.opened(workdir, config.keep_checkpoints or None) as mngr:
      summary = _train(config, workdir, run, strategy, state, mngr, watchdog)
      watchdog.beat('writing the last checkpoint')
  return summary


def _train(config, workdir, run, strategy, state, mngr, watchdog):
  """The loop of `train_and_evaluate`, with the workdir's checkpoints in
  `mngr` (always resumed from; saved unless checkpoint_every_steps is -1)."""
  num_steps, schedule = run.num_steps, run.schedule
  eval_every = config.eval_every_steps or run.steps_per_epoch
  saving = config.checkpoint_every_steps >= 0
  save_every = config.checkpoint_every_steps
  state, start_step = _restore_latest(mngr, strategy, state)
  if start_step > num_steps:
    raise UserError(
        f'the checkpoint in {mngr.directory} is of step {start_step}, past '
        f'the last step of this run ({num_steps}); raise '
        '--config.num_train_steps (or num_epochs) to train on, or use another '
        '--workdir.')
  if config.init_from:
    if start_step == 0:
      state = _init_from(config.init_from, strategy, state)
    else:
      logging.warning('Not reading --config.init_from=%s: resuming from this '
                      "workdir's own checkpoint of step %d.",
                      config.init_from, start_step)
  if jax.process_index() == 0:
    (storage.path(workdir) / 'config.json').write_text(
        config.to_json_best_effort(indent=2, sort_keys=True))
  writer = summaries.create_writer(workdir)
  if start_step == 0:
    writer.write_hparams(summaries.hparams(config))
  if start_step < num_steps:
    logging.info('Training %s on %s: steps %d to %d (%d per epoch), global '
                 'batch %d on %d devices.', config.model, config.dataset,
                 start_step + 1, num_steps, run.steps_per_epoch,
                 config.batch_size, jax.device_count())
  else:
    logging.info('Training already finished at step %d; evaluating only.',
                 start_step)

  def save(step, state):
    if saving:
      pending.check()  # Never save the state of a non-finite update.
      watchdog.beat(f'saving the checkpoint of step {step}')
      with report_progress.timed('checkpoint'):
        checkpoints.save(mngr, step, strategy.to_checkpoint(state))

  batches = strategy.place_batches(run.data.train_batches(
      batch_size=config.batch_size, seed=config.seed, start_step=start_step,
      num_steps=num_steps))
  report_progress = periodic_actions.ReportProgress(
      num_train_steps=num_steps, every_secs=30)
  skipping = state.skips_nonfinite_updates
  pending = _PendingMetrics(strategy, stop_on_nonfinite=not skipping)
  last_log = (start_step, time.monotonic())
  eval_summary = None
  with preemption.StopRequest() as stop:
    watchdog.beat(f'training step {start_step + 1} (with its compilation)')
    for step, state, metrics in train_steps(strategy, state, batches,
                                            start_step + 1, num_steps):
      watchdog.beat(f'training step {step} of {num_steps}')
      checkpoints.check_saved(mngr)  # A failed save stops the run at once.
      pending.add(step, metrics)
      if jax.process_index() == 0:
        report_progress(step)  # Steps/s and ETA, once in the log.

      if step % config.log_every_steps == 0 or step == num_steps:
        summary = pending.summary()
        now = time.monotonic()
        # Averages over steps that were all skipped are NaN: left out.
        scalars = {f'train/{k}': v for k, v in summary.items()
                   if k != 'skipped' and np.isfinite(v)}
        scalars['train/learning_rate'] = schedule(step - 1)
        scalars['train/steps_per_sec'] = (step - last_log[0]) / (
            now - last_log[1])
        if skipping:
          scalars['train/skipped_steps'] = summary['skipped']
          if summary['skipped']:
            logging.warning('Skipped %d update(s) with a non-finite loss '
                            'or gradient in steps %d-%d.', summary['skipped'],
                            last_log[0] + 1, step)
        writer.write_scalars(step, scalars)
        last_log = (step, now)

      stopping = stop.should_stop()
      if not stopping and (step % eval_every == 0 or step == num_steps):
        pending.check()
        with report_progress.timed('eval'):
          eval_summary = _evaluate_and_write(strategy, state, run, writer,
                                             step, watchdog, stop.should_stop)
        stopping = eval_summary is None
        last_log = (step, time.monotonic())  # Eval time is not train time.

      if stopping or step == num_steps or (
          save_every and step % save_every == 0):
        save(step, state)
        last_log = (step, time.monotonic())
      if stopping:
        writer.flush()
        where = (f'saved a checkpoint of step {step} in {mngr.directory}'
                 if saving else 'saved nothing (checkpoint_every_steps=-1)')
        logging.warning('Stopped by %s after step %d of %d: %s. Run the same '
                        'command again to resume.', stop.received, step,
                        num_steps, where)
        return None
    if eval_summary is None:  # Resumed from the final checkpoint.
      eval_summary = _evaluate_and_write(strategy, state, run, writer,
                                         num_steps, watchdog)
  writer.flush()
  return eval_summary

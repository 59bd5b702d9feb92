"""`train_and_evaluate`: the training loop shared by every strategy.

Reads the data, builds the model and optimizer from the config, then runs
train steps with periodic evaluation, CLU summaries and progress reports.
Only the placement of state and batches and the compiled steps depend on
`config.strategy` (recipes/pmap_strategy.py, recipes/sharded_strategy.py).
"""

import dataclasses
import functools
import math
import os
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import logging
from clu import metric_writers, parameter_overview, periodic_actions
from flax import traverse_util

import zoo
from recipes import (checkpoints, datasets, input_pipeline, optimizers,
                     preemption, sharded_strategy, streaming, train_state)
from recipes.errors import UserError, check_divisible
from recipes.pmap_strategy import PmapStrategy
from recipes.preprocess import Preprocessing
from recipes.sharded_strategy import ShardedStrategy

STRATEGIES = ('pmap', 'sharded')


def _batch_divisor(config) -> tuple[int, str]:
  """What the global batch is split into, and how to name it."""
  if config.strategy == 'pmap':
    return jax.device_count(), 'devices'
  data, fsdp, _ = sharded_strategy.mesh_shape(config.mesh, jax.device_count())
  # Each process loads its own rows, so they must also divide evenly.
  return (math.lcm(data * fsdp, jax.process_count()),
          'batch shards (mesh.data x mesh.fsdp)')


HALF_PRECISION_DTYPES = ('bfloat16', 'float16')


def create_model(config: ml_collections.ConfigDict, num_classes: int):
  if config.half_precision_dtype not in HALF_PRECISION_DTYPES:
    raise UserError(f'unknown half_precision_dtype '
                    f'{config.half_precision_dtype!r}; choose one of '
                    f'{", ".join(HALF_PRECISION_DTYPES)}.')
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


def _flat_hparams(config, prefix: str = '') -> dict:
  """Config fields as TensorBoard hparams: dotted names, scalar values."""
  flat = {}
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict):
      flat.update(_flat_hparams(value, f'{prefix}{key}.'))
    else:
      scalar = isinstance(value, (bool, int, float, str))
      flat[prefix + key] = value if scalar else str(value)
  return flat


def evaluate(strategy, state, data, batch_size: int, should_stop=None):
  """Metrics over the whole eval split, each example counted exactly once.

  None if `should_stop()`, asked before each batch, says to stop.
  """
  metrics = []
  for batch in strategy.place_batches(data.eval_batches(batch_size=batch_size)):
    if should_stop and should_stop():
      return None
    metrics.append(strategy.eval_step(state, batch))
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
  if config.strategy not in STRATEGIES:
    raise UserError(f'unknown strategy {config.strategy!r}; choose one of '
                    f'{", ".join(STRATEGIES)}.')
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
  per_epoch = input_pipeline.steps_per_epoch(num_train, config.batch_size)
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
  previous = None
  for step in range(first_step, last_step + 1):
    with jax.profiler.StepTraceAnnotation('train', step_num=step):
      state, metrics = strategy.train_step(state, next(batches))
    if previous is not None:
      # Keep the host at most one step ahead of the devices: a runaway
      # dispatch queue makes timings lie and can starve the devices.
      jax.block_until_ready(previous)
    previous = metrics
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


def _evaluate_and_write(strategy, state, run, writer, step, should_stop=None):
  """Evaluates `state`, writes eval/ summaries for `step`; None if stopped."""
  eval_metrics = evaluate(strategy, state, run.data, run.eval_batch_size,
                          should_stop)
  if eval_metrics is None:
    return None
  summary = eval_metrics.compute()
  writer.write_scalars(step, {f'eval/{k}': v for k, v in summary.items()})
  logging.info('step %d: eval loss %.4f, accuracy %.4f over %d examples',
               step, summary['loss'], summary['accuracy'],
               eval_metrics.accuracy.count)
  return summary


def evaluate_checkpoint(config: ml_collections.ConfigDict, workdir: str):
  """Evaluates the latest checkpoint in `workdir` and writes its eval/
  summaries there, without training (`--config.mode=eval`)."""
  run = setup(config)
  strategy, state = create_strategy(config, run)
  with checkpoints.manager(workdir, config.keep_checkpoints) as mngr:
    state, step = _restore_latest(mngr, strategy, state)
  if step == 0:
    raise UserError(f'no checkpoint to evaluate in {workdir}/checkpoints; '
                    'train first, or point --workdir at a trained run.')
  writer = metric_writers.create_default_writer(
      workdir, just_logging=jax.process_index() > 0)
  summary = _evaluate_and_write(strategy, state, run, writer, step)
  writer.flush()
  return summary


MODES = ('train', 'eval')


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str):
  """Trains `config.model` on `config.dataset`; returns the final eval metrics.

  Resumes from the latest checkpoint in `workdir` if there is one. Stops
  early, with a checkpoint, on SIGTERM or SIGINT (recipes/preemption.py),
  and then returns None. `config.mode=eval` only evaluates.
  """
  if config.mode not in MODES:
    raise UserError(f'unknown mode {config.mode!r}; choose one of '
                    f'{", ".join(MODES)}.')
  if config.mode == 'eval':
    return evaluate_checkpoint(config, workdir)
  run = setup(config)
  strategy, state = create_strategy(config, run)
  if config.checkpoint_every_steps < 0:
    return _train(config, workdir, run, strategy, state, None)
  with checkpoints.manager(workdir, config.keep_checkpoints) as mngr:
    return _train(config, workdir, run, strategy, state, mngr)


def _train(config, workdir, run, strategy, state, mngr):
  """The loop of `train_and_evaluate`, saving to `mngr` unless it is None."""
  num_steps, schedule = run.num_steps, run.schedule
  eval_every = config.eval_every_steps or run.steps_per_epoch
  save_every = config.checkpoint_every_steps
  start_step = 0
  if mngr:
    state, start_step = _restore_latest(mngr, strategy, state)
  if start_step == 0 and config.init_from:
    state = _init_from(config.init_from, strategy, state)
  if jax.process_index() == 0:
    with open(os.path.join(workdir, 'config.json'), 'w') as f:
      f.write(config.to_json_best_effort(indent=2, sort_keys=True))
  writer = metric_writers.create_default_writer(
      workdir, just_logging=jax.process_index() > 0)
  if start_step == 0:
    writer.write_hparams(_flat_hparams(config))
  if start_step < num_steps:
    logging.info('Training %s on %s: steps %d to %d (%d per epoch), global '
                 'batch %d on %d devices.', config.model, config.dataset,
                 start_step + 1, num_steps, run.steps_per_epoch,
                 config.batch_size, jax.device_count())
  else:
    logging.info('Training already finished at step %d; evaluating only.',
                 start_step)

  def save(step, state):
    if mngr:
      pending.check()  # Never save the state of a non-finite update.
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
    for step, state, metrics in train_steps(strategy, state, batches,
                                            start_step + 1, num_steps):
      pending.add(step, metrics)
      report_progress(step)

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
                                             step, stop.should_stop)
        stopping = eval_summary is None
        last_log = (step, time.monotonic())  # Eval time is not train time.

      if stopping or step == num_steps or (
          save_every and step % save_every == 0):
        save(step, state)
        last_log = (step, time.monotonic())
      if stopping:
        writer.flush()
        where = (f'saved a checkpoint of step {step} in {mngr.directory}'
                 if mngr else 'saved nothing (checkpoint_every_steps=-1)')
        logging.warning('Stopped by %s after step %d of %d: %s. Run the same '
                        'command again to resume.', stop.received, step,
                        num_steps, where)
        return None
  if eval_summary is None:  # Resumed from the final checkpoint.
    eval_summary = _evaluate_and_write(strategy, state, run, writer,
                                       num_steps)
  writer.flush()
  return eval_summary

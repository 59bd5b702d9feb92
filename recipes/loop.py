"""`train_and_evaluate`: the training loop shared by every strategy.

Reads the data, builds the model and optimizer from the config, then runs
train steps with periodic evaluation, CLU summaries and progress reports.
Only the placement of state and batches and the compiled steps depend on
`config.strategy` (recipes/pmap_strategy.py, recipes/sharded_strategy.py).
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
from clu import metric_writers, parameter_overview, periodic_actions

import zoo
from recipes import (checkpoints, datasets, input_pipeline, optimizers,
                     sharded_strategy, streaming, train_state)
from recipes.errors import UserError
from recipes.pmap_strategy import PmapStrategy
from recipes.preprocess import Preprocessing
from recipes.sharded_strategy import ShardedStrategy

STRATEGIES = ('pmap', 'sharded')


def check_divisible(name: str, batch_size: int, num_devices: int,
                    devices: str = 'devices'):
  if batch_size <= 0 or batch_size % num_devices:
    below = max(num_devices, batch_size // num_devices * num_devices)
    above = (batch_size // num_devices + 1) * num_devices
    nearest = f'{below} or {above}' if below != above else f'{above}'
    raise UserError(
        f'{name} {batch_size} is not divisible by the {num_devices} {devices}; '
        f'use a multiple of {num_devices}, e.g. {nearest}.')


def _batch_divisor(config) -> tuple[int, str]:
  """What the global batch is split into, and how to name it."""
  if config.strategy == 'pmap':
    return jax.device_count(), 'devices'
  data, fsdp, _ = sharded_strategy.mesh_shape(config.mesh, jax.device_count())
  # Each process loads its own rows, so they must also divide evenly.
  return (math.lcm(data * fsdp, jax.process_count()),
          'batch shards (mesh.data x mesh.fsdp)')


def create_model(config: ml_collections.ConfigDict, num_classes: int):
  dtype = jnp.bfloat16 if config.half_precision else jnp.float32
  try:
    return zoo.create(config.model, num_classes=num_classes, dtype=dtype,
                      **config.model_kwargs)
  except (TypeError, ValueError) as e:
    raise UserError(str(e)) from None


def _merged(strategy, metrics_list):
  """Fetches per-step metrics to the host and merges them into one."""
  return functools.reduce(lambda a, b: a.merge(b),
                          (strategy.to_host(m) for m in metrics_list))


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


def evaluate(strategy, state, data, batch_size: int):
  """Metrics over the whole eval split, each example counted exactly once."""
  batches = data.eval_batches(batch_size=batch_size)
  metrics = [strategy.eval_step(state, batch)
             for batch in strategy.place_batches(batches)]
  return _merged(strategy, metrics)


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

  @functools.cached_property
  def state(self) -> train_state.TrainState:
    """The initial state, whole on the default device (created on first use;
    the sharded strategy creates its state in shards instead)."""
    return train_state.create(self.model, self.tx, self.data.image_shape,
                              self.rng)


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
               tx, jax.random.PRNGKey(config.seed))


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


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str):
  """Trains `config.model` on `config.dataset`; returns the final eval metrics.

  Resumes from the latest checkpoint in `workdir` if there is one.
  """
  run = setup(config)
  strategy, state = create_strategy(config, run)
  num_steps, schedule = run.num_steps, run.schedule
  eval_every = config.eval_every_steps or run.steps_per_epoch
  save_every = config.checkpoint_every_steps
  mngr = None
  start_step = 0
  if save_every >= 0:
    mngr = checkpoints.manager(workdir, config.keep_checkpoints)
    state, start_step = _restore_latest(mngr, strategy, state)
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

  def evaluate_and_write(step, state):
    eval_metrics = evaluate(strategy, state, run.data, run.eval_batch_size)
    summary = eval_metrics.compute()
    writer.write_scalars(step, {f'eval/{k}': v for k, v in summary.items()})
    logging.info('step %d: eval loss %.4f, accuracy %.4f over %d examples',
                 step, summary['loss'], summary['accuracy'],
                 eval_metrics.accuracy.count)
    return summary

  batches = strategy.place_batches(run.data.train_batches(
      batch_size=config.batch_size, seed=config.seed, start_step=start_step,
      num_steps=num_steps))
  report_progress = periodic_actions.ReportProgress(
      num_train_steps=num_steps, every_secs=30)
  pending, last_log = [], (start_step, time.monotonic())
  eval_summary = None
  for step, state, metrics in train_steps(strategy, state, batches,
                                          start_step + 1, num_steps):
    pending.append(metrics)
    report_progress(step)

    if step % config.log_every_steps == 0 or step == num_steps:
      summary = _merged(strategy, pending).compute()
      now = time.monotonic()
      writer.write_scalars(step, {
          'train/loss': summary['loss'],
          'train/accuracy': summary['accuracy'],
          'train/learning_rate': schedule(step - 1),
          'train/steps_per_sec': (step - last_log[0]) / (now - last_log[1]),
      })
      pending, last_log = [], (step, now)
      if not np.isfinite(summary['loss']):
        raise UserError(f'the training loss is {summary["loss"]} at step '
                        f'{step}; lower --config.learning_rate.')

    if step % eval_every == 0 or step == num_steps:
      with report_progress.timed('eval'):
        eval_summary = evaluate_and_write(step, state)
      last_log = (step, time.monotonic())  # Eval time is not train time.

    if mngr and (step == num_steps or save_every and step % save_every == 0):
      with report_progress.timed('checkpoint'):
        checkpoints.save(mngr, step, strategy.to_checkpoint(state))
      last_log = (step, time.monotonic())
  if eval_summary is None:  # Resumed from the final checkpoint.
    eval_summary = evaluate_and_write(num_steps, state)
  writer.flush()
  return eval_summary

"""Evaluation: metrics over a whole eval split, written as eval/ summaries;
and eval-only mode (`--config.mode=eval`), which evaluates the workdir's
latest checkpoint without training."""

import functools

import jax
import ml_collections
from absl import logging

from recipes import checkpoints, experiment, resume, summaries
from recipes.data import in_memory
from recipes.dispatch import OneAhead
from recipes.errors import UserError
from recipes.watchdog import Watchdog


def merge_all(metrics_list):
  """One metrics collection from many (already on the host)."""
  return functools.reduce(lambda a, b: a.merge(b), metrics_list)


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
  return merge_all(strategy.to_host(m) for m in metrics)


def evaluate_and_write(exp: experiment.Experiment, state, writer, step: int,
                       watchdog: Watchdog, should_stop=lambda: False):
  """Evaluates `state`, writes eval/ summaries for `step`; None if stopped."""

  def at_batch(index, count):
    watchdog.beat(f'the evaluation after step {step} (batch {index} of '
                  f'{count})')
    return should_stop()

  eval_metrics = evaluate(exp.strategy, state, exp.data, exp.eval_batch_size,
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
  exp = experiment.build(config)
  with checkpoints.opened(workdir, config.keep_checkpoints or None) as mngr:
    state, step = resume.restore_latest(mngr, exp.strategy,
                                        exp.create_state())
  if step == 0:
    raise UserError(f'no checkpoint to evaluate in {workdir}/checkpoints; '
                    'train first, or point --workdir at a trained run.')
  writer = summaries.create_writer(workdir)
  with Watchdog(config.stall_timeout_seconds) as watchdog:
    summary = evaluate_and_write(exp, state, writer, step, watchdog)
  writer.flush()
  return summary

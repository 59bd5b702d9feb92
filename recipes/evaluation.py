"""Evaluation: metrics over a whole eval split, written as eval/ summaries;
and eval-only mode (`--config.mode=eval`, `python -m recipes.evaluate`),
which evaluates the workdir's latest checkpoint without training, or, in a
workdir without one, the weights --config.init_from or --config.pretrained
names (converted or published weights, as step 0)."""

import functools

import jax
import ml_collections
from absl import logging

from recipes import checkpoint, experiment
from recipes.checkpoint import class_names, data_files, resume
from recipes.data.pipeline import in_memory
from recipes.runtime import summaries
from recipes.runtime.dispatch import OneAhead
from recipes.runtime.errors import UserError
from recipes.runtime.watchdog import Watchdog


def merge_all(metrics_list):
  """One metrics collection from many (already on the host).

  Args:
    metrics_list: an iterable of metrics collections; at least one.

  Returns:
    Their merge, a metrics collection of the same type.
  """
  return functools.reduce(lambda a, b: a.merge(b), metrics_list)


def evaluate(strategy, state, data, batch_size: int, at_batch=None,
             split: str | None = None):
  """Metrics over a whole eval split (default: the first), each example
  counted exactly once.

  `at_batch(i, n)`, if given, is called before batch i of n (from 1); when
  it returns True the evaluation stops and returns None.

  Args:
    strategy: the run's strategy, whose `eval_step` runs each batch.
    state: the TrainState to evaluate.
    data: the run's data, with `eval_sizes` and `eval_batches`.
    batch_size: the global eval batch size.
    at_batch: optional `at_batch(i, n)` -> True to stop; see above.
    split: the eval split's name; default: the first in `data.eval_sizes`.

  Returns:
    The merged metrics collection, on the host, or None if stopped.
  """
  split = split or next(iter(data.eval_sizes))
  count = in_memory.num_eval_steps(data.eval_sizes[split], batch_size)
  one_ahead = OneAhead()
  metrics = []
  batches = strategy.place_batches(data.eval_batches(batch_size=batch_size,
                                                     split=split))
  for index, batch in enumerate(batches, 1):
    if at_batch and at_batch(index, count):
      return None
    metrics.append(one_ahead(strategy.eval_step(state, batch)))
  return merge_all(strategy.to_host(m) for m in metrics)


def _parameter_sets(state):
  """(summary suffix, state) for each set of parameters to evaluate: the
  trained ones, and their moving average if the run keeps one."""
  yield '', state
  if state.ema_params is not None:
    yield '_ema', state.replace(params=state.ema_params)


def evaluate_and_write(exp: experiment.Experiment, state, writer, step: int,
                       watchdog: Watchdog, should_stop=lambda: False):
  """Evaluates `state` on every eval split (and its parameters' average),
  writes each under its prefix for `step` (eval/, eval_<name>/,
  eval_ema/...); returns the eval/ summary, or None if stopped.

  Args:
    exp: the run's Experiment (strategy, data, eval splits, batch size).
    state: the TrainState to evaluate.
    writer: the metric writer the summaries go to.
    step: the step the summaries are written for.
    watchdog: beaten before each eval batch.
    should_stop: called before each eval batch; True stops the evaluation.

  Returns:
    The eval/ summary {metric name: value}, or None if stopped.
  """
  results = {}
  for prefix, split in exp.eval_splits.items():
    for suffix, evaluated in _parameter_sets(state):
      where = f'{prefix}{suffix}'

      def at_batch(index, count, where=where):
        watchdog.beat(f'the evaluation ({where}) after step {step} (batch '
                      f'{index} of {count})')
        return should_stop()

      metrics = evaluate(exp.strategy, evaluated, exp.data,
                         exp.eval_batch_size, at_batch, split)
      if metrics is None:
        return None
      summary = metrics.compute()
      writer.write_scalars(step, {f'{where}/{k}': v
                                  for k, v in summary.items()})
      if jax.process_index() == 0:  # One copy of the metrics in the log.
        if 'perplexity' in summary:  # A language model's.
          logging.info('step %d: %s loss %.4f, perplexity %.3f, token '
                       'accuracy %.4f over %d tokens of %s', step, where,
                       summary['loss'], summary['perplexity'],
                       summary['accuracy'], metrics.accuracy.count, split)
        else:
          logging.info('step %d: %s loss %.4f, accuracy %.4f, top-5 %.4f '
                       'over %d examples of %s', step, where, summary['loss'],
                       summary['accuracy'], summary['top5_accuracy'],
                       metrics.accuracy.count, split)
      results[where] = summary
  return results[experiment.MAIN_EVAL]


def evaluate_checkpoint(config: ml_collections.ConfigDict, workdir: str):
  """Evaluates the latest checkpoint in `workdir` and writes its eval/
  summaries there, without training (`--config.mode=eval`). Without a
  checkpoint there, evaluates the weights `config.init_from` or
  `config.pretrained` names instead, for step 0.

  Args:
    config: the run's configuration (recipes/config).
    workdir: the trained run's directory, or a new one for given weights.

  Returns:
    The eval/ summary {metric name: value} of the latest checkpoint.

  Raises:
    UserError: there is nothing to evaluate, or it is unusable.
  """
  exp = experiment.build(config)
  with checkpoint.opened(workdir, config.keep_checkpoints or None) as mngr:
    state, step = resume.restore_latest(mngr, exp.strategy)
  if step == 0 and not (config.init_from or config.pretrained):
    raise UserError(f'no checkpoint to evaluate in {workdir}/checkpoints; '
                    'train first, point --workdir at a trained run, or give '
                    'weights with --config.init_from or --config.pretrained.')
  if step == 0:  # The workdir's own checkpoint comes first, as in training.
    state = experiment.given_weights(config, exp.strategy, exp.create_state())
  class_names.check_and_record(workdir, exp.data.class_names, config.dataset)
  # The training split's files do not matter here.
  data_files.check_and_record(
      workdir, {split: listing for split, listing in exp.data.files.items()
                if split in exp.data.eval_sizes},
      config.dataset, config.allow_changed_data)
  writer = summaries.create_writer(config, workdir)
  with Watchdog(config.stall_timeout_seconds) as watchdog:
    summary = evaluate_and_write(exp, state, writer, step, watchdog)
  writer.close()
  return summary

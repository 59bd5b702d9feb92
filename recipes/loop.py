"""`train_and_evaluate`: the training loop shared by every strategy.

Builds the run from the config (recipes/experiment.py), starts from the
workdir's latest checkpoint or `init_from` (recipes/checkpoint/resume.py),
then runs the shared train step with periodic actions: write train
summaries, evaluate, save a checkpoint, and stop on request (SIGTERM or
SIGINT) or at the end.
"""

import time

import jax
import ml_collections
import numpy as np
from absl import logging
from clu import periodic_actions

from recipes import checkpoint, evaluation, experiment
from recipes.checkpoint import class_names, data_files, resume
from recipes.config import pretrained, validation
from recipes.runtime import preemption, progress, storage, summaries
from recipes.runtime.dispatch import OneAhead
from recipes.runtime.errors import UserError
from recipes.runtime.watchdog import Watchdog


def train_steps(strategy, state, batches, first_step: int, last_step: int):
  """Runs steps first_step..last_step; yields (step, state, metrics) after each.

  Args:
    strategy: the run's strategy, whose `train_step` runs each step.
    state: the TrainState to train from.
    batches: an iterator of placed training batches, one per step.
    first_step: the number of the first step to run.
    last_step: the number of the last step to run (inclusive).

  Yields:
    (step, state, metrics) after each step is dispatched; the metrics are
    still on the devices.
  """
  one_ahead = OneAhead()
  for step in range(first_step, last_step + 1):
    with jax.profiler.StepTraceAnnotation('train', step_num=step):
      state, metrics = strategy.train_step(state, next(batches))
    one_ahead(metrics)
    yield step, state, metrics


def _check_finite(step: int, values: dict):
  for name, what in (('loss', 'training loss'), ('grad_norm',
                                                  'gradient norm')):
    if not np.isfinite(values[name]):
      raise UserError(
          f'the {what} is {values[name]} at step {step}; lower '
          '--config.learning_rate, or set --config.skip_nonfinite_updates='
          'True to skip such updates. The checkpoints so far are kept.')


class TrainSummaries:
  """Every `every` steps: the train metrics since the last time, averaged and
  written as train/ summaries with the learning rate and steps/s.

  Metrics are checked for non-finite values as the devices finish them: the
  run stops at the first such step unless those updates are skipped.
  """

  def __init__(self, exp, writer, every: int, first_step: int,
               skipping: bool, tokens_per_step: int | None = None):
    """Writes nothing yet; steps/s counts from `first_step`.

    Args:
      exp: the run's Experiment (its strategy and learning rate schedule).
      writer: the metric writer the summaries go to.
      every: write summaries every this many steps (and at the last).
      first_step: the step training starts after.
      skipping: whether the run skips non-finite updates rather than stops.
      tokens_per_step: a language model's tokens in a global batch, to
        write tokens/s too; None: images.
    """
    self._exp, self._writer, self._every = exp, writer, every
    # One compiled program, where calling optax's schedule runs (and first
    # compiles) each of its operations apart: 0.35 -> 0.1 s of a start.
    self._learning_rate = jax.jit(exp.schedule)
    self._skipping = skipping
    self.tokens_per_step = tokens_per_step
    self._unchecked, self._checked = [], []
    self.restart_clock(first_step)

  def add(self, step: int, metrics):
    """Keeps a step's metrics, still on the devices, to check and write later.

    Args:
      step: the step the metrics are of.
      metrics: the step's metrics collection, as the train step returned it.
    """
    self._unchecked.append((step, metrics))

  def check(self):
    """Fetches the metrics the devices finished; stops at a non-finite one.

    Raises:
      UserError: a step's loss or gradient norm is not finite (unless the
        run skips such updates).
    """
    for step, metrics in self._unchecked:
      metrics = self._exp.strategy.to_host(metrics)
      if not self._skipping:
        _check_finite(step, metrics.compute())
      self._checked.append(metrics)
    self._unchecked = []

  def restart_clock(self, step: int):
    """Steps/s counts from here: evaluation and saving are not training.

    Args:
      step: the step just finished, from which steps are counted.
    """
    self._since = (step, time.monotonic())

  def __call__(self, step: int, last: bool):
    if not (last or step % self._every == 0):
      return
    self.check()
    with np.errstate(invalid='ignore'):  # 0/0 when every step was skipped.
      summary = evaluation.merge_all(self._checked).compute()
    self._checked = []
    first, since = self._since
    # Averages over steps that were all skipped are NaN: left out.
    scalars = {f'train/{k}': v for k, v in summary.items()
               if k != 'skipped' and np.isfinite(v)}
    scalars['train/learning_rate'] = self._learning_rate(step - 1)
    scalars['train/steps_per_sec'] = (step - first) / (time.monotonic() - since)
    if self.tokens_per_step:  # A language model's throughput.
      scalars['train/tokens_per_sec'] = (scalars['train/steps_per_sec'] *
                                         self.tokens_per_step)
    if self._skipping:
      scalars['train/skipped_steps'] = summary['skipped']
      if summary['skipped']:
        logging.warning('Skipped %d update(s) with a non-finite loss or '
                        'gradient in steps %d-%d.', summary['skipped'],
                        first + 1, step)
    self._writer.write_scalars(step, scalars)
    self.restart_clock(step)


# In the workdir while an evaluation a stop interrupted is still to be done:
# the step it was of (that of the checkpoint saved at the stop).
_INTERRUPTED_EVALUATION = 'evaluation_interrupted'


def _interrupted_evaluation(workdir) -> int | None:
  """The step whose evaluation a stop interrupted, or None."""
  try:
    return int((storage.path(workdir) / _INTERRUPTED_EVALUATION).read_text())
  except (FileNotFoundError, ValueError):
    return None


def _evaluation_interrupted(workdir, step: int):
  if jax.process_index() == 0:
    (storage.path(workdir) / _INTERRUPTED_EVALUATION).write_text(str(step))


def _evaluation_done(workdir):
  if jax.process_index() == 0:
    (storage.path(workdir) / _INTERRUPTED_EVALUATION).unlink(missing_ok=True)


def _profiler(config, workdir, start_step: int, num_steps: int):
  """Traces profile_steps steps after step profile_start_step next to the
  run's summaries, where TensorBoard's profile tab finds them; on the first
  process only (a trace is per host). A run resumed past that step has
  taken its trace already."""
  first = config.profile_start_step
  if (not config.profile_steps or jax.process_index() != 0
      or start_step >= first):
    return None
  if first >= num_steps:
    logging.warning('No trace: profile_start_step %d is not before the last '
                    'step (%d).', first, num_steps)
    return None
  # The trace ends at a step's end, the last step's at the latest.
  count = min(config.profile_steps, num_steps - first)
  logdir = summaries.directory(workdir)
  logging.info('Tracing %d steps after step %d into %s/plugins/profile.',
               count, first, logdir)
  return periodic_actions.Profile(
      logdir=logdir, num_profile_steps=count, profile_duration_ms=None,
      first_profile=first, every_steps=None, every_secs=None)


def _start(config, workdir, exp, mngr, watchdog):
  """The state to train from, its step, and the summary writer."""
  class_names.check_and_record(workdir, exp.data.class_names, config.dataset)
  data_files.check_and_record(workdir, exp.data.files, config.dataset,
                              config.allow_changed_data)
  watchdog.beat('restoring the latest checkpoint')
  state, start_step = resume.restore_latest(mngr, exp.strategy)
  if state is None:
    watchdog.beat('creating the initial state')
    state = exp.create_state()
  if start_step > exp.num_steps:
    raise UserError(
        f'the checkpoint in {mngr.directory} is of step {start_step}, past '
        f'the last step of this run ({exp.num_steps}); raise '
        '--config.num_train_steps (or num_epochs) to train on, or use another '
        '--workdir.')
  start = 'init_from' if config.init_from else 'pretrained'
  if config[start] and start_step > 0:
    logging.warning('Not reading --config.%s=%s: resuming from this '
                    "workdir's own checkpoint of step %d.", start,
                    config[start], start_step)
  elif start_step == 0:
    state = experiment.given_weights(config, exp.strategy, state)
  if jax.process_index() == 0:
    (storage.path(workdir) / 'config.json').write_text(
        config.to_json_best_effort(indent=2, sort_keys=True))
  writer = summaries.create_writer(config, workdir)
  if start_step == 0:  # The values the run uses, resolved from the data.
    writer.write_hparams({**summaries.hparams(config),
                          **experiment.resolved(config, exp)})
  if start_step < exp.num_steps:
    devices = jax.device_count()
    micro = (f', in {config.grad_accum_steps} micro-batches of '
             f'{config.batch_size // config.grad_accum_steps}'
             if config.grad_accum_steps > 1 else '')
    logging.info('Training %s on %s: steps %d to %d (%d per epoch), global '
                 'batch %d on %d device%s%s.', config.model, config.dataset,
                 start_step + 1, exp.num_steps, exp.steps_per_epoch,
                 config.batch_size, devices, 's' * (devices > 1), micro)
  else:
    logging.info('Training already finished at step %d; evaluating only.',
                 start_step)
  return state, start_step, writer


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str):
  """Trains `config.model` on `config.dataset`; returns the final eval metrics.

  Resumes from the latest checkpoint in `workdir` if there is one. Stops
  early, with a checkpoint, on SIGTERM or SIGINT
  (recipes/runtime/preemption.py), and then returns None. `config.mode=eval`
  only evaluates (recipes/evaluation.py).

  Args:
    config: the run's configuration (recipes/config).
    workdir: the run's directory: checkpoints, summaries, config.json.

  Returns:
    The final eval/ summary {metric name: value}, or None when stopped
    early.

  Raises:
    UserError: a mistake in the config or the workdir, a non-finite loss,
      or a failed checkpoint save; the message says what to do.
  """
  validation.check(config)
  if config.mode == 'eval':
    return evaluation.evaluate_checkpoint(config, workdir)
  began = time.monotonic()
  exp = experiment.build(config)
  if experiment.tokens_per_step(config, exp) is None:  # Images.
    pretrained.warn_size(config, exp.data.image_shape)
  # The watchdog also sees the restore and the wait for the last save.
  with Watchdog(config.stall_timeout_seconds) as watchdog:
    watchdog.beat('opening the checkpoints')
    with checkpoint.opened(workdir, config.keep_checkpoints or None) as mngr:
      summary, steps = _train(config, workdir, exp, mngr, watchdog)
      watchdog.beat('writing the last checkpoint')
  if summary is not None and jax.process_index() == 0:
    for line in _finished(config, workdir, exp, steps, summary,
                          time.monotonic() - began, mngr.directory):
      logging.info('%s', line)
  return summary


def _finished(config, workdir, exp, steps: progress.Progress, summary: dict,
              seconds: float, checkpoints) -> list[str]:
  """The lines that end a run: its steps and time, the final metrics, and
  where the checkpoints and summaries are."""
  if steps.done > steps.start:
    done = (f'Done: steps {steps.start + 1:,}-{steps.done:,} of '
            f'{steps.total:,} in {progress.duration(seconds)} '
            f'({steps.rates()} while training)')
  else:  # Resumed from the last checkpoint.
    done = (f'Done: evaluated step {steps.done:,} (trained before) in '
            f'{progress.duration(seconds)}')
  split = exp.eval_splits[experiment.MAIN_EVAL]
  kept = (f'Checkpoints in {checkpoints} (the last of step {steps.done:,})'
          if config.checkpoint_every_steps >= 0 else
          'No checkpoints (checkpoint_every_steps=-1)')
  perplexity = (f', perplexity {summary["perplexity"]:.2f}'
                if 'perplexity' in summary else '')
  return [f'{done}; final accuracy {summary["accuracy"]:.4f} on {split} '
          f'(loss {summary["loss"]:.4f}{perplexity}).',
          f'{kept}; summaries in {summaries.directory(workdir)} '
          f'(tensorboard --logdir={workdir}).']


def _train(config, workdir, exp, mngr, watchdog):
  """The loop of `train_and_evaluate`, with the workdir's checkpoints in
  `mngr` (always resumed from; saved unless checkpoint_every_steps is -1).
  The summary writer is closed however the loop ends, so that what it was
  given reaches its files (a W&B run keeps everything until then)."""
  state, start_step, writer = _start(config, workdir, exp, mngr, watchdog)
  # Steps/s, images/s (tokens/s) and ETA in the log, on process 0.
  tokens = experiment.tokens_per_step(config, exp)
  steps = progress.Progress(
      exp.num_steps, start_step,
      per_unit=[('tokens', tokens) if tokens else ('images',
                                                   config.batch_size)],
      per_epoch=exp.steps_per_epoch, first='the first step (compiling it)',
      write=logging.info if jax.process_index() == 0 else lambda line: None)
  try:
    summary = _loop(config, workdir, exp, mngr, watchdog, state, start_step,
                    writer, steps)
  except BaseException:
    try:
      writer.close()
    except Exception:  # pylint: disable=broad-except
      # The run's own error is the one to report.
      logging.warning('The summaries since the last flush could not be '
                      'written.', exc_info=True)
    raise
  writer.close()
  return summary, steps


def _loop(config, workdir, exp, mngr, watchdog, state, start_step, writer,
          steps):
  """The steps, evaluations and saves of `_train`, from `state` at
  `start_step`, their progress told to `steps`; the final eval summary, or
  None when stopped early."""
  num_steps, strategy = exp.num_steps, exp.strategy
  eval_every = config.eval_every_steps or exp.steps_per_epoch
  save_every = config.checkpoint_every_steps  # 0: only at the end; -1: never.
  train_summaries = TrainSummaries(exp, writer, config.log_every_steps,
                                   start_step, state.skips_nonfinite_updates,
                                   experiment.tokens_per_step(config, exp))
  profile = _profiler(config, workdir, start_step, num_steps)

  def evaluate(step, state, should_stop=lambda: False):
    with steps.paused():
      return evaluation.evaluate_and_write(exp, state, writer, step, watchdog,
                                           should_stop)

  def save(step, state):
    if save_every >= 0:
      train_summaries.check()  # Never save the state of a non-finite update.
      watchdog.beat(f'saving the checkpoint of step {step}')
      # The summaries up to here, before the checkpoint a resumed run starts
      # after: a kill then loses none of them (one file per save at most).
      writer.flush()
      with steps.paused():
        checkpoint.save(mngr, step, strategy.to_checkpoint(state))

  batches = strategy.place_batches(exp.data.train_batches(
      batch_size=config.batch_size, seed=config.seed, start_step=start_step,
      num_steps=num_steps))
  def stopped(step, why):
    logging.warning('Stopped by %s after step %d of %d: %s. Run the same '
                    'command again to resume.', stop.received, step,
                    num_steps, why)

  eval_summary = None
  redo = _interrupted_evaluation(workdir)
  with preemption.StopRequest() as stop:
    if redo is not None and redo != start_step:
      _evaluation_done(workdir)  # Of a step trained again from before it.
    elif redo is not None and start_step < num_steps:
      # (At the last step the final evaluation below is that one.)
      logging.info('Evaluating step %d again: a stop interrupted its '
                   'evaluation.', start_step)
      if evaluate(start_step, state, stop.should_stop) is None:
        stopped(start_step, 'its evaluation is still to be done')
        return None
      _evaluation_done(workdir)
    watchdog.beat(f'training step {start_step + 1} of {num_steps}')
    for step, state, metrics in train_steps(strategy, state, batches,
                                            start_step + 1, num_steps):
      watchdog.beat(f'training step {step} of {num_steps}')
      checkpoint.check_saved(mngr)  # A failed save stops the run at once.
      last = step == num_steps
      train_summaries.add(step, metrics)
      steps.update(step)
      if profile:
        profile(step)

      train_summaries(step, last)
      stopping = stop.should_stop()
      if not stopping and (last or step % eval_every == 0):
        train_summaries.check()
        eval_summary = evaluate(step, state, stop.should_stop)
        stopping = eval_summary is None
        if stopping and save_every >= 0:  # Redone after the resume.
          _evaluation_interrupted(workdir, step)
        train_summaries.restart_clock(step)
      if stopping or last or (save_every > 0 and step % save_every == 0):
        save(step, state)
        train_summaries.restart_clock(step)
      if stopping:
        stopped(step, f'saved a checkpoint of step {step} in '
                f'{mngr.directory}' if save_every >= 0 else
                'saved nothing (checkpoint_every_steps=-1)')
        return None
    if eval_summary is None:  # Resumed from the final checkpoint.
      eval_summary = evaluate(num_steps, state)
      _evaluation_done(workdir)
  return eval_summary

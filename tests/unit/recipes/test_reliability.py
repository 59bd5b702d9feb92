"""Non-finite guards, mixed precision, init_from, eval mode and a stop
requested by a real signal, through the real loop (in-process)."""

import os
import shutil
import signal
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recipes import checkpoint, evaluation, experiment, loop
from recipes.runtime import preemption
from recipes.runtime.errors import UserError
from tests.helpers import read_scalars, saved_params, tiny_config, slow_after


def _config(data_dir, **overrides):
  return tiny_config(**{
      'dataset': 'fashion_mnist_idx', 'data_dir': data_dir, 'model': 'mlp',
      'model_kwargs': {'hidden_sizes': (32,)}, 'num_train_steps': 6,
      'checkpoint_every_steps': 2, 'log_every_steps': 1,
      'eval_every_steps': 6, **overrides})


# A learning rate this large overflows the weights within a few steps.
DIVERGING = dict(learning_rate=1e30, momentum=0.0)

pytestmark = pytest.mark.usefixtures('fast_compiles')  # A tiny MLP.


@pytest.fixture(scope='module', name='trained')
def _trained(data_dir, tmp_path_factory):
  """(workdir, final summary) of one normal run of `_config`, which tests
  read, start from or copy (none changes it)."""
  workdir = tmp_path_factory.mktemp('trained')
  return workdir, loop.train_and_evaluate(_config(data_dir), str(workdir))


@pytest.mark.parametrize('strategy', ['pmap', 'sharded'])
def test_a_diverging_run_stops_naming_the_step_and_keeps_checkpoints(
    data_dir, tmp_path, strategy):
  with pytest.raises(UserError) as error:
    loop.train_and_evaluate(_config(data_dir, strategy=strategy, **DIVERGING),
                            str(tmp_path))
  message = str(error.value)
  assert ' at step ' in message and 'skip_nonfinite_updates' in message
  assert 'training loss is' in message or 'gradient norm is' in message
  bad_step = int(message.split(' at step ')[1].split(';')[0])
  assert 1 <= bad_step <= 6
  # The summaries of the steps before it reached their files, those after
  # the last save (which flushes them) too.
  logged = read_scalars(str(tmp_path)).get('train/loss', {})
  assert set(range(1, bad_step)) <= set(logged), (bad_step, logged)
  # Every checkpoint kept is of a step before the bad one, and finite.
  with checkpoint.manager(str(tmp_path)) as mngr:
    steps = mngr.all_steps()
  assert all(step < bad_step for step in steps)
  for step in steps:
    for leaf in jax.tree.leaves(saved_params(tmp_path, step)[1]):
      assert np.isfinite(leaf).all()


def test_skip_nonfinite_updates_skips_and_counts_them(data_dir, tmp_path):
  loop.train_and_evaluate(
      _config(data_dir, skip_nonfinite_updates=True, **DIVERGING),
      str(tmp_path))
  scalars = read_scalars(str(tmp_path))
  # Step 1's update is finite but huge; every later one overflows.
  assert scalars['train/skipped_steps'] == {1: 0, 2: 1, 3: 1, 4: 1, 5: 1,
                                            6: 1}
  assert np.isfinite(scalars['train/grad_norm'][1])
  # The bad updates never landed: the weights stay those after step 1.
  after_step_1 = saved_params(tmp_path, 2)[1]
  for step in (4, 6):
    for a, b in zip(jax.tree.leaves(after_step_1),
                    jax.tree.leaves(saved_params(tmp_path, step)[1])):
      assert np.isfinite(b).all()
      np.testing.assert_array_equal(a, b)


def test_normal_runs_write_finite_gradient_norms(trained):
  norms = read_scalars(str(trained[0]))['train/grad_norm']
  assert sorted(norms) == [1, 2, 3, 4, 5, 6]
  assert all(0 < v < 100 for v in norms.values())
  assert 'train/skipped_steps' not in read_scalars(str(trained[0]))


@pytest.mark.parametrize('dtype', slow_after(1, ['bfloat16', 'float16']))
def test_half_precision_computes_in_half_and_keeps_float32_state(
    data_dir, tmp_path, dtype):
  config = _config(data_dir, half_precision=True, half_precision_dtype=dtype,
                   strategy='sharded')
  exp = experiment.build(config)
  assert exp.model.dtype == jnp.dtype(dtype)
  assert (exp.create_state().dynamic_scale is not None) == (
      dtype == 'float16')
  summary = loop.train_and_evaluate(config, str(tmp_path))
  assert np.isfinite(summary['loss'])
  for leaf in jax.tree.leaves(saved_params(tmp_path)[1]):
    assert leaf.dtype == np.float32 and np.isfinite(leaf).all()
  if dtype == 'float16':  # The loss scale is saved and restored with the rest.
    with checkpoint.manager(str(tmp_path)) as mngr:
      restored = mngr.restore(6)
    assert 0 < float(restored['dynamic_scale']['scale']) <= 65536


def test_init_from_loads_the_parameters_that_fit(data_dir, tmp_path, caplog,
                                                 trained):
  source = trained[0]
  trained = saved_params(source)[1]
  # A second hidden layer has no counterpart there: it starts from scratch;
  # a zero learning rate keeps what was loaded as it was.
  config = _config(data_dir, init_from=str(source), learning_rate=0.0,
                   model_kwargs={'hidden_sizes': (32, 32)})
  with caplog.at_level('WARNING'):
    loop.train_and_evaluate(config, str(tmp_path / 'tuned'))
  tuned = saved_params(tmp_path / 'tuned')[1]
  np.testing.assert_array_equal(tuned['Dense_0']['kernel'],
                                trained['Dense_0']['kernel'])
  assert 'Dense_1/kernel' in caplog.text  # Its shape differs: kept as init.
  assert tuned['Dense_1']['kernel'].shape == (32, 32)

  with pytest.raises(UserError, match='no checkpoint found'):
    loop.train_and_evaluate(_config(data_dir, init_from=str(tmp_path / 'x')),
                            str(tmp_path / 'other'))


def test_eval_mode_evaluates_the_latest_checkpoint(data_dir, tmp_path,
                                                   trained):
  with pytest.raises(UserError, match='no checkpoint to evaluate'):
    loop.train_and_evaluate(_config(data_dir, mode='eval'), str(tmp_path))
  workdir, summary = trained
  shutil.copytree(workdir, tmp_path / 'run')
  evaluated = loop.train_and_evaluate(_config(data_dir, mode='eval'),
                                      str(tmp_path / 'run'))
  np.testing.assert_allclose(evaluated['accuracy'], summary['accuracy'])
  np.testing.assert_allclose(evaluated['loss'], summary['loss'], rtol=1e-6)
  with checkpoint.manager(str(tmp_path / 'run')) as mngr:
    assert mngr.all_steps()[-1] == 6  # Nothing trained or written.


def test_eval_mode_without_a_checkpoint_evaluates_init_from_as_step_0(
    data_dir, tmp_path, trained):
  """Weights given by init_from (a conversion's, another run's) are
  evaluated without training, their summaries written for step 0."""
  workdir, summary = trained
  evaluated = loop.train_and_evaluate(
      _config(data_dir, mode='eval', init_from=str(workdir)), str(tmp_path))
  np.testing.assert_allclose(evaluated['loss'], summary['loss'], rtol=1e-6)
  assert read_scalars(str(tmp_path))['eval/loss'] == {0: evaluated['loss']}
  with checkpoint.manager(str(tmp_path)) as mngr:
    assert not mngr.all_steps()  # Nothing trained or written.


@pytest.mark.slow
def test_a_signal_during_evaluation_stops_and_the_resume_redoes_it(
    data_dir, tmp_path, monkeypatch, caplog):
  evaluate = evaluation.evaluate
  calls = []

  def evaluate_after_a_signal(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:  # eval/ is written; eval_ema/ and the rest are not.
      os.kill(os.getpid(), signal.SIGINT)  # A real Ctrl-C, mid-run.
    return evaluate(*args, **kwargs)

  monkeypatch.setattr(evaluation, 'evaluate', evaluate_after_a_signal)
  config = _config(data_dir, eval_every_steps=3, checkpoint_every_steps=0,
                   ema_decay=0.9)
  config.extra_eval_splits = {'minival': 'train[:16]'}
  # Whatever the process had: Python's handler, or SIG_IGN where a library
  # run earlier in this test process left that.
  before = signal.getsignal(signal.SIGINT)
  with caplog.at_level('WARNING'):
    assert loop.train_and_evaluate(config, str(tmp_path)) is None
  assert 'Stopped by SIGINT after step 3 of 6' in caplog.text
  with checkpoint.manager(str(tmp_path)) as mngr:
    assert mngr.all_steps() == [3]
  scalars = read_scalars(str(tmp_path))
  assert sorted(scalars['eval/loss']) == [3] and 'eval_ema/loss' not in scalars
  assert signal.getsignal(signal.SIGINT) is before  # Put back.

  monkeypatch.setattr(evaluation, 'evaluate', evaluate)
  with caplog.at_level('INFO'):
    summary = loop.train_and_evaluate(config, str(tmp_path))  # Resumes.
  assert ('Evaluating step 3 again: a stop interrupted its evaluation'
          in caplog.text)
  assert np.isfinite(summary['loss'])
  scalars = read_scalars(str(tmp_path))
  for prefix in ('eval', 'eval_ema', 'eval_minival', 'eval_minival_ema'):
    assert sorted(scalars[f'{prefix}/loss']) == [3, 6], prefix
  assert not (tmp_path / 'evaluation_interrupted').exists()


def test_stop_request_installs_and_restores_handlers_in_the_main_thread():
  before = signal.getsignal(signal.SIGTERM)
  with preemption.StopRequest() as stop:
    assert signal.getsignal(signal.SIGTERM) == stop._handle
    assert not stop.should_stop()
  assert signal.getsignal(signal.SIGTERM) == before
  # Elsewhere Python cannot take signals: no handler, and no error.
  answers = []

  def elsewhere():
    with preemption.StopRequest() as other:
      answers.append(other.should_stop())

  thread = threading.Thread(target=elsewhere)
  thread.start()
  thread.join(timeout=60)
  assert answers == [False]

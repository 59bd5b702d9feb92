"""Checkpoints in the loop: a restarted run resumes and ends where an
uninterrupted one does."""

import logging
import os
import shutil

import jax
import numpy as np
import pytest

from recipes import checkpoint, loop
from recipes.runtime.errors import UserError
from tests.helpers import saved_params, tiny_config

# Tiny models for a few steps: compiling dominates (tests/conftest.py).
pytestmark = pytest.mark.usefixtures('fast_compiles')


def _run(data_dir, workdir, num_steps, strategy='pmap', model='cnn',
         **overrides):
  config = tiny_config(dataset='fashion_mnist_idx', data_dir=data_dir,
                       num_train_steps=num_steps, strategy=strategy,
                       model=model,
                       checkpoint_every_steps=3, log_every_steps=2,
                       eval_every_steps=4, **overrides)
  return loop.train_and_evaluate(config, str(workdir))


@pytest.fixture(scope='module', name='straight')
def _straight(data_dir, tmp_path_factory):
  """(workdir, final summary) of an uninterrupted 8-step pmap run of the
  CNN (saves at 3, 6 and 8), for tests to compare with or copy."""
  workdir = tmp_path_factory.mktemp('straight')
  return workdir, _run(data_dir, workdir, 8)


@pytest.fixture(scope='module', name='stopped')
def _stopped(data_dir, tmp_path_factory):
  """The workdir of the same run stopped at step 5 (saves at 3 and 5), for
  tests to copy."""
  workdir = tmp_path_factory.mktemp('stopped')
  _run(data_dir, workdir, 5)
  return workdir


@pytest.mark.slow
@pytest.mark.parametrize('strategy, model', [
    ('pmap', 'cnn'), ('sharded', 'cnn'), ('shard_map', 'cnn'),
    # Dropout masks come from (seed, step): a resumed run draws the same.
    ('pmap', 'tests.helpers:DropoutNet'),
    ('sharded', 'tests.helpers:DropoutNet')])
def test_restart_resumes_and_matches_an_uninterrupted_run(
    data_dir, tmp_path, caplog, request, strategy, model):
  if (strategy, model) == ('pmap', 'cnn'):  # The module's shared runs.
    uninterrupted = request.getfixturevalue('straight')[0]
    # Stopped at the end of a 5-step run: saves at 3 and 5.
    shutil.copytree(request.getfixturevalue('stopped'),
                    tmp_path / 'restarted')
    saved, last = [3, 5], 5
  else:
    uninterrupted = tmp_path / 'straight'
    _run(data_dir, uninterrupted, 8, strategy, model)  # Saves at 3, 6, 8.
    # The run as a kill after its save of step 6 leaves it.
    shutil.copytree(uninterrupted, tmp_path / 'restarted')
    shutil.rmtree(tmp_path / 'restarted' / 'checkpoints' / '8')
    saved, last = [3, 6], 6
  assert checkpoint.manager(str(tmp_path / 'restarted')).all_steps() == saved
  with caplog.at_level(logging.INFO):
    _run(data_dir, tmp_path / 'restarted', 8, strategy, model)
  assert f'Resuming from the checkpoint of step {last}' in caplog.text
  step, straight = saved_params(uninterrupted)
  resumed_step, resumed = saved_params(tmp_path / 'restarted')
  assert step == resumed_step == 8
  for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(a, b)  # Bitwise: same data, same steps.


@pytest.mark.slow
def test_a_pmap_checkpoint_resumes_under_the_sharded_recipe(
    data_dir, tmp_path, straight, stopped):
  shutil.copytree(stopped, tmp_path / 'mixed')
  summary = _run(data_dir, tmp_path / 'mixed', 8, 'sharded')
  assert np.isfinite(summary['loss'])
  _, expected = saved_params(straight[0])
  _, got = saved_params(tmp_path / 'mixed')
  for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(got)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_finished_run_only_evaluates(data_dir, tmp_path, straight):
  workdir, first = straight
  shutil.copytree(workdir, tmp_path / 'done')
  again = _run(data_dir, tmp_path / 'done', 8)
  assert checkpoint.manager(str(tmp_path / 'done')).all_steps() == [3, 6, 8]
  np.testing.assert_allclose(again['accuracy'], first['accuracy'])
  np.testing.assert_allclose(again['loss'], first['loss'], rtol=1e-6)


def _files(path):
  return sorted((os.path.join(root, f), os.path.getsize(os.path.join(root, f)))
                for root, _, files in os.walk(path) for f in files)


@pytest.mark.slow
def test_an_unreadable_latest_checkpoint_is_set_aside(data_dir, tmp_path,
                                                      caplog, straight,
                                                      stopped):
  shutil.copytree(stopped, tmp_path / 'broken')
  latest = tmp_path / 'broken' / 'checkpoints' / '5'
  # A save that never finished leaves a temporary directory behind.
  unfinished = latest.parent / '7.orbax-checkpoint-tmp-1795990000'
  shutil.copytree(latest, unfinished)
  for path, size in _files(latest):  # Every file cut in half.
    with open(path, 'r+b') as f:
      f.truncate(size // 2)
  with caplog.at_level(logging.INFO):
    _run(data_dir, tmp_path / 'broken', 8)
  assert f'Ignoring {unfinished}: an unfinished checkpoint' in caplog.text
  assert f'Checkpoint {latest} is damaged: ' in caplog.text
  assert 'Resuming from the checkpoint of step 3' in caplog.text
  assert (tmp_path / 'broken' / 'checkpoints' / '5.unreadable').is_dir()
  _, expected = saved_params(straight[0])
  _, resumed = saved_params(tmp_path / 'broken')
  for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_a_checkpoint_of_another_model_is_an_error_and_is_kept(
    data_dir, tmp_path, straight):
  shutil.copytree(straight[0], tmp_path / 'cnn')  # The CNN's checkpoints.
  before = _files(tmp_path / 'cnn' / 'checkpoints')
  with pytest.raises(UserError, match=(
      r'does not fit this run: params/Dense_0/bias is shape \(256,\) there '
      r'and shape \(512,\) here')):
    _run(data_dir, tmp_path / 'cnn', 10, model='mlp')
  assert _files(tmp_path / 'cnn' / 'checkpoints') == before


@pytest.mark.slow
def test_turning_the_average_on_when_resuming_is_an_error_and_keeps_all(
    data_dir, tmp_path, straight):
  shutil.copytree(straight[0], tmp_path / 'cnn')
  before = _files(tmp_path / 'cnn' / 'checkpoints')
  with pytest.raises(UserError, match='saved with a different '
                     r'--config.ema_decay'):
    _run(data_dir, tmp_path / 'cnn', 10, ema_decay=0.9)
  assert _files(tmp_path / 'cnn' / 'checkpoints') == before

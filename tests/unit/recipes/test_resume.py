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


def _run(data_dir, workdir, num_steps, strategy='pmap', model='cnn',
         **overrides):
  config = tiny_config(dataset='fashion_mnist_idx', data_dir=data_dir,
                       num_train_steps=num_steps, strategy=strategy,
                       model=model,
                       checkpoint_every_steps=3, log_every_steps=2,
                       eval_every_steps=4, **overrides)
  return loop.train_and_evaluate(config, str(workdir))


@pytest.mark.slow
@pytest.mark.parametrize('strategy, model', [
    ('pmap', 'cnn'), ('sharded', 'cnn'), ('shard_map', 'cnn'),
    # Dropout masks come from (seed, step): a resumed run draws the same.
    ('pmap', 'tests.helpers:DropoutNet'),
    ('sharded', 'tests.helpers:DropoutNet')])
def test_restart_resumes_and_matches_an_uninterrupted_run(
    data_dir, tmp_path, caplog, strategy, model):
  _run(data_dir, tmp_path / 'straight', 8, strategy, model)
  # Saves at 3 and 5.
  _run(data_dir, tmp_path / 'restarted', 5, strategy, model)
  assert checkpoint.manager(str(tmp_path / 'restarted')).all_steps() == [3, 5]
  with caplog.at_level(logging.INFO):
    _run(data_dir, tmp_path / 'restarted', 8, strategy, model)
  assert 'Resuming from the checkpoint of step 5' in caplog.text
  step, straight = saved_params(tmp_path / 'straight')
  resumed_step, resumed = saved_params(tmp_path / 'restarted')
  assert step == resumed_step == 8
  for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(a, b)  # Bitwise: same data, same steps.


@pytest.mark.slow
def test_a_pmap_checkpoint_resumes_under_the_sharded_recipe(data_dir,
                                                            tmp_path):
  _run(data_dir, tmp_path / 'pmap', 8, 'pmap')
  _run(data_dir, tmp_path / 'mixed', 5, 'pmap')
  summary = _run(data_dir, tmp_path / 'mixed', 8, 'sharded')
  assert np.isfinite(summary['loss'])
  _, expected = saved_params(tmp_path / 'pmap')
  _, got = saved_params(tmp_path / 'mixed')
  for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(got)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_finished_run_only_evaluates(data_dir, tmp_path):
  first = _run(data_dir, tmp_path / 'done', 4)
  again = _run(data_dir, tmp_path / 'done', 4)
  assert checkpoint.manager(str(tmp_path / 'done')).all_steps() == [3, 4]
  np.testing.assert_allclose(again['accuracy'], first['accuracy'])
  np.testing.assert_allclose(again['loss'], first['loss'], rtol=1e-6)


def _files(path):
  return sorted((os.path.join(root, f), os.path.getsize(os.path.join(root, f)))
                for root, _, files in os.walk(path) for f in files)


@pytest.mark.slow
def test_an_unreadable_latest_checkpoint_is_set_aside(data_dir, tmp_path,
                                                      caplog):
  _run(data_dir, tmp_path / 'straight', 8)
  _run(data_dir, tmp_path / 'broken', 5)
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
  _, straight = saved_params(tmp_path / 'straight')
  _, resumed = saved_params(tmp_path / 'broken')
  for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(a, b)


def test_a_checkpoint_of_another_model_is_an_error_and_is_kept(data_dir,
                                                               tmp_path):
  _run(data_dir, tmp_path, 3, model='cnn')
  before = _files(tmp_path / 'checkpoints')
  with pytest.raises(UserError, match=(
      r'does not fit this run: params/Dense_0/bias is shape \(256,\) there '
      r'and shape \(512,\) here')):
    _run(data_dir, tmp_path, 6, model='mlp')
  assert _files(tmp_path / 'checkpoints') == before


@pytest.mark.slow
def test_turning_the_average_on_when_resuming_is_an_error_and_keeps_all(
    data_dir, tmp_path):
  _run(data_dir, tmp_path, 3)
  before = _files(tmp_path / 'checkpoints')
  with pytest.raises(UserError, match='saved with a different '
                     r'--config.ema_decay'):
    _run(data_dir, tmp_path, 6, ema_decay=0.9)
  assert _files(tmp_path / 'checkpoints') == before

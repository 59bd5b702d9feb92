"""End to end: the real loop, data pipeline and CLU writers for a few steps."""

import json
from unittest import mock

import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds

from recipes import evaluation, experiment, train
from recipes.core import optimizers, state_spec
from recipes.data import datasets
from recipes.data.sources import tfds_source
from recipes.parallel.pmap import PmapStrategy
from tests.helpers import read_scalars, tiny_config
from tests.idx_files import write_fashion_mnist

# Tiny models for a few steps: compiling dominates (tests/conftest.py).
pytestmark = pytest.mark.usefixtures('fast_compiles')

TAGS = {'train/loss', 'train/accuracy', 'train/grad_norm',
        'train/learning_rate',
        'train/steps_per_sec', 'eval/loss', 'eval/accuracy'}


@pytest.mark.slow
def test_mock_tfds_run_writes_the_six_tags(tmp_path):
  config = tiny_config(dataset='mnist', num_train_steps=6)
  with tfds.testing.mock_data(num_examples=100), mock.patch.object(
      tfds_source, 'first_unreachable_url', return_value=None):
    summary = train.run(config, str(tmp_path))
  scalars = read_scalars(str(tmp_path))
  assert TAGS <= set(scalars)
  assert sorted(scalars['train/loss']) == [2, 4, 6]
  assert sorted(scalars['eval/accuracy']) == [3, 6]
  assert scalars['train/learning_rate'][6] == np.float32(config.learning_rate)
  assert 0 <= summary['accuracy'] <= 1 and np.isfinite(summary['loss'])
  saved = json.loads((tmp_path / 'config.json').read_text())
  assert saved['model'] == 'cnn' and saved['num_train_steps'] == 6


def test_idx_run_learns_and_evaluates_every_test_example(tmp_path):
  write_fashion_mnist(str(tmp_path), num_train=96, num_test=100)
  data = datasets.load('fashion_mnist_idx', str(tmp_path))
  config = tiny_config(dataset='fashion_mnist_idx', data_dir=str(tmp_path),
                       num_train_steps=4, eval_batch_size=16)
  model = experiment.create_model(config, 10)
  tx = optimizers.create_optimizer(
      config, optimizers.learning_rate_schedule(config, 6, 4))
  strategy = PmapStrategy(state_spec.make(model, tx, (28, 28, 1)))
  state = strategy.create_state(jax.random.PRNGKey(0))
  metrics = evaluation.evaluate(strategy, state, data, batch_size=16)
  assert int(metrics.accuracy.count) == 100  # 7 batches, 12 padded slots.
  host = strategy.to_host(state)
  images = data.eval['image'].astype(np.float32) / 255
  logits = host.apply_fn({'params': host.params}, images)
  np.testing.assert_allclose(
      metrics.compute()['accuracy'],
      np.mean(np.argmax(logits, -1) == data.eval['label']), rtol=1e-6)


def test_defaults_evaluate_once_per_epoch(tmp_path):
  data_dir, workdir = tmp_path / 'data', tmp_path / 'work'
  data_dir.mkdir()
  write_fashion_mnist(str(data_dir), num_train=64, num_test=20)
  config = tiny_config(dataset='fashion_mnist_idx', data_dir=str(data_dir),
                       num_train_steps=8, log_every_steps=2,
                       eval_every_steps=0)
  train.run(config, str(workdir))
  scalars = read_scalars(str(workdir))
  assert all(v > 0 for v in scalars['train/steps_per_sec'].values())
  # 64 examples in batches of 16: an epoch is 4 steps.
  assert sorted(scalars['eval/loss']) == [4, 8]

"""Cross-device batch norm (`config.cross_device_batch_norm`): under pmap and
shard_map the statistics are those of the whole global batch, as the sharded
strategy computes them; without it, each device normalizes its own share."""

import functools

import jax
import numpy as np
import optax
import pytest

import zoo
from recipes import experiment
from recipes.core import state_spec
from recipes.parallel import strategy as strategies
from recipes.runtime.errors import UserError
from tests.helpers import tiny_config

# Each test compiles a ResNet under two or three strategies: tiny ones,
# whose compiling takes longer than running.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('fast_compiles')]


@functools.cache  # The sharded reference serves both tests in a process.
def _one_step(name: str, cross_device: bool):
  config = tiny_config(model='resnet20', strategy=name,
                       cross_device_batch_norm=cross_device)
  config.model_kwargs = zoo.spec('resnet20').test_kwargs
  strategy_class = strategies.get(name)
  model = experiment.create_model(config, 10, strategy_class.batch_axis)
  strategy = strategies.create(
      state_spec.make(model, optax.sgd(0.1), (32, 32, 3)),
      experiment.parallel_settings(config))
  rng = np.random.default_rng(0)
  # Shares of unlike statistics: each device's examples have their own scale.
  images = rng.standard_normal((16, 32, 32, 3)).astype(np.float32)
  images *= np.repeat(np.arange(1, 9, dtype=np.float32), 2)[:, None, None,
                                                              None]
  batch = {'image': images, 'label': rng.integers(0, 10, 16).astype(np.int32)}
  state = strategy.create_state(jax.random.PRNGKey(0))
  state, _ = strategy.train_step(state, next(strategy.place_batches([batch])))
  return strategy.to_host(state.batch_stats), strategy.to_host(state.params)


def _close(a, b):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(x, y, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize('name', ['pmap', 'shard_map'])
def test_global_statistics_equal_the_sharded_strategy(name):
  global_stats, global_params = _one_step('sharded', False)
  stats, params = _one_step(name, True)
  _close(stats, global_stats)
  _close(params, global_params)
  local_stats, _ = _one_step(name, False)
  variances = [np.asarray(v) for k, v in
               jax.tree_util.tree_leaves_with_path(local_stats)
               if 'var' in jax.tree_util.keystr(k)]
  expected = [np.asarray(v) for k, v in
              jax.tree_util.tree_leaves_with_path(global_stats)
              if 'var' in jax.tree_util.keystr(k)]
  assert not np.allclose(variances[0], expected[0], rtol=1e-3)


def test_a_model_without_batch_norm_is_a_user_error():
  config = tiny_config(model='cnn', cross_device_batch_norm=True)
  with pytest.raises(UserError, match='cross_device_batch_norm'):
    experiment.create_model(config, 10, 'batch')

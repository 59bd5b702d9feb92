import jax
import numpy as np
import optax
import pytest

from recipes import loop, optimizers, train_state
from recipes.parallel.pmap import PmapStrategy
from tests.helpers import BatchNormNet, tiny_config


def _replicated_state(config, strategy):
  model = loop.create_model(config, num_classes=10)
  tx = optimizers.create_optimizer(
      config, optimizers.learning_rate_schedule(config, 10, 100))
  state = train_state.create(model, tx, (28, 28, 1), jax.random.PRNGKey(0))
  return strategy.place_state(state)


def _fixed_batch(n=64):
  """Noisy images whose label is the row band that is bright: learnable."""
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 10, n).astype(np.int32)
  images = 0.3 * rng.random((n, 28, 28, 1), np.float32)
  for i, label in enumerate(labels):
    images[i, 2 * label:2 * label + 3] += 0.7
  return {'image': images, 'label': labels}


@pytest.fixture(scope='module')
def strategy():
  assert jax.local_device_count() == 8
  return PmapStrategy()


@pytest.mark.parametrize('model', ['cnn', 'mlp'])
def test_steps_lower_the_loss_and_keep_replicas_identical(strategy, model):
  config = tiny_config(model=model, learning_rate=0.05)
  state = _replicated_state(config, strategy)
  batch = next(strategy.place_batches([_fixed_batch()]))
  losses = []
  for _ in range(8):
    state, metrics = strategy.train_step(state, batch)
    losses.append(float(strategy.to_host(metrics).compute()['loss']))
  assert losses[-1] < 0.5 * losses[0], losses
  assert int(strategy.to_host(state.step)) == 8
  for leaf in jax.tree.leaves(state.params):
    shards = [np.asarray(s.data) for s in leaf.addressable_shards]
    assert len(shards) == 8
    for shard in shards[1:]:
      np.testing.assert_array_equal(shard, shards[0])


def test_metrics_cover_the_global_batch(strategy):
  state = _replicated_state(tiny_config(), strategy)
  batch = _fixed_batch()
  batch['mask'] = np.arange(64) < 50
  metrics = strategy.to_host(
      strategy.eval_step(state, next(strategy.place_batches([batch]))))
  assert int(metrics.accuracy.count) == 50
  # The same number from one device without pmap.
  single = strategy.to_host(state)
  logits = single.apply_fn({'params': single.params}, batch['image'][:50])
  expected = np.mean(np.argmax(logits, -1) == batch['label'][:50])
  np.testing.assert_allclose(metrics.compute()['accuracy'], expected)


def test_batch_norm_statistics_are_averaged_across_devices(strategy):
  model = BatchNormNet(num_classes=10)
  tx = optax.sgd(0.0)  # Parameters stay put: only the statistics change.
  state = train_state.create(model, tx, (28, 28, 1), jax.random.PRNGKey(0))
  assert state.batch_stats
  batch = _fixed_batch()
  # Devices see different data, so per-device statistics would differ.
  batch['image'] *= np.repeat(np.arange(1, 9, dtype=np.float32), 8)[
      :, None, None, None]
  replicated = strategy.place_state(state)
  replicated, _ = strategy.train_step(
      replicated, next(strategy.place_batches([batch])))
  stats = replicated.batch_stats['BatchNorm_0']['mean']
  shards = [np.asarray(s.data)[0] for s in stats.addressable_shards]
  for shard in shards[1:]:
    np.testing.assert_array_equal(shard, shards[0])
  # momentum=0 keeps the batch mean: the pmean of per-device means equals
  # the mean over the whole (equally split) global batch.
  dense = state.params['Dense_0']
  features = batch['image'].reshape(64, -1) @ dense['kernel'] + dense['bias']
  np.testing.assert_allclose(shards[0], features.mean(0), rtol=1e-4,
                             atol=1e-4)

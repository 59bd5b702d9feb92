"""The data-parallel strategies with a replicated state, pmap and shard_map:
training, evaluation and batch norm across 8 devices, and the two equal."""

import jax
import numpy as np
import optax
import pytest

from recipes import experiment
from recipes.core import optimizers, state_spec
from recipes.parallel import strategy as strategies
from tests.helpers import (BatchNormNet, learnable_batch, lowerings,
                           slow_after, tiny_config)

# Tiny models, whose compiling takes longer than running.
pytestmark = pytest.mark.usefixtures('fast_compiles')

REPLICATED = ('pmap', 'shard_map')


def _strategy(name, model, tx=None):
  tx = tx or optax.sgd(0.05, momentum=0.9)
  return strategies.create(state_spec.make(model, tx, (28, 28, 1)),
                           strategies.ParallelSettings(strategy=name))


def _replicated_state(config, name):
  model = experiment.create_model(config, num_classes=10)
  tx = optimizers.create_optimizer(
      config, optimizers.learning_rate_schedule(config, 10, 100))
  strategy = _strategy(name, model, tx)
  return strategy, strategy.create_state(jax.random.PRNGKey(0))


def _replicas(name, leaf) -> list[np.ndarray]:
  """Each device's copy of a replicated array."""
  copies = [np.asarray(s.data) for s in leaf.addressable_shards]
  return [c[0] for c in copies] if name == 'pmap' else copies


@pytest.fixture(autouse=True)
def _eight_devices():
  assert jax.local_device_count() == 8


@pytest.mark.parametrize('model', slow_after(1, ['mlp', 'cnn']))
def test_steps_lower_the_loss_keep_replicas_identical_and_agree(model):
  """Each strategy learns with every replica the same, and shard_map's state
  and metrics are pmap's, bit for bit (same shared step, same
  reductions)."""
  config = tiny_config(model=model, learning_rate=0.05)
  results = {}
  for name in REPLICATED:
    strategy, state = _replicated_state(config, name)
    batch = next(strategy.place_batches([learnable_batch()]))
    losses = []
    for _ in range(8):
      state, metrics = strategy.train_step(state, batch)
      losses.append(float(strategy.to_host(metrics).compute()['loss']))
    assert losses[-1] < 0.5 * losses[0], (name, losses)
    assert int(strategy.to_host(state.step)) == 8
    for leaf in jax.tree.leaves(state.params):
      copies = _replicas(name, leaf)
      assert len(copies) == 8
      for copy in copies[1:]:
        np.testing.assert_array_equal(copy, copies[0])
    results[name] = (strategy.to_host(state.params), losses,
                     strategy.to_host(metrics).compute())
  same = jax.tree.map(np.array_equal, results['pmap'], results['shard_map'])
  assert all(jax.tree.leaves(same)), same


# pmap's in the fast tier: the strategy that placed its state otherwise.
@pytest.mark.parametrize('name', slow_after(1, list(strategies.STRATEGIES)))
def test_the_first_steps_program_serves_the_next_steps(name):
  """The state a step returns is placed as the one it was given: a state
  placed otherwise (pmap's, on a mesh of another axis name) made every run
  compile its step a second time, at step 2."""
  strategy, state = _replicated_state(tiny_config(), name)
  batch = next(strategy.place_batches([learnable_batch()]))
  state, _ = strategy.train_step(state, batch)
  with lowerings() as lowered:
    for _ in range(2):
      state, metrics = strategy.train_step(state, batch)
    jax.block_until_ready((state, metrics))
  assert not lowered


@pytest.mark.parametrize('name', REPLICATED)
def test_metrics_cover_the_global_batch(name):
  strategy, state = _replicated_state(tiny_config(), name)
  batch = learnable_batch()
  batch['mask'] = np.arange(64) < 50
  metrics = strategy.to_host(
      strategy.eval_step(state, next(strategy.place_batches([batch]))))
  assert int(metrics.accuracy.count) == 50
  # The same number from one device without a strategy.
  single = strategy.to_host(state)
  logits = single.apply_fn({'params': single.params}, batch['image'][:50])
  expected = np.mean(np.argmax(logits, -1) == batch['label'][:50])
  np.testing.assert_allclose(metrics.compute()['accuracy'], expected)


@pytest.mark.parametrize('name', REPLICATED)
def test_batch_norm_statistics_are_averaged_across_devices(name):
  model = BatchNormNet(num_classes=10)
  tx = optax.sgd(0.0)  # Parameters stay put: only the statistics change.
  state = state_spec.make(model, tx, (28, 28, 1)).create_state()
  assert state.batch_stats
  batch = learnable_batch()
  # Devices see different data, so per-device statistics would differ.
  batch['image'] *= np.repeat(np.arange(1, 9, dtype=np.float32), 8)[
      :, None, None, None]
  strategy = _strategy(name, model, tx)
  replicated = strategy.place_state(state)
  replicated, _ = strategy.train_step(
      replicated, next(strategy.place_batches([batch])))
  copies = _replicas(name, replicated.batch_stats['BatchNorm_0']['mean'])
  for copy in copies[1:]:
    np.testing.assert_array_equal(copy, copies[0])
  # momentum=0 keeps the batch mean: the pmean of per-device means equals
  # the mean over the whole (equally split) global batch.
  dense = state.params['Dense_0']
  features = batch['image'].reshape(64, -1) @ dense['kernel'] + dense['bias']
  np.testing.assert_allclose(copies[0], features.mean(0), rtol=1e-4,
                             atol=1e-4)


def test_shard_map_computes_what_pmap_computes_with_batch_norm():
  """Same shared step, same reductions: the same bits after a few steps,
  the statistics included (the CNN's case without them:
  test_steps_lower_the_loss_keep_replicas_identical_and_agree)."""
  model = BatchNormNet(num_classes=10)
  results = {}
  for name in REPLICATED:
    strategy = _strategy(name, model)
    state = strategy.create_state(jax.random.PRNGKey(0))
    for seed in range(3):
      batch = learnable_batch()
      batch['image'] += seed
      state, metrics = strategy.train_step(
          state, next(strategy.place_batches([batch])))
    results[name] = strategy.to_host((state.params, state.batch_stats))
    results[name] += (strategy.to_host(metrics).compute(),)
  same = jax.tree.map(np.array_equal, results['pmap'], results['shard_map'])
  assert all(jax.tree.leaves(same)), same

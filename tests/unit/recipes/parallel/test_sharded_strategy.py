"""The sharded strategy on 8 simulated devices: shards, layouts, BN, eval."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoo
from recipes.core import state_spec
from recipes.parallel import partition_rules
from recipes.parallel.mesh import make_mesh
from recipes.parallel.sharded import ShardedStrategy
from tests.helpers import BatchNormNet, learnable_batch, slow_after

# Tiny models, whose compiling takes longer than running.
pytestmark = pytest.mark.usefixtures('fast_compiles')

DP = dict(data=-1, fsdp=1, tensor=1)
LAYOUTS = {
    'fsdp': dict(data=1, fsdp=-1, tensor=1),
    'tensor': dict(data=4, fsdp=1, tensor=2),
    'mixed': dict(data=2, fsdp=2, tensor=2),
}
STEPS = 3


def _vit():
  # A ViT-Ti block, shrunk: 4 heads and 64 MLP features split over 'tensor'.
  return zoo.create('vit_ti16', num_classes=10, patch_size=7, image_size=28,
                    hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64)


def _batches(n=16, count=STEPS, seed=0):
  return [learnable_batch(n, seed + i) for i in range(count)]


def _train(strategy, batches):
  """Losses of each step and the final state, as numpy."""
  state = strategy.create_state(jax.random.PRNGKey(0))
  losses = []
  for batch in strategy.place_batches(batches):
    state, metrics = strategy.train_step(state, batch)
    losses.append(float(strategy.to_host(metrics).compute()['loss']))
  return np.array(losses), state


def _assert_close(a, b):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)



# SGD: Adam would divide float-rounding noise in near-zero gradients by
# their near-zero scale, making parameters differ by up to ~1e-2 relative
# (the losses agree either way).
TX = optax.sgd(0.1, momentum=0.9)
# The MLP carries annotations; these path rules override them (tensor
# parallel by regex alone, as for a model without annotations).
MLP_TENSOR_RULES = ((r'Dense_0/kernel$', (None, 'tensor')),
                    (r'Dense_0/bias$', ('tensor',)),
                    (r'Dense_1/kernel$', ('tensor', None)))


@pytest.fixture(scope='module')
def vit_reference():
  strategy = ShardedStrategy(
      state_spec.make(_vit(), TX, (28, 28, 1)), make_mesh(DP),
      partition_rules.default_rules('vit_ti16'))
  losses, state = _train(strategy, _batches(count=1) * STEPS)
  assert losses[-1] < losses[0]
  return losses, strategy.to_host(state)


@pytest.mark.parametrize('layout', slow_after(1, ['mixed', 'fsdp', 'tensor']))
def test_vit_layouts_compute_what_pure_data_parallel_does(layout,
                                                          vit_reference):
  strategy = ShardedStrategy(
      state_spec.make(_vit(), TX, (28, 28, 1)), make_mesh(LAYOUTS[layout]),
      partition_rules.default_rules('vit_ti16'))
  losses, state = _train(strategy, _batches(count=1) * STEPS)
  # Each device holds its own shard of parameters and momenta.
  kernel = state.params['block0']['Attention_0']['query']['kernel']
  momentum = state.opt_state[0].trace['block0']['Dense_0']['kernel']
  expected = {'fsdp': ((4, 4, 8), (4, 64)), 'tensor': ((32, 2, 8), (32, 32)),
              'mixed': ((16, 2, 8), (16, 32))}[layout]
  assert {s.data.shape for s in kernel.addressable_shards} == {expected[0]}
  assert {s.data.shape for s in momentum.addressable_shards} == {expected[1]}
  assert len(kernel.addressable_shards) == 8
  reference_losses, reference_state = vit_reference
  np.testing.assert_allclose(losses, reference_losses, rtol=1e-4)
  _assert_close(strategy.to_host(state.params), reference_state.params)
  print(f'{layout}: max relative difference of the losses '
        f'{np.max(np.abs(losses / reference_losses - 1)):.2e}')


def test_tensor_parallel_by_path_rules_computes_what_data_parallel_does():
  model = zoo.create('mlp', num_classes=10, hidden_sizes=(64, 64))
  dp = ShardedStrategy(
      state_spec.make(model, TX, (28, 28, 1)), make_mesh(DP),
      partition_rules.default_rules('mlp'))
  tp = ShardedStrategy(
      state_spec.make(model, TX, (28, 28, 1)),
      make_mesh(dict(data=2, fsdp=1, tensor=4)),
      partition_rules.default_rules('mlp'), path_rules=MLP_TENSOR_RULES)
  dp_losses, dp_state = _train(dp, _batches())
  tp_losses, tp_state = _train(tp, _batches())
  assert dp_losses[-1] < dp_losses[0]
  kernel = tp_state.params['Dense_0']['kernel']
  assert {s.data.shape for s in kernel.addressable_shards} == {(784, 16)}
  np.testing.assert_allclose(tp_losses, dp_losses, rtol=1e-4)
  _assert_close(tp.to_host(tp_state.params), dp.to_host(dp_state.params))


def test_batch_norm_statistics_cover_the_global_batch():
  model = BatchNormNet(num_classes=10)
  strategy = ShardedStrategy(
      state_spec.make(model, optax.sgd(0.0), (28, 28, 1)),
      make_mesh(dict(data=2, fsdp=2, tensor=2)))
  state = strategy.create_state(jax.random.PRNGKey(0))
  params = strategy.to_host(state.params)
  batch = _batches(64, count=1)[0]
  # Each batch shard sees different data: a per-shard mean would differ.
  batch['image'] *= np.repeat(np.arange(1, 5, dtype=np.float32), 16)[
      :, None, None, None]
  state, _ = strategy.train_step(state, next(strategy.place_batches([batch])))
  mean = strategy.to_host(state.batch_stats)['BatchNorm_0']['mean']
  dense = params['Dense_0']
  features = batch['image'].reshape(64, -1) @ dense['kernel'] + dense['bias']
  np.testing.assert_allclose(mean, features.mean(0), rtol=1e-4, atol=1e-4)


def test_cnn_state_is_created_in_shards_and_eval_sees_the_global_batch():
  strategy = ShardedStrategy(
      state_spec.make(
          zoo.create('cnn', num_classes=10), optax.sgd(0.1, momentum=0.9),
          (28, 28, 1)), make_mesh(dict(data=1, fsdp=-1, tensor=1)),
      partition_rules.default_rules('cnn'))
  state = strategy.create_state(jax.random.PRNGKey(0))
  for tree in (state.params, state.opt_state[0].trace):
    kernel = tree['Dense_0']['kernel']
    assert kernel.sharding == strategy.state_shardings.params['Dense_0'][
        'kernel']
    assert [s.data.shape for s in kernel.addressable_shards] == [(392, 256)] * 8
    # The shards tile the kernel: eight different row blocks.
    assert len({s.index[0].start for s in kernel.addressable_shards}) == 8
  assert state.step.sharding.is_fully_replicated
  # The same values as a whole, single-device initialization.
  host = strategy.to_host(state)
  whole = zoo.create('cnn', num_classes=10).init(
      jax.random.PRNGKey(0), jnp.zeros((1, 28, 28, 1)))['params']
  _assert_close(host.params, nn.meta.unbox(whole))

  batch = _batches(64, count=1)[0]
  batch['mask'] = np.arange(64) < 50
  placed = next(strategy.place_batches([batch]))
  assert placed['image'].sharding.spec == jax.sharding.PartitionSpec(
      ('data', 'fsdp'))
  shards = placed['image'].addressable_shards
  assert [s.data.shape[0] for s in shards] == [8] * 8
  metrics = strategy.to_host(strategy.eval_step(state, placed))
  assert int(metrics.accuracy.count) == 50
  logits = host.apply_fn({'params': host.params}, batch['image'][:50])
  np.testing.assert_allclose(
      metrics.compute()['accuracy'],
      np.mean(np.argmax(logits, -1) == batch['label'][:50]))

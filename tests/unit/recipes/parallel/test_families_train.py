"""The zoo's newer families train under the three strategies: a few steps on
one learnable batch, at the family's test size, through the config's own
model, optimizer, default partition rules and strategy. The sharded runs use
a mesh with every axis (data 2, fsdp 2, tensor 2), so each family's logical
names meet the rules of its family: every family trains under it. The
replicated strategies (pmap, shard_map) take no rules and run every model
through the same shared step, so one family trains under them; the others'
models are the ones their sharded runs train. (ResNets, Wide-ResNets and
plain ViTs train under each strategy in test_replicated_strategies.py,
test_sharded_strategy.py and tests/unit/configs/.)"""

import jax
import numpy as np
import pytest

import zoo
from recipes import experiment
from recipes.core import optimizers, state_spec
from recipes.parallel import strategy as strategies
from tests.helpers import tiny_config

pytestmark = pytest.mark.usefixtures('fast_compiles')

# One variant per family: the others are the same code at other sizes.
FAMILIES = ['convnext_tiny', 'mixer_s16', 'bit_r50x1', 'siglip_b16',
            'dinov2_s14_reg4']
MESHES = {'pmap': dict(data=-1, fsdp=1, tensor=1),
          'shard_map': dict(data=-1, fsdp=1, tensor=1),
          'sharded': dict(data=2, fsdp=2, tensor=2)}
REPLICATED_FAMILY = 'mixer_s16'


def _learnable_batch(shape, n: int = 16) -> dict:
  """Noisy images whose label is the bright band of rows."""
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 4, n).astype(np.int32)
  images = 0.3 * rng.random((n, *shape), np.float32)
  band = shape[0] // 4
  for i, label in enumerate(labels):
    images[i, band * label:band * (label + 1)] += 0.7
  return {'image': images, 'label': labels}


# Every family under the sharded strategy (its rules); the replicated
# strategies, whose code does not depend on the family, with one of them.
RUNS = ([(name, 'sharded') for name in FAMILIES] +
        [(REPLICATED_FAMILY, strategy) for strategy in ('pmap', 'shard_map')])


@pytest.mark.slow  # About 5 s a family and strategy, compiling.
@pytest.mark.parametrize('name, strategy', RUNS)
def test_each_family_learns_under_each_strategy(name, strategy):
  spec = zoo.spec(name)
  config = tiny_config(model=name, strategy=strategy, mesh=MESHES[strategy],
                       model_kwargs=dict(spec.test_kwargs),
                       optimizer='adamw', learning_rate=3e-3,
                       lr_schedule='constant', warmup_epochs=0.0)
  model = experiment.create_model(config, num_classes=4)
  tx = optimizers.create_optimizer(
      config, optimizers.learning_rate_schedule(config, 10, 100))
  strategy_ = strategies.create(
      state_spec.make(model, tx, spec.test_input()),
      experiment.parallel_settings(config))
  state = strategy_.create_state(jax.random.PRNGKey(0))
  batch = next(strategy_.place_batches([_learnable_batch(spec.test_input())]))
  losses = []
  for _ in range(6):
    state, metrics = strategy_.train_step(state, batch)
    losses.append(float(strategy_.to_host(metrics).compute()['loss']))
  assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses

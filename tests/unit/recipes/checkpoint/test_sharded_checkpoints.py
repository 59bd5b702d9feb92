"""A sharded checkpoint restores onto another mesh, and onto fewer devices."""

import jax
import numpy as np
import optax
import pytest

import zoo
from recipes import checkpoint
from recipes.core import state_spec
from recipes.parallel import partition_rules
from recipes.parallel.mesh import make_mesh
from recipes.parallel.sharded import ShardedStrategy
from tests.helpers import random_batch

# A tiny ViT, whose compiling takes longer than running.
pytestmark = pytest.mark.usefixtures('fast_compiles')


def _strategy(mesh, devices=None):
  model = zoo.create('vit_ti16', num_classes=10, patch_size=7, image_size=28,
                     hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64)
  return ShardedStrategy(
      state_spec.make(model, optax.adam(1e-3), (28, 28, 1)),
      make_mesh(mesh, devices), partition_rules.default_rules('vit_ti16'))


@pytest.mark.slow
def test_restore_onto_another_mesh_and_fewer_devices(tmp_path):
  assert checkpoint.restore(checkpoint.manager(str(tmp_path)),
                             _strategy(dict(data=8, fsdp=1, tensor=1))
                             .abstract_state) is None
  source = _strategy(dict(data=8, fsdp=1, tensor=1))
  state = source.create_state(jax.random.PRNGKey(0))
  # A step first, so that the step count and Adam's moments are not zeros.
  state, _ = source.train_step(
      state, next(source.place_batches([random_batch(8)])))
  with checkpoint.manager(str(tmp_path)) as mngr:  # Waits for the save.
    checkpoint.save(mngr, 1, state)
  saved = source.to_host(state)

  for mesh, devices in ((dict(data=4, fsdp=1, tensor=2), None),
                        (dict(data=1, fsdp=2, tensor=2), jax.devices()[:4])):
    target = _strategy(mesh, devices)
    restored = checkpoint.restore(checkpoint.manager(str(tmp_path)),
                                   target.abstract_state)
    assert int(target.to_host(restored.step)) == 1
    # Every array lies where the new mesh's rules put it...
    for array, sharding in zip(jax.tree.leaves(restored),
                               jax.tree.leaves(target.state_shardings)):
      assert array.sharding == sharding
    kernel = restored.params['block0']['Dense_0']['kernel']
    assert len(kernel.sharding.device_set) == len(devices or jax.devices())
    assert kernel.addressable_shards[0].data.shape == (
        (32, 32) if devices is None else (16, 32))
    # ...and holds exactly the saved values.
    for a, b in zip(jax.tree.leaves(target.to_host(restored)),
                    jax.tree.leaves(saved)):
      np.testing.assert_array_equal(a, b)

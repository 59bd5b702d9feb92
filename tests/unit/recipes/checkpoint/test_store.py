"""What a save costs: a replicated state goes into a checkpoint without a
program per array. pmap's copies become one replicated copy in one program,
and orbax writes arrays under 1 MiB a slice from one device whole, where it
would compile a slicing program per array shape and device."""

import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import zoo
from recipes import checkpoint
from recipes.checkpoint import store
from recipes.core import state_spec
from recipes.parallel.pmap import PmapStrategy
from tests.helpers import lowerings


def _replicated(*shape):
  """float32 values of `shape` held whole by each of the 8 devices."""
  values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
  return jax.device_put(values, NamedSharding(Mesh(np.array(jax.devices()),
                                                   ('devices',)),
                                              PartitionSpec()))


def test_arrays_under_a_mib_a_slice_are_written_whole(tmp_path):
  # 8 copies: a slice is an eighth of the array. Shapes no other test uses,
  # so that no slicing program of theirs is in JAX's memory.
  small = {'bias': _replicated(136), 'kernel': _replicated(8, 8 * 1031)}
  large = {'kernel': _replicated(8, store.MIN_SLICE_BYTES // 4)}  # 1 MiB.
  for tree, name in ((small, 'small'), (large, 'large')):
    with checkpoint.manager(str(tmp_path / name)) as mngr, lowerings() as n:
      checkpoint.save(mngr, 1, tree)
      mngr.wait_until_finished()
    if tree is small:
      assert not n, 'orbax sliced arrays below 1 MiB a slice'
    else:  # One slice for each device to write.
      assert len(n) == len(jax.devices()), 'orbax wrote a large array whole'
    restored = checkpoint.restore(checkpoint.manager(str(tmp_path / name)),
                                  jax.tree.map(lambda a: jax.ShapeDtypeStruct(
                                      a.shape, a.dtype, sharding=a.sharding),
                                               tree))
    for saved, read in zip(jax.tree.leaves(tree), jax.tree.leaves(restored)):
      np.testing.assert_array_equal(np.asarray(read), np.asarray(saved))


def test_pmaps_copies_become_one_checkpoint_copy_in_one_program():
  strategy = PmapStrategy(state_spec.make(
      zoo.create('cnn', num_classes=10), optax.sgd(0.1), (28, 28, 1)))
  rng = np.random.default_rng(0)
  # A state's kinds of arrays, as pmap holds them: a copy on each device.
  one = {'step': np.int32(3),
         'kernel': rng.normal(size=(3, 3, 1, 8)).astype(np.float32),
         'bias': rng.normal(size=8).astype(np.float32),
         'tokens': rng.integers(0, 9, size=(4, 5), dtype=np.int32)}
  state = strategy.place_state(one)
  with lowerings() as n:
    copy = strategy.to_checkpoint(state)
  assert len(n) == 1
  for name, replicated in copy.items():
    assert replicated.sharding.is_fully_replicated
    assert len(replicated.sharding.device_set) == len(jax.devices())
    for shard in replicated.addressable_shards:
      np.testing.assert_array_equal(np.asarray(shard.data), one[name])
      assert shard.data.dtype == one[name].dtype

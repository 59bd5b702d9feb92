"""An NNX module of one's own trains with the recipes (zoo/nnx_models.py):
named by its import path, it is created with the config's arguments, learns
under pmap and sharded with its batch-norm statistics averaged across
devices, resumes bitwise from a checkpoint, and its parameters' logical
names place them on the mesh through the partition rules (as for the
example of docs/models.md)."""

import logging
import os
import re
import shutil
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import zoo
from recipes import experiment
from recipes.core import optimizers, state_spec
from recipes.parallel import strategy as strategies
from recipes.runtime.errors import UserError
from tests.helpers import (ROOT, command_env, learnable_batch, saved_params,
                           tiny_config)
from tests.unit.recipes.test_resume import _run

pytestmark = pytest.mark.usefixtures('fast_compiles')

MODEL = 'tests.nnx_model_fixture:SmallNNXNet'
RULES = (('embed', 'fsdp'), ('mlp', 'tensor'))
MESHES = {'pmap': dict(data=-1, fsdp=1, tensor=1),
          'sharded': dict(data=2, fsdp=2, tensor=2)}


def _config(strategy='pmap', **overrides):
  return tiny_config(model=MODEL, strategy=strategy, mesh=MESHES[strategy],
                     partition_rules=RULES, **overrides)


def _strategy(config):
  model = experiment.create_model(config, num_classes=10)
  tx = optimizers.create_optimizer(
      config, optimizers.learning_rate_schedule(config, 10, 100))
  return strategies.create(state_spec.make(model, tx, (28, 28, 1)),
                           experiment.parallel_settings(config))


def test_the_class_is_a_linen_model_with_params_and_batch_stats():
  model = zoo.create(MODEL, num_classes=10, dtype=jnp.bfloat16, hidden=8)
  assert isinstance(model, nn.Module) and type(model).__name__ == 'SmallNNXNet'
  assert model == zoo.create(MODEL, num_classes=10, dtype=jnp.bfloat16,
                             hidden=8)  # The same programs, compiled once.
  variables = jax.eval_shape(lambda: model.init(
      jax.random.PRNGKey(0), jnp.zeros((2, 28, 28, 1)), train=False))
  assert variables['params']['hidden']['kernel'].value.shape == (784, 8)
  assert set(variables['batch_stats']['norm']) == {'mean', 'var'}
  assert nn.get_partition_spec(variables)['params']['hidden']['kernel'] == P(
      'embed', 'mlp')
  logits = model.apply(nn.meta.unbox(model.init(
      jax.random.PRNGKey(0), jnp.ones((2, 28, 28, 1)), train=False)),
                       jnp.ones((2, 28, 28, 1)))
  assert logits.shape == (2, 10) and logits.dtype == jnp.bfloat16


@pytest.mark.parametrize('overrides, message', [
    (dict(model_kwargs={'width': 8}),
     "SmallNNXNet: got an unexpected keyword argument 'width'"),
    (dict(cross_device_batch_norm=True), 'cross_device_batch_norm needs'),
])
def test_a_wrong_argument_is_a_user_error(overrides, message):
  with pytest.raises(UserError, match=message) as error:
    experiment.create_model(_config(**overrides), 10, 'batch')
  assert '\n' not in str(error.value)


@pytest.mark.parametrize('strategy', list(MESHES))
def test_it_learns_and_averages_its_statistics_across_devices(strategy):
  config = _config(strategy, optimizer='adamw', learning_rate=3e-3,
                   lr_schedule='constant', warmup_epochs=0.0)
  strategy_ = _strategy(config)
  state = strategy_.create_state(jax.random.PRNGKey(0))
  batch = next(strategy_.place_batches([learnable_batch(16)]))
  losses = []
  for _ in range(6):
    state, metrics = strategy_.train_step(state, batch)
    losses.append(float(strategy_.to_host(metrics).compute()['loss']))
  assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses
  mean = state.batch_stats['norm']['mean']
  shards = [np.asarray(s.data) for s in mean.addressable_shards]
  assert len(shards) == 8 and np.abs(shards[0]).max() > 0
  for shard in shards[1:]:  # Each device saw other examples: averaged.
    np.testing.assert_array_equal(shard, shards[0])


def test_logical_names_place_parameters_on_the_mesh():
  strategy_ = _strategy(_config('sharded'))
  state = strategy_.create_state(jax.random.PRNGKey(0))
  assert state.params['hidden']['kernel'].sharding.spec == P('fsdp', 'tensor')
  assert state.params['head']['kernel'].sharding.spec == P()
  assert state.batch_stats['norm']['mean'].sharding.spec == P()
  # Unlike the replicated strategy's, each device holds a quarter of it.
  assert state.params['hidden']['kernel'].addressable_shards[0].data.shape == (
      392, 8)


def test_the_docs_example_is_placed_as_its_command_says(tmp_path,
                                                       monkeypatch):
  with open(os.path.join(ROOT, 'docs', 'models.md'), encoding='utf-8') as f:
    code = re.search(r'```python\n# my_nnx_models.py\n(.*?)```', f.read(),
                     re.DOTALL)[1]
  (tmp_path / 'my_nnx_models.py').write_text(code)
  monkeypatch.syspath_prepend(str(tmp_path))
  config = tiny_config(model='my_nnx_models:SmallNet', strategy='sharded',
                       mesh=dict(data=1, fsdp=-1, tensor=1),
                       partition_rules=(('embed', 'fsdp'),))
  try:
    state = _strategy(config).create_state(jax.random.PRNGKey(0))
  finally:
    sys.modules.pop('my_nnx_models', None)
  assert state.params['hidden']['kernel'].sharding.spec == P('fsdp')
  assert set(state.batch_stats['norm']) == {'mean', 'var'}


@pytest.mark.slow
@pytest.mark.parametrize('strategy', list(MESHES))
def test_a_restarted_run_ends_bitwise_where_a_straight_one_does(
    data_dir, tmp_path, caplog, strategy):
  # Dropout masks come from (seed, step); statistics are checkpointed.
  kwargs = dict(strategy=strategy, model=MODEL, mesh=MESHES[strategy],
                partition_rules=RULES)
  _run(data_dir, tmp_path / 'straight', 6, **kwargs)  # Saves at 3 and 6.
  # The run as a kill after its save of step 3 leaves it.
  shutil.copytree(tmp_path / 'straight', tmp_path / 'restarted')
  shutil.rmtree(tmp_path / 'restarted' / 'checkpoints' / '6')
  with caplog.at_level(logging.INFO):
    _run(data_dir, tmp_path / 'restarted', 6, **kwargs)
  assert 'Resuming from the checkpoint of step 3' in caplog.text
  for item in ('params', 'batch_stats'):
    step, straight = saved_params(tmp_path / 'straight', item=item)
    resumed_step, resumed = saved_params(tmp_path / 'restarted', item=item)
    assert step == resumed_step == 6
    for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed),
                    strict=True):
      np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # A fresh process: this one has loaded flax.nnx.
def test_flax_nnx_loads_only_for_an_nnx_model():
  code = ('import sys; import zoo; from recipes import train; '
          "print('flax.nnx' in sys.modules); "
          f'zoo.create({MODEL!r}, num_classes=3); '
          "print('flax.nnx' in sys.modules)")
  out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, check=True,
                       capture_output=True, text=True,
                       env=command_env()).stdout
  assert out.splitlines()[-2:] == ['False', 'True']

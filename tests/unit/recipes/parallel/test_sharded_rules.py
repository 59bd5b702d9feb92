"""Meshes and partition rules of the sharded recipe; shapes only, no steps."""

import functools

import flax.linen as nn
import jax
import optax
import pytest
from jax.sharding import PartitionSpec as P

import zoo
from recipes import experiment
from recipes.core import state_spec
from recipes.parallel import partition_rules
from recipes.parallel.mesh import make_mesh, mesh_shape
from recipes.parallel.sharded import ShardedStrategy
from recipes.runtime.errors import UserError
from tests.helpers import ROOT, config_from_command_line, tiny_config

DP = dict(data=-1, fsdp=1, tensor=1)
FSDP = dict(data=1, fsdp=-1, tensor=1)
MIXED = dict(data=2, fsdp=2, tensor=2)


SGD = optax.sgd(0.1, momentum=0.9)


def _strategy(name, mesh, tx=SGD, rules=None, path_rules=(), **kwargs):
  return ShardedStrategy(
      _state_spec(name, tx, **kwargs), make_mesh(mesh),
      partition_rules.default_rules(name) if rules is None else rules,
      path_rules)


@functools.lru_cache(maxsize=None)
def _state_spec(name, tx, **kwargs):
  """Traced once per model and optimizer: a full-size model's takes seconds,
  and the tests lay it out on several meshes."""
  model = zoo.create(name, num_classes=10, **kwargs)
  return state_spec.make(model, tx, zoo.input_shape(name, **kwargs))


def _specs(strategy):
  return {partition_rules.path_str(path): sharding.spec for path, sharding in
          jax.tree_util.tree_leaves_with_path(strategy.state_shardings.params)}


def _param_bytes(strategy):
  return partition_rules.bytes_per_device(strategy.abstract_state.params,
                                          strategy.state_shardings.params)


def test_mesh_sizes_fill_in_minus_one_and_must_match_the_devices():
  assert mesh_shape(dict(data=-1, fsdp=1, tensor=2), 8) == (4, 1, 2)
  assert mesh_shape(dict(data=2, fsdp=-1, tensor=2), 8) == (2, 2, 2)
  assert mesh_shape(dict(data=2, fsdp=2, tensor=2), 8) == (2, 2, 2)
  with pytest.raises(UserError, match='has 6 devices but there are 8'):
    mesh_shape(dict(data=3, fsdp=2, tensor=1), 8)
  with pytest.raises(UserError, match='multiply to 3, which does not divide 8'):
    mesh_shape(dict(data=-1, fsdp=3, tensor=1), 8)
  with pytest.raises(UserError, match='at most one of them -1'):
    mesh_shape(dict(data=-1, fsdp=-1, tensor=1), 8)
  # The recipe checks before loading any data.
  config = tiny_config(strategy='sharded', mesh=dict(data=4, fsdp=1,
                                                     tensor=1))
  with pytest.raises(UserError, match='has 4 devices but there are 8'):
    experiment.build(config)
  config.mesh.update(data=-1, tensor=2, fsdp=4)  # Batch shards: 1 x 4.
  config.batch_size = 18
  with pytest.raises(UserError, match='batch_size 18 is not divisible by the '
                     r'4 batch shards \(mesh.data x mesh.fsdp\)'):
    experiment.build(config)
  mesh = make_mesh(dict(data=-1, fsdp=1, tensor=2))
  assert dict(mesh.shape) == dict(data=4, fsdp=1, tensor=2)
  assert all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)


def test_mesh_and_rules_come_from_the_command_line():
  argv = ['train', f'--config={ROOT}/configs/fashion_mnist_sharded.py',
          '--config.mesh.data=-1', '--config.mesh.tensor=2',
          "--config.partition_rules=(('mlp', 'tensor'), ('embed', 'fsdp'))",
          "--config.path_rules=(('Dense_1/kernel$', ('tensor',)),)"]
  config = config_from_command_line(argv)
  assert config.strategy == 'sharded'
  assert mesh_shape(config.mesh, 8) == (4, 1, 2)
  strategy = _strategy('cnn', config.mesh, rules=partition_rules.logical_rules(
      config.partition_rules), path_rules=config.path_rules)
  specs = _specs(strategy)
  assert specs['Dense_0/kernel'] == P('fsdp', 'tensor')
  assert specs['Dense_1/kernel'] == P('tensor')  # The path rule comes first.
  assert specs['Conv_0/kernel'] == P()  # No rule for conv_out: replicated.


@pytest.mark.parametrize('name,mesh,expected', [
    ('cnn', FSDP, {'Conv_1/kernel': P(None, None, None, 'fsdp'),
                   'Dense_0/kernel': P('fsdp'), 'Dense_0/bias': P(),
                   'Dense_1/bias': P()}),
    ('mlp', MIXED, {'Dense_0/kernel': P('fsdp'), 'Dense_2/kernel': P('fsdp')}),
    ('resnet50', FSDP, {
        'Bottleneck_0/Conv_1/kernel': P(None, None, None, 'fsdp'),
        'Bottleneck_0/BatchNorm_1/scale': P(), 'BatchNorm_0/bias': P()}),
    ('wrn28_10', MIXED, {
        'PreActBlock_0/Conv_1/kernel': P(None, None, None, 'fsdp'),
        'Dense_0/kernel': P('fsdp')}),
    ('vit_b16', MIXED, {
        'block0/Attention_0/query/kernel': P('fsdp', 'tensor'),
        'block0/Attention_0/query/bias': P('tensor'),
        'block0/Attention_0/out/kernel': P('tensor', None, 'fsdp'),
        'block0/Dense_0/kernel': P('fsdp', 'tensor'),
        'block0/Dense_0/bias': P('tensor'),
        'block0/Dense_1/kernel': P('tensor', 'fsdp'),
        'block0/LayerNorm_0/scale': P(), 'head/kernel': P('fsdp'),
        'pos_embedding': P(None, None, 'fsdp')}),
])
def test_default_rules_place_each_model_family(name, mesh, expected):
  specs = _specs(_strategy(name, mesh))
  assert {k: specs[k] for k in expected} == expected


def test_every_model_family_has_default_rules():
  assert set(partition_rules.FAMILY_RULES) == set(zoo.registry.FAMILIES)
  assert partition_rules.default_rules('vit_b16') is (
      partition_rules.TRANSFORMER_RULES)
  assert partition_rules.default_rules('mlp') is partition_rules.CONV_RULES
  # Picked when the user gives none, they stay the defaults.
  defaults = partition_rules.CONV_RULES
  picked = partition_rules.logical_rules((), defaults)
  users = partition_rules.logical_rules((('mlp', 'tensor'),), defaults)
  assert isinstance(picked, partition_rules.DefaultRules)
  assert not isinstance(users, partition_rules.DefaultRules)


def test_optimizer_state_is_split_like_the_parameters():
  tx = optax.adamw(1e-3, weight_decay=0.1, mask=lambda p: jax.tree.map(
      lambda x: x.ndim > 1, p))
  strategy = _strategy('vit_ti16', MIXED, tx=tx, patch_size=8, image_size=32,
                       num_heads=4)
  adam = strategy.state_shardings.opt_state[0]
  assert adam.count.spec == P()
  for moments in (adam.mu, adam.nu):
    assert jax.tree.map(lambda s: s.spec, moments) == jax.tree.map(
        lambda s: s.spec, strategy.state_shardings.params)
  assert strategy.state_shardings.step.spec == P()


@pytest.mark.parametrize('name', ['cnn', 'resnet50', 'vit_b16'])
def test_fsdp_divides_the_bytes_per_device_by_about_its_size(name):
  dp, fsdp = _strategy(name, DP), _strategy(name, FSDP)
  ratio = _param_bytes(dp) / _param_bytes(fsdp)
  assert 7.5 < ratio <= 8, ratio  # Biases and norms stay replicated.
  opt = [partition_rules.bytes_per_device(s.abstract_state.opt_state,
                                          s.state_shardings.opt_state)
         for s in (dp, fsdp)]
  assert 7.5 < opt[0] / opt[1] <= 8
  if name == 'vit_b16':  # data 2 x fsdp 2 x tensor 2: every matrix 4 ways.
    assert 3.8 < _param_bytes(dp) / _param_bytes(_strategy(name, MIXED)) <= 4


def test_a_rule_that_does_not_divide_a_dimension_is_a_clear_error():
  # ViT-S has 6 heads: 'heads' -> 'tensor' cannot split them 4 ways.
  with pytest.raises(UserError) as error:
    _strategy('vit_s16', dict(data=2, fsdp=1, tensor=4))
  assert str(error.value).startswith(
      'cannot shard parameter block0/Attention_0/key/bias: dimension 0 of its '
      "shape (6, 64) has size 6, which mesh axis 'tensor' of size 4 does not "
      'divide')
  with pytest.raises(UserError, match=r"Dense_2/kernel: dimension 1 of its "
                     r"shape \(512, 10\) has size 10, which mesh axis "
                     r"\('data', 'fsdp'\) of size 8"):
    _strategy('mlp', DP, path_rules=(('Dense_2/kernel', (None, ('data',
                                                               'fsdp'))),))


class _Plain(nn.Module):
  """No logical-axis annotations: only path rules can place it."""

  num_classes: int

  @nn.compact
  def __call__(self, x, train: bool = False):
    x = nn.relu(nn.Dense(64)(x.reshape((x.shape[0], -1))))
    x = nn.relu(nn.Dense(64)(x))
    return nn.Dense(self.num_classes)(x)


def test_path_rules_first_match_wins_and_the_rest_is_replicated():
  rules = ((r'Dense_0/kernel$', (None, 'tensor')),
           (r'Dense_\d/kernel$', ('tensor',)))
  strategy = ShardedStrategy(
      state_spec.make(_Plain(10), optax.sgd(0.1), (28, 28, 1)),
      make_mesh(dict(data=4, fsdp=1, tensor=2)), path_rules=rules)
  assert _specs(strategy) == {
      'Dense_0/kernel': P(None, 'tensor'), 'Dense_1/kernel': P('tensor'),
      'Dense_2/kernel': P('tensor'), 'Dense_0/bias': P(),
      'Dense_1/bias': P(), 'Dense_2/bias': P()}


def test_bad_rules_are_clear_errors():
  with pytest.raises(UserError, match="names mesh axis 'model'"):
    partition_rules.logical_rules((('mlp', 'model'),))
  with pytest.raises(UserError, match='not a .logical name, mesh axes. pair'):
    partition_rules.logical_rules(('mlp',))
  with pytest.raises(UserError, match='has 3 entries but parameter '
                     r'Dense_0/bias has shape \(64,\)'):
    ShardedStrategy(
        state_spec.make(_Plain(10), optax.sgd(0.1), (28, 28, 1)), make_mesh(DP),
        path_rules=(('Dense_0/bias', (None, None, None)),))
  # Rules without 'batch' get the batch split over ('data', 'fsdp').
  assert partition_rules.logical_rules((('mlp', 'tensor'),))[0] == (
      'batch', ('data', 'fsdp'))


def test_the_log_shows_the_mesh_and_one_row_per_parameter():
  strategy = _strategy('cnn', MIXED)
  text = strategy.describe()
  assert "mesh data=2, fsdp=2, tensor=2, axis names ('data', 'fsdp', " in text
  assert '[[[0 1]\n  [2 3]]' in text  # Device ids in mesh order.
  rows = [line for line in text.splitlines() if line.startswith('| ')]
  assert len(rows) == 1 + 8 + 1  # Header, 8 parameters, total.
  dense = next(r for r in rows if r.startswith('| Dense_0/kernel '))
  assert '(3136, 256)' in dense and "P('fsdp'" in dense
  assert dense.rstrip(' |').endswith('1,605,632')  # 3136 * 256 * 4 / 2.


def test_a_rule_that_matches_no_parameter_gets_a_warning(caplog):
  """A misspelt logical name or path is named. Not warned of: the default
  rules, shared by a family (the MLP has no convolutions), and activation
  names ('height')."""
  with caplog.at_level('WARNING'):
    _strategy('mlp', DP)
    _strategy('resnet20', DP)
    _strategy('cnn', DP, rules=(('mpl', 'tensor'), ('embed', 'fsdp'),
                                ('height', None)),
              path_rules=(('Dense_0/kernel$', (None, 'tensor')),
                          ('Dense_9/kernel$', ('tensor',))))
    ShardedStrategy(
        state_spec.make(_Plain(10), optax.sgd(0.1), (28, 28, 1)), make_mesh(DP),
        rules=(('mlp', 'tensor'),))
  assert [r.getMessage() for r in caplog.records] == [
      "config.path_rules entry ('Dense_9/kernel$', ('tensor',)) matches no "
      "parameter path (they look like 'Conv_0/bias', 'Conv_0/kernel', "
      "'Conv_1/bias', 'Conv_1/kernel').",
      "config.partition_rules entry ('mpl', 'tensor') matches no parameter: "
      "none has a dimension named 'mpl' (their names: classes, conv_in, "
      'conv_out, embed, mlp); it can only place activations.',
      "config.partition_rules entry ('mlp', 'tensor') matches no parameter: "
      "none has a dimension named 'mlp' (they have no logical names: use "
      'config.path_rules); it can only place activations.']

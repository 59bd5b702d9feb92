import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import zoo


@pytest.mark.parametrize('name', zoo.list_models())
@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16])
def test_output_shape_and_dtype(name, dtype):
  model = zoo.create(name, num_classes=7, dtype=dtype)
  x = jnp.ones((3, 28, 28, 1))
  variables = nn.meta.unbox(model.init(jax.random.PRNGKey(0), x, train=False))
  # Unboxing leaves plain arrays, ready for a train state.
  assert all(isinstance(v, jax.Array) for v in jax.tree.leaves(
      variables, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned)))
  logits = model.apply(variables, x, train=False)
  assert logits.shape == (3, 7)
  assert logits.dtype == dtype
  # Parameters stay float32 whatever the computation dtype.
  assert {p.dtype for p in jax.tree.leaves(variables['params'])} == {
      jnp.dtype(jnp.float32)}


def test_cnn_layers_and_parameter_count():
  model = zoo.create('cnn', num_classes=10)
  params = nn.meta.unbox(
      model.init(jax.random.PRNGKey(0), jnp.ones((1, 28, 28, 1))))['params']
  shapes = {k: v['kernel'].shape for k, v in params.items()}
  assert shapes == {'Conv_0': (3, 3, 1, 32), 'Conv_1': (3, 3, 32, 64),
                    'Dense_0': (7 * 7 * 64, 256), 'Dense_1': (256, 10)}
  assert sum(p.size for p in jax.tree.leaves(params)) == 824_458


def test_mlp_hidden_sizes_are_configurable():
  model = zoo.create('mlp', num_classes=10, hidden_sizes=(64, 32, 16))
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0),
                          jnp.ones((1, 28, 28, 1)))['params']
  assert [params[f'Dense_{i}']['kernel'].value.shape for i in range(4)] == [
      (784, 64), (64, 32), (32, 16), (16, 10)]
  default = zoo.create('mlp', num_classes=10)
  assert default.hidden_sizes == (512, 512)


def test_list_models_filters_with_fnmatch():
  assert {'cnn', 'mlp'} <= set(zoo.list_models())
  assert zoo.list_models('c*') == ['cnn']
  assert zoo.list_models('nothing*') == []


def test_unknown_model_names_close_matches():
  with pytest.raises(ValueError, match=r"unknown model 'cnnn'.*'cnn'"):
    zoo.create('cnnn', num_classes=10)


@pytest.mark.parametrize('name', zoo.list_models())
def test_parameters_carry_logical_names_with_rules(name):
  model = zoo.create(name, num_classes=7)
  x = jnp.ones((2, *zoo.input_shape(name)))
  boxed = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)['params']
  rules = dict(zoo.default_rules(name))
  assert rules['batch'] == ('data', 'fsdp')
  is_box = lambda x: isinstance(x, nn.LogicallyPartitioned)
  for path, leaf in jax.tree_util.tree_leaves_with_path(boxed, is_leaf=is_box):
    assert is_box(leaf), f'{jax.tree_util.keystr(path)} has no logical names'
    assert len(leaf.names) == leaf.value.ndim
    unruled = {n for n in leaf.names if n is not None} - set(rules)
    assert not unruled, f'{jax.tree_util.keystr(path)}: no rule for {unruled}'


def test_registry_records_input_shapes_and_rules():
  assert zoo.input_shape('mlp') == (28, 28, 1)
  with pytest.raises(ValueError, match='unknown model'):
    zoo.default_rules('vit')
  with pytest.raises(ValueError, match='registered twice'):
    zoo.register('cnn', input_shape=(28, 28, 1), rules=())(nn.Dense)


def test_flops_count_multiply_adds_twice():
  # Dense layers: in x out multiply-adds each.
  mlp = zoo.model_info('mlp', hidden_sizes=(64, 32))
  assert mlp.gflops * 1e9 == 2 * (784 * 64 + 64 * 32 + 32 * 10)
  assert mlp.num_params == 784 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10
  # 3x3 'SAME' convs over every output pixel (padding counted), then dense.
  cnn = zoo.model_info('cnn')
  macs = (28 * 28 * 32 * 9 * 1 + 14 * 14 * 64 * 9 * 32 + 3136 * 256 +
          256 * 10)
  assert cnn.gflops * 1e9 == 2 * macs
  assert cnn.num_params == 824_458
  assert cnn.input_shape == (28, 28, 1)


def test_table_lists_every_model(capsys):
  from zoo import __main__ as zoo_main  # pylint: disable=g-import-not-at-top
  zoo_main.main()
  rows = capsys.readouterr().out.splitlines()[1:]
  assert [row.split()[0] for row in rows] == zoo.list_models()
  cnn = next(r for r in rows if r.startswith('cnn '))
  assert cnn.split()[1:] == ['824,458', '0.009', '28x28x1']

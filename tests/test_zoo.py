import jax
import jax.numpy as jnp
import pytest

import zoo


@pytest.mark.parametrize('name', zoo.list_models())
@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16])
def test_output_shape_and_dtype(name, dtype):
  model = zoo.create(name, num_classes=7, dtype=dtype)
  x = jnp.ones((3, 28, 28, 1))
  variables = model.init(jax.random.PRNGKey(0), x, train=False)
  logits = model.apply(variables, x, train=False)
  assert logits.shape == (3, 7)
  assert logits.dtype == dtype
  # Parameters stay float32 whatever the computation dtype.
  assert {p.dtype for p in jax.tree.leaves(variables['params'])} == {
      jnp.dtype(jnp.float32)}


def test_cnn_layers_and_parameter_count():
  model = zoo.create('cnn', num_classes=10)
  params = model.init(jax.random.PRNGKey(0), jnp.ones((1, 28, 28, 1)))['params']
  shapes = {k: v['kernel'].shape for k, v in params.items()}
  assert shapes == {'Conv_0': (3, 3, 1, 32), 'Conv_1': (3, 3, 32, 64),
                    'Dense_0': (7 * 7 * 64, 256), 'Dense_1': (256, 10)}
  assert sum(p.size for p in jax.tree.leaves(params)) == 824_458


def test_mlp_hidden_sizes_are_configurable():
  model = zoo.create('mlp', num_classes=10, hidden_sizes=(64, 32, 16))
  params = model.init(jax.random.PRNGKey(0), jnp.ones((1, 28, 28, 1)))['params']
  assert [params[f'Dense_{i}']['kernel'].shape for i in range(4)] == [
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

"""The ViT's outputs besides logits and its newer options: features=True,
num_classes=0, attention pooling (pool='map'), registers, layer scale,
class_posemb and dynamic_size. Tiny models; the comparisons with timm are in
tests/unit/zoo/convert/test_convert_{timm,siglip,dinov2}.py."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo import vit
from tests.helpers import slow_after

# Tiny models: compile time dominates (tests/conftest.py).
pytestmark = pytest.mark.usefixtures('fast_compiles')


def _small(name, **kwargs):
  """The test-size model `name` (7 classes) and a batch of 2 inputs."""
  spec = zoo.spec(name)
  model = zoo.create(name, **{**spec.test_kwargs, 'num_classes': 7, **kwargs})
  x = jax.random.normal(jax.random.PRNGKey(1), (2, *spec.test_input()))
  return model, x


@functools.partial(jax.jit, static_argnums=0)
def _init(model, x):
  """Variables with every parameter perturbed (the head starts at zero)."""
  variables = nn.meta.unbox(model.init(jax.random.PRNGKey(0), x))
  leaves, tree = jax.tree.flatten(variables)
  keys = jax.random.split(jax.random.PRNGKey(2), len(leaves))
  return jax.tree.unflatten(tree, [p + 0.1 * jax.random.normal(k, p.shape)
                                   for p, k in zip(leaves, keys)])


@functools.partial(jax.jit, static_argnums=0)
def _apply(model, variables, x):
  return model.apply(variables, x)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _intermediate(model, variables, x, module):
  """The model's output and the output of its submodule `module`."""
  out, state = model.apply(variables, x, capture_intermediates=True,
                           mutable=['intermediates'])
  return out, state['intermediates'][module]['__call__'][0]


@pytest.mark.parametrize('name', slow_after(1, ['vit_ti16', 'siglip_b16',
                                                'dinov2_s14_reg4']))
def test_features_are_every_blocks_patch_tokens(name):
  model, x = _small(name, features=True)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)['params']
  # Neither the final norm nor pooling nor head is built.
  assert not {'final_norm', 'map_head', 'head'} & set(params)
  blocks, last = _intermediate(model, _init(model, x), x, 'block1')
  # 32x32 inputs, 8x8 patches: a 4x4 grid of width 32, stride 8.
  assert [b.shape for b in blocks] == [(2, 4, 4, 32)] * 2
  # The last block's output without the class and register tokens (first).
  prefix = last.shape[1] - 16
  assert prefix == {'vit_ti16': 1, 'siglip_b16': 0, 'dinov2_s14_reg4': 5}[name]
  np.testing.assert_array_equal(last[:, prefix:].reshape(2, 4, 4, 32),
                                blocks[1])


@pytest.mark.parametrize('name', slow_after(1, ['vit_ti16', 'siglip_b16']))
def test_no_classes_is_the_pooled_features(name):
  model, x = _small(name)
  variables = _init(model, x)
  pooled = model.clone(num_classes=0)
  assert 'head' not in jax.eval_shape(pooled.init, jax.random.PRNGKey(0),
                                      x)['params']
  features = _apply(pooled, {'params': {
      k: v for k, v in variables['params'].items() if k != 'head'}}, x)
  assert features.shape == (2, 32)
  head = variables['params']['head']
  np.testing.assert_allclose(_apply(model, variables, x),
                             features @ head['kernel'] + head['bias'],
                             rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match='num_classes must be 0'):
    model.clone(num_classes=-1)


@pytest.mark.slow
def test_map_head_is_a_probe_attending_to_the_normalized_tokens():
  model, x = _small('siglip_b16', num_layers=0)  # Embedding, norm, pool.
  variables = _init(model, x)
  p = variables['params']
  logits, patches = _intermediate(model, variables, x, 'embedding')
  tokens = patches.reshape(2, 16, 32) + p['pos_embedding']

  def norm(params, y):
    return nn.LayerNorm(1e-6).apply({'params': params}, y)

  def dense(params, y):
    return y @ params['kernel'] + params['bias']

  tokens = norm(p['final_norm'], tokens)
  head = p['map_head']
  attention = head['Attention_0']
  q = jnp.einsum('d,dhk->hk', head['probe'][0, 0],
                 attention['query']['kernel']) + attention['query']['bias']
  k, v = (jnp.einsum('ntd,dhk->nthk', tokens, attention[part]['kernel'])
          + attention[part]['bias'] for part in ('key', 'value'))
  weights = jax.nn.softmax(jnp.einsum('hk,nthk->nht', q, k) / 4.0, axis=-1)
  y = jnp.einsum('nht,nthk,hkd->nd', weights, v, attention['out']['kernel'])
  y = y + attention['out']['bias']
  hidden = nn.gelu(dense(head['Dense_0'], norm(head['LayerNorm_0'], y)))
  y = y + dense(head['Dense_1'], hidden)
  np.testing.assert_allclose(logits, dense(p['head'], y), rtol=1e-4,
                             atol=1e-5)


@pytest.mark.slow
def test_registers_layer_scale_and_the_embedding_without_a_class_entry():
  model, x = _small('dinov2_s14_reg4')
  params = nn.meta.unbox(jax.eval_shape(model.init, jax.random.PRNGKey(0),
                                        x)['params'])
  assert params['registers'].shape == (1, 4, 32)
  assert params['pos_embedding'].shape == (1, 16, 32)  # Patches only.
  assert params['block0']['LayerScale_1']['scale'].shape == (32,)
  assert model.clone(class_posemb=True).init(
      jax.random.PRNGKey(0), x)['params']['pos_embedding'].value.shape == (
          1, 17, 32)
  scale = nn.meta.unbox(model.init(jax.random.PRNGKey(0), x))['params'][
      'block1']['LayerScale_0']['scale']
  np.testing.assert_array_equal(scale, np.full(32, 1e-5, np.float32))
  with pytest.raises(ValueError, match='num_registers must be 0'):
    model.clone(num_registers=-1)


@pytest.mark.slow
def test_dynamic_size_resamples_the_embedding_for_other_inputs():
  model, x = _small('dinov2_s14')
  assert model.dynamic_size
  variables = _init(model, x)
  # At its own size nothing is resampled: the fixed-size model's output.
  np.testing.assert_array_equal(
      _apply(model, variables, x),
      _apply(model.clone(dynamic_size=False), variables, x))
  for shape in ((2, 48, 40, 3), (2, 16, 16, 3)):
    logits = _apply(model, variables, jnp.ones(shape))
    assert logits.shape == (2, 7) and np.isfinite(logits).all()
  with pytest.raises(ValueError, match='not whole patches'):
    _apply(model, variables, jnp.ones((2, 36, 32, 3)))
  with pytest.raises(ValueError, match='built for 32x32'):
    _apply(model.clone(dynamic_size=False), variables, jnp.ones((2, 48, 48,
                                                                 3)))


def test_resampled_embedding_is_the_bicubic_resize_of_the_grid():
  grid = np.random.default_rng(0).normal(size=(1, 4 * 4, 3))
  resized = np.asarray(vit.resample_posemb(jnp.asarray(grid), (4, 4), (6, 5)))
  rows, cols = vit.bicubic_matrix(4, 6), vit.bicubic_matrix(4, 5)
  expected = np.einsum('Hh,hwd,Ww->HWd', rows, grid.reshape(4, 4, 3), cols)
  np.testing.assert_allclose(resized, expected.reshape(1, 30, 3), rtol=1e-5,
                             atol=1e-6)
  # Each output is a weighted mean: weights sum to 1; the same size is the
  # identity.
  for old, new in ((4, 7), (7, 4), (16, 37)):
    np.testing.assert_allclose(vit.bicubic_matrix(old, new).sum(axis=1), 1)
  np.testing.assert_allclose(vit.bicubic_matrix(5, 5), np.eye(5), atol=1e-12)

"""Tests of the zoo's training-recipe options (ViT and ResNet module fields):
dropout, drop path, pooling, position embeddings, pre-logits, GELU, remat,
padding, kernel init and cross-device batch norm. Each option's default is
today's model, which tests/unit/zoo/test_zoo.py checks."""

import functools
import math
import re

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoo
from zoo import layers, vit

# Tiny models: compile time dominates (tests/conftest.py).
pytestmark = pytest.mark.usefixtures('fast_compiles')


def _small(name, **kwargs):
  """The test-size model `name` (7 classes) and a batch of 4 inputs."""
  spec = zoo.spec(name)
  model = zoo.create(name, **{**spec.test_kwargs, 'num_classes': 7, **kwargs})
  x = jax.random.normal(jax.random.PRNGKey(1), (4, *spec.test_input()))
  return model, x


@pytest.fixture(name='initialized', scope='module')
def _initialized():
  """`_small(name)` and its `_init` variables, once a module. The tests that
  take it run on one worker, where they also share the steps they compile
  for equal models (jax.jit keys on the model's fields)."""
  made = {}

  def initialized(name):
    if name not in made:
      plain, x = _small(name)
      made[name] = plain, x, _init(plain, x)
    return made[name]

  return initialized


@functools.partial(jax.jit, static_argnums=0)
def _init(model, x):
  """Variables with every parameter perturbed: the zero head of the ViT and
  the zero last batch-norm scales of a ResNet would hide any change."""
  variables = nn.meta.unbox(model.init(jax.random.PRNGKey(0), x))
  leaves, tree = jax.tree.flatten(variables['params'])
  keys = jax.random.split(jax.random.PRNGKey(2), len(leaves))
  params = [p + 0.1 * jax.random.normal(k, p.shape)
            for p, k in zip(leaves, keys)]
  return {**variables, 'params': jax.tree.unflatten(tree, params)}


@functools.partial(jax.jit, static_argnums=(0, 3))
def _apply(model, variables, x, train, seed=3):
  """Logits; in training with batch statistics and a dropout key."""
  if not train:
    return model.apply(variables, x, train=False)
  logits, _ = model.apply(variables, x, train=True, mutable=['batch_stats'],
                          rngs={'dropout': jax.random.PRNGKey(seed)})
  return logits


@functools.partial(jax.jit, static_argnums=0)
def _loss_and_grads(model, variables, x):
  def loss_fn(params):
    logits, _ = model.apply({**variables, 'params': params}, x, train=True,
                            mutable=['batch_stats'])
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, jnp.arange(x.shape[0]) % 7).mean()

  return jax.value_and_grad(loss_fn)(variables['params'])


# Dropout and drop path.

@pytest.mark.parametrize('name, option', [
    pytest.param('vit_ti16', dict(dropout_rate=0.3), marks=pytest.mark.slow),
    ('vit_ti16', dict(drop_path_rate=0.5)),
    pytest.param('resnet18', dict(drop_path_rate=0.5), marks=pytest.mark.slow),
])
def test_dropout_and_drop_path_change_training_not_evaluation(name, option,
                                                             initialized):
  plain, x, variables = initialized(name)
  model = plain.clone(**option)
  np.testing.assert_array_equal(_apply(model, variables, x, False),
                                _apply(plain, variables, x, False))
  trained = _apply(model, variables, x, True)
  assert not np.allclose(trained, _apply(plain, variables, x, True))
  # A new key, new masks.
  assert not np.allclose(
      trained, _apply(model, variables, x, True, 4))


class _DropPath(nn.Module):
  rate: float

  @nn.compact
  def __call__(self, x, train):
    return layers.drop_path(x, self.rate, not train)


def test_drop_path_drops_whole_examples_at_its_rate():
  rate, n = 0.3, 20_000
  x = jnp.ones((n, 3, 2, 4))
  module = _DropPath(rate)
  np.testing.assert_array_equal(module.apply({}, x, False), x)
  y = np.asarray(module.apply({}, x, True,
                              rngs={'dropout': jax.random.PRNGKey(0)}))
  per_example = y.reshape(n, -1)
  # Each example is dropped entirely or kept entirely, scaled by 1 / (1 - p).
  kept = per_example[:, 0] != 0
  np.testing.assert_allclose(
      per_example, np.broadcast_to(kept[:, None] / (1 - rate), (n, 24)),
      rtol=1e-6)
  # Binomial: the standard deviation of the fraction is 0.0032.
  assert abs((1 - kept.mean()) - rate) < 0.015
  assert y.mean() == pytest.approx(1, abs=0.025)


def test_drop_path_rates_rise_linearly_over_the_blocks(monkeypatch):
  assert layers.linear_rates(0.2, 5) == pytest.approx([0, .05, .1, .15, .2])
  assert layers.linear_rates(0.2, 1) == [0]
  rates = []

  def recording(x, rate, deterministic):
    rates.append(rate)
    return x

  monkeypatch.setattr(layers, 'drop_path', recording)

  def rates_of(name, **kwargs):
    model, x = _small(name, drop_path_rate=0.3, **kwargs)
    variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
    rates.clear()
    jax.eval_shape(functools.partial(
        model.apply, train=True, mutable=['batch_stats'],
        rngs={'dropout': jax.random.PRNGKey(0)}), variables, x)
    return rates

  # Two branches per ViT block, one per ResNet block (4 at test size).
  assert rates_of('vit_ti16', num_layers=3) == pytest.approx(
      [0, 0, .15, .15, .3, .3])
  assert rates_of('resnet50') == pytest.approx([0, .1, .2, .3])


# Remat.

# Compiles a full-width model or several: the slow tier.
@pytest.mark.slow
@pytest.mark.parametrize('name', ['vit_ti16', 'resnet18'])
def test_remat_gives_the_same_parameters_loss_and_gradients(name,
                                                           initialized):
  plain, x, variables = initialized(name)
  model = plain.clone(remat=True)
  remat_variables = _init(model, x)  # Same names, so interchangeable.
  jax.tree.map(np.testing.assert_array_equal, remat_variables, variables)
  loss, grads = _loss_and_grads(plain, variables, x)
  remat_loss, remat_grads = _loss_and_grads(model, variables, x)
  assert float(remat_loss) == pytest.approx(float(loss), rel=1e-6)
  jax.tree.map(functools.partial(np.testing.assert_allclose, rtol=1e-5,
                                 atol=1e-6), remat_grads, grads)
  # The recomputation is in the gradient's program (the primitive is
  # 'remat2' in jax 0.10, 'checkpoint' in later versions).
  def rematerializes(model):
    jaxpr = jax.make_jaxpr(functools.partial(_loss_and_grads, model))(
        variables, x)
    return bool(re.search(r'\b(remat\d*|checkpoint)\[', str(jaxpr)))

  assert rematerializes(model) and not rematerializes(plain)
  # One dropout key draws the same masks with or without remat.
  drop = dict(drop_path_rate=0.5, **({'dropout_rate': 0.2} if 'vit' in name
                                     else {}))
  np.testing.assert_allclose(
      _apply(model.clone(**drop), variables, x, True),
      _apply(plain.clone(**drop), variables, x, True), rtol=1e-5, atol=1e-6)


# GELU.

@pytest.mark.parametrize('approximate', [True, False])
def test_mlp_gelu_is_tanh_or_exact(approximate):
  block = vit.EncoderBlock(num_heads=2, mlp_dim=16, attention_impl='xla',
                           dtype=jnp.float32, param_dtype=jnp.float32,
                           approximate_gelu=approximate)
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 8))
  params = nn.meta.unbox(block.init(jax.random.PRNGKey(1), x))['params']
  # Attention adds nothing, so the block is x + mlp(layer_norm(x)).
  params['Attention_0']['out'] = jax.tree.map(jnp.zeros_like,
                                              params['Attention_0']['out'])
  h = ((x - x.mean(-1, keepdims=True)) /
       np.sqrt(x.var(-1, keepdims=True) + 1e-6))
  h = h @ params['Dense_0']['kernel'] + params['Dense_0']['bias']
  exact = 0.5 * h * (1 + jax.scipy.special.erf(h / math.sqrt(2)))
  tanh = 0.5 * h * (1 + jnp.tanh(math.sqrt(2 / math.pi) *
                                 (h + 0.044715 * h**3)))

  def block_with(gelu):
    return x + gelu @ params['Dense_1']['kernel'] + params['Dense_1']['bias']

  y = block.apply({'params': params}, x)
  np.testing.assert_allclose(y, block_with(tanh if approximate else exact),
                             atol=1e-5)
  assert not np.allclose(y, block_with(exact if approximate else tanh),
                         atol=1e-5)


@pytest.mark.slow
def test_vit_passes_exact_gelu_to_its_blocks(initialized):
  tanh, x, variables = initialized('vit_ti16')
  exact = tanh.clone(gelu='exact')
  assert not np.allclose(_apply(exact, variables, x, False),
                         _apply(tanh, variables, x, False), atol=1e-6)


# Pooling, position embeddings, pre-logits.

def test_sincos2d_is_big_visions_closed_form():
  # 2 x 3 patches, width 8: frequencies 10000**(-k / 1) for k = 0, 1; the
  # patch at row y, column x (token 3y + x) is
  # [sin x, sin x/1e4, cos x, cos x/1e4, sin y, sin y/1e4, cos y, cos y/1e4].
  pe = np.asarray(vit.posemb_sincos_2d(2, 3, 8))
  assert pe.shape == (1, 6, 8) and pe.dtype == np.float32
  np.testing.assert_allclose(pe[0, 0], [0, 0, 1, 1, 0, 0, 1, 1])
  np.testing.assert_allclose(
      pe[0, 5], [math.sin(2), math.sin(2e-4), math.cos(2), math.cos(2e-4),
                 math.sin(1), math.sin(1e-4), math.cos(1), math.cos(1e-4)],
      rtol=1e-6)
  np.testing.assert_allclose(pe[0, 1, [0, 4]], [math.sin(1), 0], atol=1e-7)


def test_sincos2d_and_gap_have_no_parameters_and_enter_as_big_vision():
  plain, x = _small('vit_ti16', num_layers=0)  # Embedding, norm, head.
  params = jax.eval_shape(plain.init, jax.random.PRNGKey(0), x)['params']
  assert {'cls', 'pos_embedding'} <= set(params)
  for pool, posemb in [('gap', 'sincos2d'), ('token', 'sincos2d'),
                       ('gap', 'learn')]:
    model = plain.clone(pool=pool, posemb=posemb)
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)['params']
    assert ('cls' in params) == (pool == 'token')
    assert ('pos_embedding' in params) == (posemb == 'learn')
    if posemb == 'learn':  # Patches only: 4 x 4 of 8 pixels in 32 x 32.
      assert params['pos_embedding'].value.shape == (1, 16, 32)

  # gap: the mean over the normalized patches + sin-cos embedding.
  model = plain.clone(pool='gap', posemb='sincos2d')
  variables = _init(model, x)
  logits, state = model.apply(variables, x, capture_intermediates=True,
                              mutable=['intermediates'])
  patches = state['intermediates']['embedding']['__call__'][0]
  tokens = patches.reshape(4, 16, 32) + vit.posemb_sincos_2d(4, 4, 32)
  pooled = nn.LayerNorm(1e-6).apply(
      {'params': variables['params']['final_norm']}, tokens).mean(axis=1)
  head = variables['params']['head']
  np.testing.assert_allclose(logits, pooled @ head['kernel'] + head['bias'],
                             rtol=1e-5, atol=1e-5)
  # token with sin-cos: the class token is prepended after the embedding is
  # added to the patches, so with no blocks the logits are of the token alone.
  model = plain.clone(posemb='sincos2d')
  variables = _init(model, x)
  cls = nn.LayerNorm(1e-6).apply(
      {'params': variables['params']['final_norm']},
      variables['params']['cls'][0, 0])
  head = variables['params']['head']
  np.testing.assert_allclose(
      model.apply(variables, x),
      np.broadcast_to(cls @ head['kernel'] + head['bias'], (4, 7)),
      rtol=1e-5, atol=1e-5)


# Compiles a full-width model or several: the slow tier.
@pytest.mark.slow
def test_pre_logits_is_a_dense_layer_and_tanh_before_the_head():
  plain, x = _small('vit_ti16')
  model = plain.clone(pre_logits=24)
  variables = _init(model, x)
  params = variables['params']
  assert params['pre_logits']['kernel'].shape == (32, 24)
  assert params['pre_logits']['bias'].shape == (24,)
  assert params['head']['kernel'].shape == (24, 7)
  assert 'pre_logits' not in jax.eval_shape(plain.init, jax.random.PRNGKey(0),
                                            x)['params']
  features = plain.clone(num_classes=32, pre_logits=0)  # Identity head.
  head = {'kernel': jnp.eye(32), 'bias': jnp.zeros(32)}
  pooled = features.apply(
      {'params': {**params, 'head': head}}, x)
  expected = (jnp.tanh(pooled @ params['pre_logits']['kernel'] +
                       params['pre_logits']['bias']) @ params['head']['kernel']
              + params['head']['bias'])
  np.testing.assert_allclose(model.apply(variables, x), expected, rtol=1e-5,
                             atol=1e-5)


def test_mlp_bias_init_std_starts_the_mlp_biases_only_from_a_normal():
  # pool='map': the blocks' MLPs and the MAP head's.
  plain, x = _small('vit_ti16', pool='map', num_layers=1)
  model = plain.clone(mlp_bias_init_std=1e-6)
  default, changed = (
      flax.traverse_util.flatten_dict(nn.meta.unbox(v)['params'], sep='/')
      for v in jax.jit(lambda key: [m.init(key, x[:1]) for m in (
          plain, model)])(jax.random.PRNGKey(0)))
  assert {k: v.shape for k, v in changed.items()} == {
      k: v.shape for k, v in default.items()}
  biases = [k for k in default if re.search(r'/Dense_[01]/bias$', k)]
  assert len(biases) == 2 + 2  # The block's and the head's.
  assert any(k.startswith('map_head/') for k in biases)
  for k in biases:
    assert not np.any(default[k])
  values = np.concatenate([changed[k] for k in biases])
  assert np.all(values != 0) and 0.8e-6 < values.std() < 1.2e-6
  for k in set(default) - set(biases):
    np.testing.assert_array_equal(changed[k], default[k], err_msg=k)
  with pytest.raises(ValueError, match='mlp_bias_init_std'):
    zoo.create('vit_s16', mlp_bias_init_std=-1e-6)


def test_big_vision_vit_s16_parameter_counts():
  # big_vision's ViT-S/16: pool 'gap', posemb 'sincos2d', 1000 classes.
  width, mlp_dim, depth = 384, 1536, 12
  embedding = 16 * 16 * 3 * width + width
  block = (2 * 2 * width  # Two layer norms.
           + 4 * (width * width + width)  # Query, key, value, output.
           + width * mlp_dim + mlp_dim + mlp_dim * width + width)
  count = embedding + depth * block + 2 * width + width * 1000 + 1000
  assert count == 21_974_632
  # timm's ViT-S/16 adds a class token and 197 learned position embeddings.
  assert count + width + 197 * width == zoo.spec('vit_s16').reference_params
  big_vision = dict(pool='gap', posemb='sincos2d')
  assert zoo.num_params('vit_s16', **big_vision) == count
  assert zoo.num_params('vit_s16', **big_vision,
                        pre_logits=width) == count + width * width + width


# ResNet padding and kernel init.

# Compiles a full-width model or several: the slow tier.
@pytest.mark.slow
@pytest.mark.parametrize('name', ['resnet18', 'resnet20'])
def test_same_padding_differs_from_torchvision_at_even_sizes_only(name):
  torchvision, _ = _small(name, zero_init_last_bn=False)
  same = torchvision.clone(padding='same')

  def logits_and_stems(size):
    x = jax.random.normal(jax.random.PRNGKey(1), (2, size, size, 3))
    variables = _init(torchvision, x)
    assert jax.tree.structure(jax.eval_shape(same.init, jax.random.PRNGKey(0),
                                             x)) == jax.tree.structure(
                                                 jax.eval_shape(
                                                     torchvision.init,
                                                     jax.random.PRNGKey(0), x))
    for model in (torchvision, same):
      logits, state = model.apply(variables, x, capture_intermediates=True,
                                  mutable=['intermediates'])
      yield logits, state['intermediates']['Conv_0']['__call__'][0]

  (even, stem), (same_even, same_stem) = logits_and_stems(32)
  assert even.shape == same_even.shape
  assert not np.allclose(even, same_even, atol=1e-4)
  # The stem conv pads alike (3 around the 7x7 as in Flax's example; the
  # CIFAR stem's 3x3 has stride 1); the max-pool and strided 3x3 convs differ.
  np.testing.assert_allclose(stem, same_stem, rtol=1e-6)
  # 33 x 33: every stride-2 window meets an odd size (ImageNet stem: 17,
  # 9, 5, 3; CIFAR: 33, 17), where 'SAME' pads one pixel on each side too.
  (odd, _), (same_odd, _) = logits_and_stems(33)
  np.testing.assert_allclose(odd, same_odd, rtol=1e-5, atol=1e-5)


def test_conv_kernel_inits():
  # A 1x1 conv from 64 to 256 channels: fan-in 64, fan-out 256 (the last
  # conv of a one-block ResNet-50).
  def kernel(kernel_init):
    model, x = _small('resnet50', kernel_init=kernel_init, num_filters=64,
                      stage_sizes=(1,))
    params = jax.jit(model.init)(jax.random.PRNGKey(0), x)['params']
    return np.asarray(nn.meta.unbox(params)['Bottleneck_0']['Conv_2']['kernel'])

  he, lecun = kernel('he_fan_out'), kernel('lecun_normal')
  assert he.shape == lecun.shape == (1, 1, 64, 256)
  assert he.std() == pytest.approx(math.sqrt(2 / 256), rel=0.03)
  # Truncated at two standard deviations of the underlying normal, whose
  # scale is corrected (/ 0.8796...) so the result has std sqrt(1 / fan_in).
  std = math.sqrt(1 / 64)
  assert lecun.std() == pytest.approx(std, rel=0.03)
  assert np.abs(lecun).max() <= 2 * std / .87962566103423978 * (1 + 1e-6)
  assert np.abs(he).max() > 2 * std / .87962566103423978  # Not truncated.


# Cross-device batch norm.

def test_batch_norm_axis_name_gives_global_batch_statistics():
  assert jax.device_count() == 8
  local, _ = _small('resnet20')
  model = local.clone(batch_norm_axis_name='batch')
  x = jax.random.normal(jax.random.PRNGKey(1), (8 * 2, 32, 32, 3))
  # Init is outside any mapped axis: the axis name is unused there.
  variables = jax.jit(functools.partial(model.init, train=False))(
      jax.random.PRNGKey(0), x[:2])
  variables = nn.meta.unbox(variables)

  def train(model):
    def forward(x):
      return model.apply(variables, x, train=True, mutable=['batch_stats'])
    return jax.pmap(forward, axis_name='batch')(x.reshape(8, 2, 32, 32, 3))

  logits, state = train(model)
  whole_logits, whole_state = jax.jit(
      functools.partial(local.apply, train=True, mutable=['batch_stats']))(
          variables, x)
  np.testing.assert_allclose(np.asarray(logits).reshape(16, 7), whole_logits,
                             rtol=1e-4, atol=1e-5)
  for device in range(8):
    jax.tree.map(
        functools.partial(np.testing.assert_allclose, rtol=1e-4, atol=1e-6),
        jax.tree.map(lambda s: np.asarray(s)[device], state), whole_state)
  # Without the axis name, each device has the statistics of its 2 images.
  _, per_device = train(local)
  first_mean = per_device['batch_stats']['BatchNorm_0']['mean']
  assert not np.allclose(np.asarray(first_mean)[0],
                         whole_state['batch_stats']['BatchNorm_0']['mean'],
                         atol=1e-4)


# Bad values.

@pytest.mark.parametrize('name, option, message', [
    ('vit_s16', dict(pool='cls'), 'pool'),
    ('vit_s16', dict(posemb='sincos'), 'posemb'),
    ('vit_s16', dict(gelu='erf'), 'gelu'),
    ('vit_s16', dict(dropout_rate=1.0), 'dropout_rate'),
    ('vit_s16', dict(drop_path_rate=-0.1), 'drop_path_rate'),
    ('vit_s16', dict(pre_logits=-1), 'pre_logits'),
    ('vit_s16', dict(posemb='sincos2d', hidden_size=30), 'hidden_size'),
    ('resnet50', dict(padding='valid'), 'padding'),
    ('resnet50', dict(kernel_init='he_normal'), 'kernel_init'),
    ('resnet50', dict(drop_path_rate=1.5), 'drop_path_rate'),
])
def test_bad_option_values_are_value_errors(name, option, message):
  with pytest.raises(ValueError, match=message):
    zoo.create(name, **option)

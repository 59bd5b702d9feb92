"""Tests of the model zoo, parametrized over every registered model.

Registering a model is enough to have it tested: its spec gives the tiny
kwargs of the forward and gradient tests (the same structure with fewer,
narrower layers) and the published counts that parameters and FLOPs are
checked against at full size, through shapes alone.
"""

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoo
from recipes.parallel import partition_rules
from zoo import __main__ as zoo_main
from zoo import vit

# jaxlib 0.12's XLA:CPU turns some bfloat16 conv + add + mean graphs (the last
# stage of resnet20/56, wrn28_10) into NaN when it fuses them for YNNPACK; the
# same graph is finite op by op, in float32, on jaxlib 0.10, and with this
# fusion off. A CPU-only compiler bug, so the bfloat16 test turns it off.
_XLA_CPU_OPTIONS = {'xla_cpu_experimental_ynn_fusion_type': ''}


# Tiny models: compile time dominates (tests/conftest.py).
pytestmark = pytest.mark.usefixtures('fast_compiles')


@functools.lru_cache(maxsize=None)
def _info(name):
  """Full-size info, traced once per model however many tests ask."""
  return zoo.model_info(name)


def _small_model(name, **kwargs):
  """The test-size model `name`: its spec's test kwargs, 7 classes (a
  language model 7 tokens)."""
  spec = zoo.spec(name)
  size = {'vocab_size' if spec.modality == 'text' else 'num_classes': 7}
  return zoo.create(name, **{**spec.test_kwargs, **size, **kwargs})


def _small(name, **kwargs):
  """`_small_model(name)` and a batch of 2 inputs for it (token ids for a
  text model)."""
  spec = zoo.spec(name)
  shape, rng = (2, *spec.test_input()), jax.random.PRNGKey(1)
  x = (jax.random.randint(rng, shape, 0, 7) if spec.modality == 'text'
       else jax.random.normal(rng, shape))
  return _small_model(name, **kwargs), x


def _logits_shape(name, x):
  """(batch, 7) for a classifier or a text embedding (SigLIP's text tower:
  `projection_size` 7 at test size); (batch, length, 7) for a language
  model, one prediction per token."""
  spec = zoo.spec(name)
  per_token = (spec.modality == 'text' and
               'projection_size' not in spec.test_kwargs)
  return (*x.shape[:2 if per_token else 1], 7)


def _is_box(x):
  return isinstance(x, nn.LogicallyPartitioned)


def _distinct_at_test_size() -> list:
  """One parameter per distinct test-size model, named by every variant it
  stands for: variants of a family differ in widths and depths that their
  test kwargs set alike (resnet50/101/152 are one model at test size), so
  compiling each of them again tests nothing new. Each variant's own
  structure is checked at full size, through shapes, by the parameter
  count and logical-name tests below."""
  groups = {}
  for name in zoo.list_models():  # (No batch: collecting compiles nothing.)
    spec = zoo.spec(name)
    key = (_small_model(name), spec.test_input(), spec.input_dtype)
    groups.setdefault(key, []).append(name)
  # The fast tier compiles one model of each kind; the whole suite all.
  return [pytest.param(names[0], id='='.join(names),
                       marks=[] if _FAST.intersection(names)
                       else [pytest.mark.slow])
          for names in groups.values()]


# A CNN, an MLP, a ResNet, a ViT and a decoder.
_FAST = {'cnn', 'mlp', 'resnet20', 'vit_ti16', 'gpt2'}


DISTINCT = _distinct_at_test_size()
# Each variant's DISTINCT representative: the same model at test size.
_SAME_AT_TEST_SIZE = {name: p.values[0] for p in DISTINCT
                      for name in p.id.split('=')}


@functools.lru_cache(maxsize=None)
def _test_size_info(name):
  return zoo.model_info(name, **zoo.spec(name).test_kwargs)


def _train_step(model, variables, x, labels):
  """One SGD step; returns the logits, gradients and updated variables."""

  def loss_fn(params):
    logits, new_state = model.apply({**variables, 'params': params}, x,
                                    train=True, mutable=['batch_stats'])
    loss = optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), labels).mean()
    return loss, (logits, new_state)

  grads, (logits, new_state) = jax.grad(loss_fn, has_aux=True)(
      variables['params'])
  params = jax.tree.map(lambda p, g: p - 0.1 * g, variables['params'], grads)
  return logits, grads, {**variables, **new_state, 'params': params}


# The models are static arguments: identical small variants (resnet50/101/152
# at test size) share one compilation.
@functools.partial(jax.jit, static_argnums=(0, 1),
                   compiler_options=_XLA_CPU_OPTIONS)
def _bfloat16_forward_and_train_step(bf16_model, model, rng, x, labels):
  """One program: the bfloat16 model's variables and logits, and the float32
  model's SGD step from those variables (the same parameters: the dtype is
  the computation's only)."""
  variables = nn.meta.unbox(bf16_model.init(rng, x, train=False))
  bf16_logits = bf16_model.apply(variables, x, train=False)
  return bf16_logits, (variables, *_train_step(model, variables, x, labels))


@pytest.mark.parametrize('name', DISTINCT)
def test_bfloat16_forward_and_gradient_step_changes_parameters(name):
  """The bfloat16 forward pass, then an SGD step of the float32 model, in
  one compiled program per distinct test-size model."""
  model, x = _small(name)
  bf16_model, _ = _small(name, dtype=jnp.bfloat16)
  shape = _logits_shape(name, x)
  labels = jnp.arange(np.prod(shape[:-1])).reshape(shape[:-1]) % 7
  bf16_logits, (variables, logits, grads, updated) = (
      _bfloat16_forward_and_train_step(bf16_model, model,
                                       jax.random.PRNGKey(0), x, labels))
  # Unboxing leaves plain arrays, ready for a train state.
  assert all(isinstance(v, jax.Array)
             for v in jax.tree.leaves(variables, is_leaf=_is_box))
  assert bf16_logits.shape == shape
  assert bf16_logits.dtype == jnp.bfloat16
  assert np.all(np.isfinite(np.asarray(bf16_logits, np.float32)))
  # Parameters and batch statistics stay float32 whatever the computation
  # dtype.
  assert {v.dtype for v in jax.tree.leaves(variables)} == {
      jnp.dtype(jnp.float32)}
  # float32: a gradient step changes the parameters.
  assert logits.shape == shape
  assert logits.dtype == jnp.float32
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
  changed = jax.tree.leaves(jax.tree.map(
      lambda a, b: bool(np.any(np.asarray(a) != np.asarray(b))),
      variables['params'], updated['params']))
  assert any(changed)
  # Batch-norm models update their running statistics in training.
  if 'batch_stats' in variables:
    assert not jax.tree.all(jax.tree.map(np.array_equal,
                                         variables['batch_stats'],
                                         updated['batch_stats']))


def _smallest_of_each_class_first(names, size) -> list:
  """`names` as parameters: the smallest of each model class by `size` in
  the fast tier, the others in the whole suite. Tracing a full-size model
  for its counts takes up to a second (Llama 3 8B)."""
  smallest = {}
  for name in sorted(names, key=size):
    smallest.setdefault(zoo.spec(name).cls, name)
  return [pytest.param(name, marks=[] if name in smallest.values()
                       else [pytest.mark.slow]) for name in names]


@pytest.mark.parametrize('name', zoo.list_models())
def test_spec_is_complete(name):
  spec = zoo.spec(name)
  assert spec.test_kwargs is not None, f'register {name} with test_kwargs'
  assert spec.family in partition_rules.FAMILY_RULES


@pytest.mark.parametrize('name', _smallest_of_each_class_first(
    [n for n in zoo.list_models() if zoo.spec(n).reference_params],
    lambda n: zoo.spec(n).reference_params))
def test_the_published_parameter_count(name):
  spec = zoo.spec(name)
  assert zoo.num_params(name) == pytest.approx(
      spec.reference_params, rel=spec.reference_params_rtol)


@pytest.mark.parametrize('name', _smallest_of_each_class_first(
    [n for n in zoo.list_models() if zoo.spec(n).reference_gflops],
    lambda n: zoo.spec(n).reference_gflops))
def test_flops_match_published(name):
  # Within 5%: the papers' conventions differ a little from our count.
  assert _info(name).gflops == pytest.approx(zoo.spec(name).reference_gflops,
                                             rel=0.05)


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
  assert cnn.input_shape == (28, 28, 1)


def test_model_info_follows_overrides():
  small = zoo.model_info('vit_s16', num_classes=10, patch_size=4,
                         image_size=32)
  assert small.input_shape == (32, 32, 3)
  # The position embeddings shrink to 8 x 8 patches + the class token.
  assert small.num_params == (zoo.spec('vit_s16').reference_params
                              - 384 * 990 - 990 - (197 - 65) * 384
                              - 3 * 384 * (256 - 16))
  assert small.gflops < _info('vit_s16').gflops


def test_table_lists_every_model():
  def test_size(name):  # Every model, cheaply: once per test-size model.
    return dataclasses.replace(_test_size_info(_SAME_AT_TEST_SIZE[name]),
                               name=name)

  rows = zoo_main.table(zoo.list_models(), test_size).splitlines()[1:]
  assert [row.split()[0] for row in rows] == zoo.list_models()
  params, gflops, shape, family, tags = zoo_main.table(
      ['resnet50'], _info).splitlines()[1].split(maxsplit=5)[1:]
  assert (params, shape, family) == ('25,557,032', '224x224x3', 'convnet')
  assert tags == 'tv_in1k, tv2_in1k'  # Its pretrained= tags.
  assert float(gflops) == pytest.approx(
      zoo.spec('resnet50').reference_gflops, rel=0.05)


@pytest.mark.parametrize('name', zoo.list_models())
def test_parameters_carry_logical_names_with_rules(name):
  model, x = _small(name)
  boxed = _boxed_params(model, x.shape, x.dtype)
  rules = dict(partition_rules.default_rules(name))
  assert rules['batch'] == ('data', 'fsdp')
  for path, leaf in jax.tree_util.tree_leaves_with_path(boxed, is_leaf=_is_box):
    assert _is_box(leaf), f'{jax.tree_util.keystr(path)} has no logical names'
    assert len(leaf.names) == leaf.value.ndim
    unruled = {n for n in leaf.names if n is not None} - set(rules)
    assert not unruled, f'{jax.tree_util.keystr(path)}: no rule for {unruled}'


@functools.lru_cache(maxsize=None)
def _boxed_params(model, shape, dtype):
  """The parameters' shapes with their logical names, traced once for the
  variants that are one model at test size."""
  return jax.eval_shape(functools.partial(model.init, train=False),
                        jax.random.PRNGKey(0),
                        jax.ShapeDtypeStruct(shape, dtype))['params']


def _constraints(model, x, variables):
  jaxpr = jax.make_jaxpr(functools.partial(model.apply, train=False))(
      variables, x)
  return [e for e in jaxpr.jaxpr.eqns if 'sharding_constraint' in str(e)]


def _mesh():
  return jax.make_mesh((2, 2, 2), ('data', 'fsdp', 'tensor'),
                       axis_types=(jax.sharding.AxisType.Auto,) * 3)


@pytest.mark.parametrize('name', ['resnet18', 'wrn28_10', 'vit_ti16'])
def test_activation_constraints_only_apply_under_mesh_and_rules(name):
  model, x = _small(name)
  variables = jax.eval_shape(functools.partial(model.init, train=False),
                             jax.random.PRNGKey(0), x)
  assert not _constraints(model, x, variables)
  with jax.set_mesh(_mesh()), nn.logical_axis_rules(
      partition_rules.default_rules(name)):
    assert _constraints(model, x, variables)


@pytest.mark.slow
@pytest.mark.parametrize('name', ['resnet50', 'vit_s16'])
def test_rules_alone_shard_init_and_forward(name):
  model, x = _small(name)
  x = jnp.tile(x, (4, 1, 1, 1))  # A batch of 8 splits over data x fsdp.
  init = jax.jit(functools.partial(model.init, train=False))
  apply = jax.jit(functools.partial(model.apply, train=False))
  rng = jax.random.PRNGKey(0)
  expected_variables = nn.meta.unbox(init(rng, x))
  expected = apply(expected_variables, x)
  rules, mesh = partition_rules.default_rules(name), _mesh()
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    specs = nn.get_partition_spec(jax.eval_shape(init, rng, x))
    shardings = nn.logical_to_mesh_sharding(specs, mesh, rules)
    variables = nn.meta.unbox(
        jax.jit(init, out_shardings=shardings)(rng, x))
    logits = apply(variables, x)
  jax.tree.map(np.testing.assert_array_equal, variables, expected_variables)
  np.testing.assert_allclose(logits, expected, atol=1e-5, rtol=1e-5)
  # Large dimensions are split: FSDP everywhere, tensor parallel in a ViT.
  if 'vit' in name:
    kernel = variables['params']['block0']['Dense_0']['kernel']
    assert kernel.sharding.spec == jax.sharding.PartitionSpec('fsdp', 'tensor')
  else:
    kernel = variables['params']['Conv_0']['kernel']
    assert kernel.sharding.spec == jax.sharding.PartitionSpec(
        None, None, None, 'fsdp')


def test_resnet_v15_strides_on_the_3x3_conv():
  model, x = _small('resnet50')

  def intermediates(rng):
    variables = model.init(rng, x, train=False)
    _, state = model.apply(variables, x, train=False,
                           capture_intermediates=True,
                           mutable=['intermediates'])
    return state['intermediates']

  shapes = jax.eval_shape(intermediates, jax.random.PRNGKey(0))
  block = shapes['Bottleneck_1']  # First block of stage 2, on 8x8 inputs.
  sizes = [block[f'Conv_{i}']['__call__'][0].shape[1] for i in range(3)]
  assert sizes == [8, 4, 4]


@pytest.mark.parametrize('zero_init', [True, False])
def test_resnet_zero_init_last_bn(zero_init):
  model, x = _small('resnet18', zero_init_last_bn=zero_init)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), x)['params']
  params = nn.meta.unbox(params)
  for block in ('BasicBlock_0', 'BasicBlock_3'):
    assert np.all(params[block]['BatchNorm_0']['scale'] == 1)
    last = params[block]['BatchNorm_1']['scale']
    assert np.all(last == (0 if zero_init else 1))


def test_vit_patch_and_image_size_overrides():
  model = zoo.create('vit_s16', num_classes=10, patch_size=4, image_size=32)
  x = jnp.zeros((1, 32, 32, 3))
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)['params']
  assert params['pos_embedding'].value.shape == (1, 8 * 8 + 1, 384)
  assert params['embedding']['kernel'].value.shape == (4, 4, 3, 384)
  with pytest.raises(ValueError, match='32x32'):
    jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.zeros((1, 64, 64, 3)))


def _attention_jaxpr(model, x, impl):
  variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
  return str(jax.make_jaxpr(model.clone(attention_impl=impl).apply)(
      variables, x))


def test_vit_attention_impl_is_passed_on():
  model, x = _small('vit_ti16')
  jaxpr = functools.partial(_attention_jaxpr, model, x)
  assert jaxpr('xla') == jaxpr(None)  # None picks XLA's implementation.
  assert jaxpr('auto') == jaxpr('xla')  # Not on a GPU.
  assert model.attention_impl == 'auto'
  with pytest.raises(RuntimeError, match='cuDNN'):  # Not on the CPU.
    jaxpr('cudnn')


def test_vit_auto_attention_falls_back_to_xla_where_cudnn_refuses(caplog):
  # As on a GPU in bfloat16; cuDNN then refuses (not found on this machine)
  # while tracing, and 'auto' must give XLA's attention with one warning.
  # A shape no other test uses: the warning is given once per shape.
  q = jnp.zeros((1, 5, 2, 16), jnp.bfloat16)

  def two_layers(impl, **backend):
    return str(jax.make_jaxpr(lambda q: [
        vit.dot_product_attention(q, q, q, impl, **backend)
        for _ in range(2)])(q))

  with caplog.at_level('WARNING'):
    auto = two_layers('auto', backend='gpu')
  assert auto == two_layers('xla')
  warnings = [r.getMessage() for r in caplog.records]
  assert len(warnings) == 1, warnings  # Once, not once per layer.
  assert 'using XLA attention' in warnings[0]


def test_cnn_layers_and_parameter_count():
  model = zoo.create('cnn', num_classes=10)
  params = nn.meta.unbox(jax.eval_shape(  # Shapes alone: nothing compiled.
      model.init, jax.random.PRNGKey(0), jnp.ones((1, 28, 28, 1))))['params']
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
  assert zoo.list_models('cn*') == ['cnn']
  assert zoo.list_models('resnet*') == [
      'resnet101', 'resnet152', 'resnet18', 'resnet20', 'resnet34',
      'resnet50', 'resnet56']
  assert zoo.list_models('vit_*16') == [
      'vit_b16', 'vit_l16', 'vit_s16', 'vit_ti16']
  assert zoo.list_models('nothing*') == []


def test_unknown_model_names_close_matches():
  with pytest.raises(ValueError, match=r"unknown model 'cnnn'.*'cnn'"):
    zoo.create('cnnn', num_classes=10)
  with pytest.raises(ValueError, match=r"unknown model 'resnet5'.*'resnet50'"):
    zoo.model_info('resnet5')
  with pytest.raises(ValueError, match='unknown model'):
    zoo.spec('vit')


def test_registering_a_name_twice_fails():
  with pytest.raises(ValueError, match='registered twice'):
    zoo.register('cnn', family='convnet', input_shape=(28, 28, 1))(nn.Dense)
  with pytest.raises(ValueError, match="family 'cnn' is not one of"):
    zoo.register('cnn2', family='cnn', input_shape=(28, 28, 1))


def test_input_shapes_follow_the_kwargs():
  assert zoo.input_shape('resnet50') == (224, 224, 3)
  assert zoo.input_shape('resnet20') == (32, 32, 3)
  assert zoo.input_shape('mlp', hidden_sizes=(8,)) == (28, 28, 1)
  assert zoo.input_shape('vit_b16') == (224, 224, 3)
  assert zoo.input_shape('vit_b16', image_size=384) == (384, 384, 3)
  assert zoo.model_info('resnet20').input_shape == (32, 32, 3)

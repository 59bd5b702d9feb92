"""timm and torchvision ConvNeXts converted to the zoo's, verified against
the originals.

Each original is built with random weights (randomize_torch draws every
layer norm's scale and bias and every layer scale too: timm's gamma (C,)
like a bias, torchvision's layer_scale (C, 1, 1) like a weight), saved,
converted and compared in float32: the largest logit difference relative to
the largest logit is at most 1e-5 (measured: about 1e-6). The fast tier
uses a ConvNeXt of the test size (four stages of 1, 2, 1, 1 blocks, 8 to 64
wide) built by each library's own class; the registered sizes are the slow
tier. Needs torch, torchvision and timm (the convert-test extra); skipped
without them.
"""

import re

import numpy as np
import pytest

from tests.convert_helpers import originals

torch, timm, torchvision, safetensors_torch, torchvision_models = originals(
    'torch', 'timm', 'torchvision', 'safetensors.torch',
    'torchvision.models.convnext')
# Compared with the originals: the whole suite's tier, not the fast one.
pytestmark = pytest.mark.slow

# pylint: disable=wrong-import-position
import jax
import jax.numpy as jnp

import zoo
from tests.convert_helpers import (RTOL, all_sizes_only, assert_exactly_once,
                                   images, randomize_torch,
                                   relative_difference, torch_logits,
                                   torchvision_resnet18_state_dict, zoo_logits)
from zoo import convert, layers
from zoo.convert import (export, timm_convnext, torchvision_convnext,
                         variants)

# The test size: stage 1 has two blocks, so block indices are checked too.
DEPTHS, DIMS, CLASSES = (1, 2, 1, 1), (8, 16, 32, 64), 5
SMALL = {'num_classes': CLASSES, 'depths': DEPTHS, 'dims': DIMS}
SIZE = 64  # Stages of 16, 8, 4 and 2 pixels.
CONVERTERS = {'timm': timm_convnext, 'torchvision': torchvision_convnext}


def _build(source: str, name: str | None = None, **kwargs):
  """timm's or torchvision's ConvNeXt `name` (None: of the test size),
  as the library initializes it; `kwargs` for its class."""
  if source == 'timm':
    if name:
      return timm.create_model(name, **kwargs)
    return timm.models.convnext.ConvNeXt(depths=DEPTHS, dims=DIMS,
                                         num_classes=CLASSES, **kwargs)
  if name:
    return getattr(torchvision.models, name)(**kwargs)
  return torchvision_models.ConvNeXt(
      [torchvision_models.CNBlockConfig(width, next_width, depth)
       for width, next_width, depth in zip(DIMS, (*DIMS[1:], None), DEPTHS)],
      num_classes=CLASSES, **kwargs)


def _original(source: str, name: str | None = None, seed: int = 0):
  """`_build(source, name)` with random weights."""
  return randomize_torch(_build(source, name), seed)


def _save(model, path):
  if path.suffix == '.safetensors':
    safetensors_torch.save_file(model.state_dict(), str(path))
  else:
    torch.save(model.state_dict(), path)
  return path


def _numpy(model) -> dict[str, np.ndarray]:
  return {k: v.numpy() for k, v in model.state_dict().items()}


def _layer_scales(model):
  return torch.cat([p.detach().flatten() for n, p in model.named_parameters()
                    if n.endswith(('gamma', 'layer_scale'))])


def _check_logits(source, name, zoo_name, kwargs, path, model):
  converted = convert.load(path, source, name)
  assert (converted.name, converted.kwargs) == (zoo_name, kwargs)
  assert_exactly_once(converted, model.state_dict(), zoo_name, kwargs)
  x = images(2, SIZE)
  difference = relative_difference(
      zoo_logits(zoo_name, kwargs, converted.variables, x),
      torch_logits(model, x))
  assert difference <= RTOL, difference


@pytest.mark.parametrize('source,name,fmt', [
    ('timm', 'convnext_tiny.fb_in22k_ft_in1k', 'safetensors'),
    ('torchvision', 'convnext_tiny', 'pth')])
def test_convnexts_of_the_test_size_give_the_originals_logits(
    source, name, fmt, tmp_path):
  model = _original(source)
  assert float(_layer_scales(model).abs().min()) > 1e-4  # Not 1e-6: drawn.
  path = _save(model, tmp_path / f'{source}.{fmt}')
  # Sizes no registered ConvNeXt has: the model is the one named, with the
  # file's depths and dims.
  _check_logits(source, name, 'convnext_tiny', SMALL, path, model)


# A full-width ConvNeXt takes 10-60 s to build, convert and compile; the
# larger ones are the same code at other widths and depths (each found from
# its sizes in test_template_is_the_originals_state_dict_in_its_order).
@pytest.mark.slow
@pytest.mark.parametrize('source', ['timm', 'torchvision'])
@pytest.mark.parametrize('name', [
    'convnext_tiny',
    *(pytest.param(name, marks=all_sizes_only)
      for name in ('convnext_small', 'convnext_base', 'convnext_large'))])
def test_registered_convnexts_give_the_originals_logits(source, name,
                                                        tmp_path):
  model = _original(source, name)
  path = _save(model, tmp_path / f'{name}.safetensors')
  _check_logits(source, None, name, {'num_classes': 1000}, path, model)


# Tracing a full-width model's shapes takes about a second.
@pytest.mark.parametrize('source', ['timm', 'torchvision'])
@pytest.mark.parametrize('name', [
    pytest.param(None, id='test_size'), 'convnext_tiny',
    *[pytest.param(name, marks=pytest.mark.slow)
      for name in ('convnext_small', 'convnext_base', 'convnext_large')]])
def test_template_is_the_originals_state_dict_in_its_order(source, name):
  kwargs = {**zoo.spec(name or 'convnext_tiny').defaults,
            **({} if name else SMALL)}
  with torch.device('meta'):  # Names and shapes, no memory.
    model = _build(source, name)
  assert list(CONVERTERS[source].template(
      name or 'convnext_tiny', kwargs).items()) == [
          (k, tuple(v.shape)) for k, v in model.state_dict().items()]
  if name:  # A registered size is found from the file's sizes alone.
    assert variants.convnext('f', None, *CONVERTERS[source].LAYOUT.sizes(
        model.state_dict())) == (name, {})


@pytest.mark.parametrize('source', ['timm', 'torchvision'])
def test_export_round_trip_into_timm_and_torchvision(source):
  """A file converted and exported gives back its own tensors, bit for bit,
  and the other library's model computes the same logits from them."""
  model = _original(source)
  state = _numpy(model)
  converted = convert.convert(state, source, name='convnext_tiny')
  x = images(2, SIZE)
  theirs = torch_logits(model, x)
  for target, converter in CONVERTERS.items():
    exported = export.state_dict(converter, 'convnext_tiny', converted.kwargs,
                                 converted.variables)
    original = _original(target, seed=1)
    original.load_state_dict({k: torch.as_tensor(v)
                              for k, v in exported.items()}, strict=True)
    if target == source:
      assert list(exported) == list(state)
      for k, v in state.items():
        np.testing.assert_array_equal(exported[k], v, err_msg=k)
    difference = relative_difference(torch_logits(original, x), theirs)
    assert difference <= RTOL, (target, difference)


def _zoo_features(converted, x):
  model = zoo.create(converted.name, **converted.kwargs, features=True)
  variables = {'params': {k: v for k, v in converted.variables['params'].items()
                          if k not in ('head_norm', 'head')}}
  features = jax.jit(model.apply)(variables,
                                  jnp.asarray(x.transpose(0, 2, 3, 1)))
  return [np.asarray(f) for f in features]


def _timm_features(model, x):
  """timm's features_only=True net of the test size with `model`'s
  weights (its modules flattened: 'stem_0', 'stages_0', no head)."""
  features = timm.create_model('convnext_tiny', features_only=True,
                               depths=DEPTHS, dims=DIMS)
  features.load_state_dict(
      {re.sub(r'^(stem|stages)\.', r'\1_', k): v
       for k, v in model.state_dict().items() if not k.startswith('head.')},
      strict=True)
  with torch.no_grad():
    return [f.numpy() for f in features.eval()(torch.as_tensor(x))]


def _torchvision_features(model, x):
  """The outputs of torchvision's stages, `features.1`, `.3`, `.5`, `.7`
  (the even ones are the stem and the downsampling)."""
  outputs, y = [], torch.as_tensor(x)
  with torch.no_grad():
    for k, layer in enumerate(model.features):
      y = layer(y)
      if k % 2:
        outputs.append(y.numpy())
  return outputs


@pytest.mark.parametrize('source', ['timm', 'torchvision'])
def test_features_are_the_originals_stage_outputs(source):
  model = _original(source)
  converted = convert.convert(_numpy(model), source, name='convnext_tiny')
  x = images(2, SIZE)
  theirs = (_timm_features if source == 'timm' else
            _torchvision_features)(model, x)
  ours = _zoo_features(converted, x)
  assert [f.shape for f in ours] == [
      (2, SIZE // stride, SIZE // stride, width)
      for stride, width in zip((4, 8, 16, 32), DIMS)]
  for stage, (a, b) in enumerate(zip(ours, theirs)):
    difference = relative_difference(a, b.transpose(0, 2, 3, 1))
    assert difference <= RTOL, (stage, difference)


def test_no_classes_gives_timms_pooled_features():
  """num_classes=0: the file's head is set aside, and the model returns
  what timm's does with num_classes=0, the pooled features after the head's
  layer norm."""
  model = _original('timm')
  converted = timm_convnext.convert(_numpy(model), 'a file', 'convnext_tiny',
                                    num_classes=0)
  assert converted.kwargs['num_classes'] == 0
  assert set(converted.ignored) == {'head.fc.weight', 'head.fc.bias'}
  x = images(2, SIZE)
  with torch.no_grad():
    theirs = model.forward_head(model.forward_features(torch.as_tensor(x)),
                                pre_logits=True).numpy()
  ours = zoo_logits('convnext_tiny', converted.kwargs, converted.variables, x)
  assert ours.shape == (2, DIMS[-1])
  assert relative_difference(ours, theirs) <= RTOL


def test_drop_path_rates_are_timms_and_torchvisions(monkeypatch):
  rates = []

  def recording(x, rate, deterministic):
    del deterministic
    rates.append(rate)
    return x

  monkeypatch.setattr(layers, 'drop_path', recording)
  model = zoo.create('convnext_tiny', **SMALL, drop_path_rate=0.3)
  x = jnp.zeros((1, 32, 32, 3))
  variables = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
  rates.clear()  # Those of the initialization's call.
  jax.eval_shape(lambda v: model.apply(v, x, train=True,
                                       rngs={'dropout': jax.random.PRNGKey(0)}),
                 variables)
  timm_model = _build('timm', drop_path_rate=0.3)
  assert rates == pytest.approx(
      [getattr(block.drop_path, 'drop_prob', 0)  # 0: an nn.Identity.
       for stage in timm_model.stages for block in stage.blocks])
  torchvision_model = _build('torchvision', stochastic_depth_prob=0.3)
  assert rates == pytest.approx(
      [block.stochastic_depth.p for stage in torchvision_model.features[1::2]
       for block in stage])


@pytest.mark.parametrize('source', ['timm', 'torchvision'])
def test_each_converter_alone_recognizes_its_files(source):
  state = _numpy(_original(source))
  assert [m for m in convert.CONVERTERS if m.matches(state)] == [
      CONVERTERS[source]]
  with torch.device('meta'):
    vit = timm.create_model('vit_tiny_patch16_224').state_dict()
  for other in (torchvision_resnet18_state_dict(), vit):
    assert not CONVERTERS[source].matches(other)


def _fails(match, *args, **kwargs):
  with pytest.raises(ValueError, match=match) as error:
    convert.convert(*args, **kwargs)
  assert '\n' not in str(error.value)


def _timm_convnext_tiny_file():
  """timm's convnext_tiny state dict, as zeros of its shapes."""
  return {k: np.zeros(shape, np.float32) for k, shape in
          timm_convnext.template(
              'convnext_tiny', zoo.spec('convnext_tiny').defaults).items()}


def test_a_registered_size_is_found_and_another_head_initialized():
  tiny = _timm_convnext_tiny_file()
  converted = convert.convert(tiny)
  assert (converted.name, converted.kwargs) == ('convnext_tiny',
                                                {'num_classes': 1000})
  converted = convert.convert(tiny, name='convnext_tiny', num_classes=10)
  assert converted.initialized == ['params/head/kernel', 'params/head/bias']
  assert converted.ignored == {
      'head.fc.weight': 'a head for 1000 classes, not 10',
      'head.fc.bias': 'a head for 1000 classes, not 10'}


def test_a_file_of_another_size_names_the_first_tensor_that_does_not_fit():
  tiny = _timm_convnext_tiny_file()
  _fails(r"tensor 'stem\.0\.weight' has shape \(96, 3, 4, 4\) where "
         r'convnext_base needs \(128, 3, 4, 4\)', tiny, name='convnext_base')
  _fails(r"no tensor 'stages\.2\.blocks\.9\.gamma' \(another model, or "
         'another depth', tiny, name='convnext_small')


@pytest.mark.parametrize('source', ['timm', 'torchvision'])
def test_a_bad_file_or_name_is_one_line_naming_it(source):
  state = _numpy(_original(source))
  name = 'convnext_tiny'
  missing = next(k for k in state if k.endswith('.bias') and '.3' in k)
  _fails(f"no tensor '{re.escape(missing)}'",
         {k: v for k, v in state.items() if k != missing}, name=name)
  extra = next(iter(state)).replace('weight', 'extra')
  _fails(f"'{re.escape(extra)}' has no place in convnext_tiny",
         {**state, extra: np.zeros(3, np.float32)}, name=name)
  _fails(r'depths \(1, 2, 1, 1\) and widths \(8, 16, 32, 64\): not one of the '
         "zoo's .*; give a name", state)
  _fails(r"is a ConvNeXt; it converts to one of convnext_base, .*, not "
         "'resnet50'", state, name='resnet50')
  other = 'timm' if source == 'torchvision' else 'torchvision'
  _fails(f'is a {source} checkpoint .* not a {other} one', state, other)


@pytest.mark.parametrize('option,message', [
    (dict(dims=(8, 16)), 'one depth and one width per stage'),
    (dict(drop_path_rate=1.0), 'drop_path_rate'),
    (dict(num_classes=-1), 'num_classes')])
def test_bad_options_are_value_errors(option, message):
  with pytest.raises(ValueError, match=message):
    zoo.create('convnext_tiny', **option)

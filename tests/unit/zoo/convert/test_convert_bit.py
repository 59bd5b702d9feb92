"""BiT converted to the zoo's, from timm's state dicts and from BiT's .npz
files, verified against timm.

timm's ResNetV2 built as its resnetv2_*_bit are (stem_type='fixed',
StdConv2d(eps=1e-8)) with random weights (group-norm scales too) is saved,
converted and compared in float32: the largest logit difference relative
to the largest logit is at most 1e-5 (measured: about 2e-6). The published
.npz layout is checked against timm's own reader of it (`_load_weights` in
timm/models/resnetv2.py) with BiT's epsilon 1e-10, an independent reading of
the same format; big_vision's layout against the same weights in timm's
ResNetV2 with stem_type='', whose max-pool pads as Flax's does. With 32
groups per norm (a file does not say how many), the tiny BiTs of the fast
tier are 32 wide, with (2, 1, 1, 1) blocks. BiT-R50x1, in the slow tier,
is compared at full size in float64 (see there why), the larger registered
sizes with TESTS_ALL_SIZES=1. The .npz layouts and the errors are checked
without torch too.
"""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from tests.convert_helpers import (RTOL, against, all_sizes_only,
                                   assert_exactly_once, images, optional,
                                   randomize_torch, relative_difference,
                                   torch_logits, zoo_logits)
from tests.helpers import slow_after
from zoo import convert
from zoo.convert import export, timm_bit, variants

# Optional: the .npz layouts and the errors need neither.
(timm, torch, safetensors_torch, timm_layers, timm_features,
 resnetv2) = optional('timm', 'torch', 'safetensors.torch', 'timm.layers',
                      'timm.models._features', 'timm.models.resnetv2')
needs_timm = against(timm, 'timm')

STAGES, WIDTH, CLASSES = (2, 1, 1, 1), 32, 11
TINY = {'stage_sizes': STAGES, 'width': WIDTH}
SIZE = 64  # A 2x2 grid after the last stage.


def _original(seed: int = 0, eps: float = 1e-8, stem_type: str = 'fixed',
              num_classes: int = CLASSES):
  """timm's tiny BiT with random weights: what resnetv2_*_bit builds, with
  (2, 1, 1, 1) blocks and width 32."""
  model = resnetv2.ResNetV2(
      layers=list(STAGES), stem_chs=WIDTH,
      channels=tuple(4 * WIDTH * 2**i for i in range(4)),
      num_classes=num_classes, stem_type=stem_type,
      conv_layer=functools.partial(timm_layers.StdConv2d, eps=eps))
  return _randomize(model, seed)


def _randomize(model, seed: int = 0):
  """randomize_torch, and group-norm scales U(0.5, 1.5), which it draws as
  biases."""
  randomize_torch(model, seed)
  generator = torch.Generator().manual_seed(seed + 1)
  with torch.no_grad():
    for module in model.modules():
      if isinstance(module, torch.nn.GroupNorm):
        module.weight.copy_(
            0.5 + torch.rand(module.weight.shape, generator=generator))
  return model


def _save(model, path):
  if path.suffix == '.safetensors':
    safetensors_torch.save_file(model.state_dict(), str(path))
  else:
    torch.save(model.state_dict(), path)
  return path


def _state(model) -> dict[str, np.ndarray]:
  return {k: v.numpy() for k, v in model.state_dict().items()}


def _zoo_features(name: str, kwargs: dict, variables, images_nchw):
  """The zoo model's features=True outputs for NCHW images, as NCHW."""
  model = zoo.create(name, **kwargs, features=True)
  features = jax.jit(lambda v, x: model.apply(v, x, train=False))(
      variables, jnp.asarray(images_nchw.transpose(0, 2, 3, 1)))
  return [np.asarray(f).transpose(0, 3, 1, 2) for f in features]


@needs_timm
@pytest.mark.parametrize('fmt', ['safetensors', 'pth'])
def test_a_tiny_bit_gives_timms_logits(fmt, tmp_path):
  model = _original()
  path = _save(model, tmp_path / f'bit.{fmt}')
  converted = convert.load(path, name='bit_r50x1')
  assert (converted.source, converted.name) == ('timm', 'bit_r50x1')
  assert converted.kwargs == {'num_classes': CLASSES, **TINY,
                              'std_conv_eps': 1e-8, 'pool_padding': 'zeros'}
  assert_exactly_once(converted, model.state_dict(), 'bit_r50x1',
                      converted.kwargs)
  x = images(2, SIZE)
  difference = relative_difference(
      zoo_logits('bit_r50x1', converted.kwargs, converted.variables, x),
      torch_logits(model, x))
  assert difference <= RTOL, difference


@needs_timm
def test_the_stem_pool_pads_with_zeros():
  """Why timm's BiT gets pool_padding='zeros': a max-pool whose padding is
  ignored misses its logits by far more than the tolerance (the stem's
  output is not activated, so it is negative on parts of the border)."""
  model = _original()
  converted = convert.convert(_state(model), name='bit_r50x1')
  x = images(2, SIZE)
  ignored = relative_difference(
      zoo_logits('bit_r50x1', {**converted.kwargs, 'pool_padding': 'ignored'},
                 converted.variables, x), torch_logits(model, x))
  assert ignored > 10 * RTOL, ignored


@needs_timm
def test_features_are_timms_features_only_and_pooled_features():
  model = _original()
  converted = convert.convert(_state(model), name='bit_r50x1')
  x = images(2, SIZE)
  # What timm.create_model(..., features_only=True) wraps the model in.
  theirs = timm_features.FeatureListNet(model, out_indices=(1, 2, 3, 4),
                                        flatten_sequential=True)
  assert theirs.feature_info.reduction() == [4, 8, 16, 32]
  with torch.no_grad():
    theirs = [f.numpy() for f in theirs(torch.as_tensor(x))]
  ours = _zoo_features('bit_r50x1', converted.kwargs, converted.variables, x)
  assert [o.shape for o in ours] == [
      (2, WIDTH * s, SIZE // s, SIZE // s) for s in (4, 8, 16, 32)]
  for stage, (a, b) in enumerate(zip(ours, theirs)):
    difference = relative_difference(a, b)
    assert difference <= RTOL, (stage, difference)
  # No head (timm's num_classes=0): the pooled features after the final
  # norm and ReLU, as timm's.
  headless = _original(num_classes=0)
  pooled = convert.convert(_state(headless), name='bit_r50x1')
  assert pooled.kwargs['num_classes'] == 0
  assert_exactly_once(pooled, headless.state_dict(), 'bit_r50x1',
                      pooled.kwargs)
  difference = relative_difference(
      zoo_logits('bit_r50x1', pooled.kwargs, pooled.variables, x),
      torch_logits(headless, x))
  assert difference <= RTOL, difference


@needs_timm
def test_export_gives_timm_the_same_state_dict():
  model = _original()
  state = _state(model)
  converted = convert.convert(state, name='bit_r50x1')
  assert timm_bit.template('bit_r50x1', converted.kwargs) == {
      k: tuple(v.shape) for k, v in state.items()}
  exported = export.state_dict(timm_bit, 'bit_r50x1', converted.kwargs,
                               converted.variables)
  assert list(exported) == list(state)
  fresh = _original(seed=5)
  fresh.load_state_dict({k: torch.as_tensor(v) for k, v in exported.items()},
                        strict=True)
  x = images(2, SIZE)
  difference = relative_difference(torch_logits(fresh, x),
                                   torch_logits(model, x))
  assert difference <= RTOL, difference
  for name, value in state.items():
    np.testing.assert_array_equal(exported[name], value, err_msg=name)


TIMM_NAMES = {
    'resnetv2_50x1_bit': 'bit_r50x1', 'resnetv2_50x3_bit': 'bit_r50x3',
    'resnetv2_101x1_bit': 'bit_r101x1', 'resnetv2_101x3_bit': 'bit_r101x3',
    'resnetv2_152x2_bit': 'bit_r152x2', 'resnetv2_152x4_bit': 'bit_r152x4'}


@needs_timm
def test_templates_are_timms_state_dicts():
  """And each registered BiT is found from its file's sizes alone (the
  larger ones are compared at full size with TESTS_ALL_SIZES=1 only)."""
  for timm_name, name in TIMM_NAMES.items():
    theirs = timm.create_model(timm_name, device='meta').state_dict()
    kwargs = zoo.spec(name).defaults
    assert timm_bit.template(name, kwargs) == {
        k: tuple(v.shape) for k, v in theirs.items()}, name
    assert variants.bit('f', None, *timm_bit.sizes(theirs, 'f')) == (
        name, {}), name
  headless = timm.create_model('resnetv2_50x1_bit', device='meta',
                               num_classes=0).state_dict()
  assert timm_bit.template('bit_r50x1', {
      **zoo.spec('bit_r50x1').defaults, 'num_classes': 0}) == {
          k: tuple(v.shape) for k, v in headless.items()}


@needs_timm
@pytest.mark.slow  # 25M parameters (the larger ones up to 388M: the same
# code at other widths and depths, minutes each in float64).
@pytest.mark.parametrize('timm_name', [
    'resnetv2_50x1_bit',
    *(pytest.param(n, marks=all_sizes_only) for n in TIMM_NAMES
      if n not in ('resnetv2_50x1_bit', 'resnetv2_152x4_bit'))])
def test_registered_bits_give_timms_logits_in_float64(timm_name, tmp_path):
  """Compared in float64, where the two agree to about 1e-13: at these
  depths float32 rounding alone takes either one's logits 1e-5 to 4e-5 from
  the float64 ones (measured, timm's own: 1.0e-5 for R50x1, 3.2e-5 for
  R152x2), so a float32 comparison would measure the rounding, not the
  conversion."""
  model = _randomize(timm.create_model(timm_name))
  path = _save(model, tmp_path / 'bit.safetensors')
  converted = convert.load(path)
  name = TIMM_NAMES[timm_name]
  assert (converted.name, converted.kwargs) == (name, {
      'num_classes': 1000, 'std_conv_eps': 1e-8, 'pool_padding': 'zeros'})
  assert_exactly_once(converted, model.state_dict(), name, converted.kwargs)
  model = model.double()  # In place: one copy of the weights.
  x = images(1, SIZE).astype(np.float64)
  with jax.enable_x64(True):
    kwargs = {**converted.kwargs, 'dtype': jnp.float64,
              'param_dtype': jnp.float64}
    variables = jax.tree.map(lambda v: np.asarray(v, np.float64),
                             converted.variables)
    del converted
    difference = relative_difference(
        zoo_logits(name, kwargs, variables, x), torch_logits(model, x))
    assert difference <= 1e-10, difference
    if timm_name == 'resnetv2_50x1_bit':  # Features at full size, once.
      features = timm.create_model(timm_name, features_only=True,
                                   out_indices=(1, 2, 3, 4)).double()
      features.load_state_dict(timm_features.FeatureListNet(
          model, out_indices=(1, 2, 3, 4),
          flatten_sequential=True).state_dict())
      with torch.no_grad():
        theirs = [f.numpy() for f in features.eval()(torch.as_tensor(x))]
      ours = _zoo_features(name, kwargs, variables, x)
      for stage, (a, b) in enumerate(zip(ours, theirs)):
        difference = relative_difference(a, b)
        assert difference <= 1e-10, (stage, difference)


# The published .npz files' names, as timm's `_load_weights` reads them
# (timm/models/resnetv2.py) and google-research/big_transfer wrote them
# (bit_tf2/models.py: root_block, block{i}/unit{jj:02d}/{a,b,c} each with
# group_norm and standardized_conv2d, a/proj, group_norm, head/conv2d).
def published_npz(seed: int = 0) -> dict[str, np.ndarray]:
  """Random arrays of a tiny BiT named and shaped as a published .npz."""
  rng = np.random.default_rng(seed)
  tensors = {}

  def conv(name, size, inp, out):
    tensors[f'{name}/kernel'] = (rng.normal(size=(size, size, inp, out)) /
                                 np.sqrt(size * size * inp)).astype(np.float32)

  def norm(name, channels):
    tensors[f'{name}/group_norm/gamma'] = (
        0.5 + rng.random(channels)).astype(np.float32)
    tensors[f'{name}/group_norm/beta'] = (
        0.2 * rng.normal(size=channels)).astype(np.float32)

  conv('resnet/root_block/standardized_conv2d', 7, 3, WIDTH)
  channels = WIDTH
  for i, num_units in enumerate(STAGES):
    mid = WIDTH * 2**i
    for j in range(num_units):
      unit = f'resnet/block{i + 1}/unit{j + 1:02d}'
      if j == 0:
        conv(f'{unit}/a/proj/standardized_conv2d', 1, channels, 4 * mid)
      for letter, (size, inp, out) in zip(
          'abc', ((1, channels, mid), (3, mid, mid), (1, mid, 4 * mid))):
        norm(f'{unit}/{letter}', inp)
        conv(f'{unit}/{letter}/standardized_conv2d', size, inp, out)
      channels = 4 * mid
  norm('resnet', channels)
  conv('resnet/head/conv2d', 1, channels, CLASSES)
  tensors['resnet/head/conv2d/bias'] = (
      0.2 * rng.normal(size=CLASSES)).astype(np.float32)
  return tensors


# big_vision's names for the same arrays, as its bit_paper.py
# `maybe_convert_big_transfer_format` makes them (norms as (1, 1, 1, C),
# the head's kernel [0, 0]).
_BIG_VISION_NAMES = (
    (r'^resnet/root_block/standardized_conv2d/', 'root_block/conv_root/'),
    (r'^resnet/group_norm/gamma$', 'norm-pre-head/scale'),
    (r'^resnet/group_norm/beta$', 'norm-pre-head/bias'),
    (r'^resnet/head/conv2d/', 'head/'),
    (r'/a/proj/standardized_conv2d/', '/conv_proj/'),
    (r'/([abc])/standardized_conv2d/',
     lambda m: f'/conv{"abc".index(m[1]) + 1}/'),
    (r'/([abc])/group_norm/gamma$',
     lambda m: f'/gn{"abc".index(m[1]) + 1}/scale'),
    (r'/([abc])/group_norm/beta$',
     lambda m: f'/gn{"abc".index(m[1]) + 1}/bias'),
    (r'^resnet/', ''),
)


def big_vision_npz(published: dict[str, np.ndarray],
                   prefix: str = 'params/') -> dict[str, np.ndarray]:
  out = {}
  for name, value in published.items():
    for pattern, replacement in _BIG_VISION_NAMES:
      name = re.sub(pattern, replacement, name)
    if 'gn' in name or 'norm-pre-head' in name:
      value = value[None, None, None]
    elif name == 'head/kernel':
      value = value[0, 0]
    out[f'{prefix}{name}'] = value
  return out


def _numbered(published):
  """Some published files number a conv: 'standardized_conv2d_1'."""
  return {k.replace('unit01/b/standardized_conv2d/',
                    'unit01/b/standardized_conv2d_1/'): v
          for k, v in published.items()}


# layout -> (file, what the converted model needs).
LAYOUTS = {
    'published': (published_npz, 'zeros'),
    'numbered': (lambda: _numbered(published_npz()), 'zeros'),
    'big_vision': (lambda: big_vision_npz(published_npz()), 'ignored'),
    'big_vision_top': (lambda: big_vision_npz(published_npz(), ''),
                       'ignored'),
    'big_vision_opt': (lambda: big_vision_npz(published_npz(),
                                              'opt/target/'), 'ignored'),
}


@pytest.mark.parametrize('layout', list(LAYOUTS))
def test_every_npz_layout_converts_each_array_once(layout, tmp_path):
  make, pool_padding = LAYOUTS[layout]
  tensors = make()
  np.savez(tmp_path / 'bit.npz', **tensors)
  converted = convert.load(tmp_path / 'bit.npz', name='bit_r50x1')
  assert (converted.source, converted.name) == ('big_vision', 'bit_r50x1')
  assert converted.kwargs == {'num_classes': CLASSES, **TINY,
                              'std_conv_eps': 1e-10,
                              'pool_padding': pool_padding}
  assert_exactly_once(converted, tensors, 'bit_r50x1', converted.kwargs)
  published = published_npz()
  params = converted.variables['params']
  np.testing.assert_array_equal(
      params['PreActBottleneck_1']['GroupNorm_2']['scale'],
      published['resnet/block1/unit02/c/group_norm/gamma'])
  np.testing.assert_array_equal(
      params['PreActBottleneck_0']['StdConv_1']['kernel'],
      published['resnet/block1/unit01/b/standardized_conv2d/kernel'])
  np.testing.assert_array_equal(params['head']['kernel'],
                                published['resnet/head/conv2d/kernel'][0, 0])


@needs_timm
@pytest.mark.parametrize('layout,stem_type', slow_after(1, [
    pytest.param('published', 'fixed', id='published-fixed'),
    pytest.param('big_vision', '', id='big_vision-')]))
def test_npz_logits_match_timms_reading_of_the_published_file(
    layout, stem_type, tmp_path):
  published = tmp_path / 'published.npz'
  np.savez(published, **published_npz())
  reference = _original(eps=1e-10, stem_type=stem_type)
  reference.load_pretrained(str(published))
  path = tmp_path / f'{layout}.npz'
  np.savez(path, **LAYOUTS[layout][0]())
  converted = convert.load(path, name='bit_r50x1')
  x = images(2, SIZE)
  difference = relative_difference(
      zoo_logits('bit_r50x1', converted.kwargs, converted.variables, x),
      torch_logits(reference.eval(), x))
  assert difference <= RTOL, difference


def _r50x1_state_dict():
  """Zeros named and shaped as timm's resnetv2_50x1_bit state dict, without
  the memory (broadcast views)."""
  shapes = timm_bit.template('bit_r50x1', zoo.spec('bit_r50x1').defaults)
  return {k: np.broadcast_to(np.float32(0), v) for k, v in shapes.items()}


def _error(tensors, **kwargs) -> str:
  with pytest.raises(ValueError) as error:
    convert.convert(tensors, file='bit.pth', **kwargs)
  message = str(error.value)
  assert '\n' not in message
  return message


def test_files_that_do_not_fit_name_the_tensor():
  r50x1 = _r50x1_state_dict()
  assert convert.detect(r50x1) == 'timm'
  for name in ('bit_r50x3', 'resnetv2_50x3_bit.goog_in21k'):
    assert re.search(r"bit\.pth does not fit bit_r50x3: its tensor "
                     r"'stem\.conv\.weight' has shape \(64, 3, 7, 7\) where "
                     r'bit_r50x3 needs \(192, 3, 7, 7\)',
                     _error(r50x1, name=name))
  assert 'converts to one of bit_r101x1' in _error(r50x1, name='resnet50')
  assert "unknown model 'resnetv2_18'" in _error(r50x1, name='resnetv2_18')
  tiny = published_npz()
  assert re.search(r'is a BiT of stages \(2, 1, 1, 1\) and width 32: not '
                   r"one of the zoo's .*; give a name", _error(tiny))
  missing = {k: v for k, v in tiny.items()
             if k != 'resnet/block2/unit01/b/group_norm/beta'}
  assert "no tensor 'resnet/block2/unit01/b/group_norm/beta'" in _error(
      missing, name='bit_r50x1')
  extra = {**tiny, 'resnet/block2/unit01/d/x': np.ones(1, np.float32)}
  assert ("'resnet/block2/unit01/d/x' has no place in bit_r50x1" in
          _error(extra, name='bit_r50x1'))
  batch_norm = {**r50x1, 'stages.0.blocks.0.norm1.running_mean': np.zeros(
      64, np.float32)}
  assert 'timm ResNetV2 with batch norm' in _error(batch_norm)
  assert 'is a big_vision checkpoint' in _error(tiny, source='timm')


def test_registered_sizes_are_found_and_a_new_head_is_left_to_init():
  converted = convert.convert(_r50x1_state_dict(), num_classes=10)
  assert (converted.name, converted.kwargs) == ('bit_r50x1', {
      'num_classes': 10, 'std_conv_eps': 1e-8, 'pool_padding': 'zeros'})
  assert converted.initialized == ['params/head/kernel', 'params/head/bias']
  assert converted.ignored['head.fc.weight'] == (
      'a head for 1000 classes, not 10')

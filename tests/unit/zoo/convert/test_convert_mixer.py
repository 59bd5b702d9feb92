"""MLP-Mixers of timm and of Google's code converted to the zoo's, verified
against timm.

timm's model with random weights (layer-norm scales too) is saved
(.safetensors and .pth), converted and compared in float32: the largest
logit difference relative to the largest logit is at most 1e-5 with the
exact GELU the converter sets; so are every block's outputs (features=True
against timm's forward_intermediates), the pooled features (num_classes=0)
and timm's model loaded with the zoo's weights exported back.

Google's .npz files are a fixture named and shaped as the published ones
(google-research/vision_transformer vit_jax/models_mixer.py, whose Linen
module names big_vision/models/mlp_mixer.py repeats; big_vision's
utils.load_params takes them under 'params/' or 'opt/target/' too). The
reference for their logits is timm's model with the tanh GELU, loaded with
the same arrays mapped to timm's names by hand here: an independent reading
of the format. The tests that need torch and timm (the convert-test extra)
are skipped without them.
"""

import dataclasses
import functools

import jax
import numpy as np
import pytest

import zoo
from tests.convert_helpers import (RTOL, against, all_sizes_only,
                                   assert_exactly_once, google_vit_npz, images,
                                   optional, randomize_torch,
                                   relative_difference, torch_logits,
                                   torchvision_resnet18_state_dict,
                                   write_safetensors, zoo_logits,
                                   zoo_variable_names)
from zoo import convert
from zoo.convert import big_vision_mixer, export, timm_mixer, variants

# Optional: the .npz conversions run without them.
timm, torch, mlp_mixer = optional('timm', 'torch', 'timm.models.mlp_mixer')
needs_timm = against(timm, 'timm')

SIZE = 48  # A 3x3 grid of 16x16 patches.
TIMM_NAMES = {'mixer_s16': 'mixer_s16_224', 'mixer_b16': 'mixer_b16_224',
              'mixer_l16': 'mixer_l16_224'}


def _timm_mixer(name: str, tmp_path=None, fmt: str = 'safetensors'):
  """timm's Mixer `name` on SIZE images with random weights, and (given
  `tmp_path`) the file its state dict is saved to."""
  model = randomize_torch(timm.create_model(name, img_size=SIZE))
  if tmp_path is None:
    return model, None
  path = tmp_path / f'{name}.{fmt}'
  if fmt == 'safetensors':
    write_safetensors(path, _numpy(model.state_dict()))
  else:
    torch.save(model.state_dict(), path)
  return model, path


def _numpy(state_dict) -> dict[str, np.ndarray]:
  return {k: v.numpy() for k, v in state_dict.items()}


def _apply(name, kwargs, variables, images_nchw):
  """The zoo model's outputs (logits, features, ...) as numpy arrays."""
  model = zoo.create(name, **kwargs)
  outputs = jax.jit(functools.partial(model.apply, train=False))(
      variables, images_nchw.transpose(0, 2, 3, 1))
  return jax.tree.map(np.asarray, outputs)


def _timm_of_sizes(kwargs, **options):
  """timm's MlpMixer of the sizes of zoo Mixer `kwargs`, with more of its
  `options`."""
  width = kwargs['hidden_size']
  return mlp_mixer.MlpMixer(
      num_classes=kwargs['num_classes'], img_size=kwargs['image_size'],
      patch_size=kwargs['patch_size'], num_blocks=kwargs['num_layers'],
      embed_dim=width, mlp_ratio=(kwargs['tokens_mlp_dim'] / width,
                                  kwargs['channels_mlp_dim'] / width),
      **options)


def _one_line_error(match: str, function, *args, **kwargs):
  with pytest.raises(ValueError, match=match) as error:
    function(*args, **kwargs)
  assert '\n' not in str(error.value)


def _check_timm(zoo_name: str, tmp_path, fmt: str):
  model, path = _timm_mixer(TIMM_NAMES[zoo_name], tmp_path, fmt)
  converted = convert.load(path)  # The source is detected.
  assert (converted.source, converted.name, converted.kwargs) == (
      'timm', zoo_name, {'num_classes': 1000, 'patch_size': 16,
                         'image_size': SIZE, 'gelu': 'exact'})
  assert_exactly_once(converted, model.state_dict(), zoo_name,
                      converted.kwargs)
  x = images(2, SIZE)
  theirs = torch_logits(model, x)
  difference = relative_difference(
      zoo_logits(zoo_name, converted.kwargs, converted.variables, x), theirs)
  assert difference <= RTOL, difference
  return model, converted, x, theirs


# From a safetensors file: test_timms_mixer_needs_the_exact_gelu. The .pth
# reader is the fast tier's through test_convert_bit.py.
@needs_timm
@pytest.mark.slow
def test_mixer_s16_from_pth_gives_timms_logits(tmp_path):
  _check_timm('mixer_s16', tmp_path, 'pth')


# 60M and 208M parameters: the same code, larger (mixer_s16, compared at
# full width, is the one the suite runs; each size is found from its sizes in
# test_each_registered_mixer_is_found_by_its_sizes).
larger_mixers = pytest.mark.parametrize('zoo_name', [
    pytest.param(n, marks=all_sizes_only) for n in ('mixer_b16', 'mixer_l16')])


@needs_timm
@pytest.mark.slow
@larger_mixers
def test_larger_mixers_give_timms_logits(zoo_name, tmp_path):
  _check_timm(zoo_name, tmp_path, 'safetensors')


@needs_timm
def test_timms_mixer_needs_the_exact_gelu(tmp_path):
  """Why timm's Mixers get gelu='exact': the zoo's default tanh GELU misses
  timm's logits by far more than the tolerance."""
  _, converted, x, theirs = _check_timm('mixer_s16', tmp_path, 'safetensors')
  tanh = relative_difference(
      zoo_logits('mixer_s16', {**converted.kwargs, 'gelu': 'tanh'},
                 converted.variables, x), theirs)
  assert 10 * RTOL < tanh < 1e-2, tanh


@needs_timm
def test_every_blocks_output_and_the_pooled_features_are_timms():
  model, _ = _timm_mixer('mixer_s16_224')
  converted = convert.convert(_numpy(model.state_dict()))
  x = images(2, SIZE)
  features_only = {**converted.kwargs, 'features': True}
  ours = _apply('mixer_s16', features_only, converted.variables, x)
  with torch.no_grad():
    theirs = model.forward_intermediates(torch.as_tensor(x),
                                         intermediates_only=True)
  assert len(ours) == len(theirs) == 8
  for block, (a, b) in enumerate(zip(ours, theirs)):
    b = b.numpy().transpose(0, 2, 3, 1)  # NCHW -> NHWC.
    assert a.shape == b.shape == (2, 3, 3, 512)
    difference = relative_difference(a, b)
    assert difference <= RTOL, (block, difference)
  # Neither the final norm nor the head exists without their outputs.
  assert not {n for n in zoo_variable_names('mixer_s16', features_only)
              if n.startswith(('params/final_norm', 'params/head'))}
  params = {k: v for k, v in converted.variables['params'].items()
            if k != 'head'}
  pooled = _apply('mixer_s16', {**converted.kwargs, 'num_classes': 0},
                  {'params': params}, x)
  with torch.no_grad():
    theirs = model.forward_head(model.forward_features(torch.as_tensor(x)),
                                pre_logits=True).numpy()
  assert pooled.shape == (2, 512)
  assert relative_difference(pooled, theirs) <= RTOL


@needs_timm
def test_the_template_is_timms_state_dict():
  spec = zoo.spec('mixer_s16')
  for kwargs in ({**spec.defaults, 'image_size': SIZE},
                 {**spec.defaults, **spec.test_kwargs, 'num_classes': 7},
                 {**spec.defaults, **spec.test_kwargs, 'num_classes': 0}):
    template = timm_mixer.template('mixer_s16', kwargs)
    theirs = _timm_of_sizes(kwargs).state_dict()
    assert list(template.items()) == [(k, tuple(v.shape))
                                      for k, v in theirs.items()]


@needs_timm
def test_exported_weights_load_into_timm_and_give_the_zoos_logits():
  model, _ = _timm_mixer('mixer_s16_224')
  original = _numpy(model.state_dict())
  converted = convert.convert(original)
  tensors = export.state_dict(timm_mixer, 'mixer_s16', converted.kwargs,
                              converted.variables)
  assert list(tensors) == list(original)
  for name, value in tensors.items():
    np.testing.assert_array_equal(value, original[name])
  exported = timm.create_model('mixer_s16_224', img_size=SIZE)
  exported.load_state_dict({k: torch.as_tensor(v) for k, v in tensors.items()},
                           strict=True)
  x = images(2, SIZE)
  difference = relative_difference(
      torch_logits(exported.eval(), x),
      zoo_logits('mixer_s16', converted.kwargs, converted.variables, x))
  assert difference <= RTOL, difference
  # timm's Mixer has the exact GELU; a tanh one would compute otherwise.
  _one_line_error(r"gelu='exact', and this mixer_s16 has gelu='tanh'",
                  export.state_dict, timm_mixer, 'mixer_s16',
                  {**converted.kwargs, 'gelu': 'tanh'}, converted.variables)


@needs_timm
def test_timm_names_and_a_new_head(tmp_path):
  _, path = _timm_mixer('mixer_s16_224', tmp_path)
  converted = convert.load(path, name='mixer_s16_224.untrained',
                           num_classes=10)
  assert (converted.name, converted.kwargs['num_classes']) == ('mixer_s16',
                                                               10)
  assert converted.initialized == ['params/head/kernel', 'params/head/bias']
  assert converted.ignored == {
      'head.weight': 'a head for 1000 classes, not 10',
      'head.bias': 'a head for 1000 classes, not 10'}


@needs_timm
def test_timm_files_that_do_not_fit_name_the_tensor():
  model, _ = _timm_mixer('mixer_s16_224')
  tensors = _numpy(model.state_dict())
  _one_line_error(r"s16\.pth does not fit mixer_b16 with 16x16 patches: its "
                  r"tensor 'stem\.proj\.weight' has shape \(512, 3, 16, 16\) "
                  r'where mixer_b16 with 16x16 patches needs '
                  r'\(768, 3, 16, 16\)', convert.convert, tensors,
                  file='s16.pth', name='mixer_b16')
  _one_line_error(r"'stem\.proj\.weight' has shape \(512, 3, 16, 16\) where "
                  r'mixer_s16 with 32x32 patches needs \(512, 3, 32, 32\)',
                  convert.convert, tensors, name='mixer_s32_224')
  _one_line_error("converts to one of mixer_", convert.convert, tensors,
                  name='vit_s16')
  _one_line_error(r'mixes 3x3 patches of 16x16: its token-mixing weights take '
                  r'48x48 images only, not 64x64', convert.convert, tensors,
                  image_size=64)
  _one_line_error(r"no tensor 'blocks\.5\.norm2\.bias'", convert.convert,
                  {k: v for k, v in tensors.items()
                   if k != 'blocks.5.norm2.bias'})
  extra = {**tensors, 'blocks.8.norm1.weight': np.ones(512, np.float32)}
  _one_line_error(r"'blocks\.8\.norm1\.weight' has no place in mixer_s16",
                  convert.convert, extra, name='mixer_s16')
  _one_line_error('width 512, depth 9', convert.convert, extra)


# Google's .npz files.


@dataclasses.dataclass(frozen=True)
class GoogleMixer:
  """The sizes of a Google Mixer .npz fixture: Mixer-S/16's (big_vision's
  `Model` variant 'S'), on a 3x3 grid of patches."""

  width: int = 512
  depth: int = 8
  tokens_mlp_dim: int = 256
  channels_mlp_dim: int = 2048
  patch: int = 16
  grid: int = 3
  num_classes: int = 7


# The paper's B and L (vit_jax/configs/models.py get_mixer_b16_config, ...).
SIZES = {'mixer_s16': GoogleMixer(),
         'mixer_b16': GoogleMixer(768, 12, 384, 3072),
         'mixer_l16': GoogleMixer(1024, 24, 512, 4096)}


def google_mixer_npz(sizes: GoogleMixer = GoogleMixer(), prefix: str = '',
                     seed: int = 0) -> dict[str, np.ndarray]:
  """Random arrays named and shaped as Google's Mixer checkpoints.

  The names are the Linen paths of vit_jax/models_mixer.py's `MlpMixer`
  ('stem', 'MixerBlock_{i}' with LayerNorm_0, token_mixing, LayerNorm_1,
  channel_mixing, each MlpBlock with Dense_0 and Dense_1,
  'pre_head_layer_norm', 'head'), '/'-joined as vit_jax/checkpoint.py saves
  them; `prefix` '' as in the published files (gs://mixer_models/), or
  'params/' or 'opt/target/' as big_vision saves its own.
  """
  s = sizes
  rng = np.random.default_rng(seed)
  tokens = s.grid**2

  def normal(*shape):
    std = 1 / np.sqrt(np.prod(shape[:-1])) if len(shape) > 1 else 0.2
    return (std * rng.normal(size=shape)).astype(np.float32)

  def scale(n):
    return (0.5 + rng.random(n)).astype(np.float32)

  t = {'stem/kernel': normal(s.patch, s.patch, 3, s.width),
       'stem/bias': normal(s.width)}
  for i in range(s.depth):
    block = f'MixerBlock_{i}'
    for norm in ('LayerNorm_0', 'LayerNorm_1'):
      t[f'{block}/{norm}/scale'] = scale(s.width)
      t[f'{block}/{norm}/bias'] = normal(s.width)
    for mlp, features, hidden in (
        ('token_mixing', tokens, s.tokens_mlp_dim),
        ('channel_mixing', s.width, s.channels_mlp_dim)):
      t[f'{block}/{mlp}/Dense_0/kernel'] = normal(features, hidden)
      t[f'{block}/{mlp}/Dense_0/bias'] = normal(hidden)
      t[f'{block}/{mlp}/Dense_1/kernel'] = normal(hidden, features)
      t[f'{block}/{mlp}/Dense_1/bias'] = normal(features)
  t['pre_head_layer_norm/scale'] = scale(s.width)
  t['pre_head_layer_norm/bias'] = normal(s.width)
  t['head/kernel'] = normal(s.width, s.num_classes)
  t['head/bias'] = normal(s.num_classes)
  return {f'{prefix}{k}': v for k, v in t.items()}


@pytest.mark.parametrize('prefix', ['', 'params/', 'opt/target/'])
def test_every_layout_converts_each_array_once(prefix, tmp_path):
  tensors = google_mixer_npz(prefix=prefix)
  np.savez(tmp_path / 'mixer.npz', **tensors)
  converted = convert.load(tmp_path / 'mixer.npz')
  assert (converted.source, converted.name, converted.kwargs) == (
      'big_vision', 'mixer_s16', {'num_classes': 7, 'patch_size': 16,
                                  'image_size': SIZE, 'gelu': 'tanh'})
  assert_exactly_once(converted, tensors, 'mixer_s16', converted.kwargs)
  block = converted.variables['params']['block5']
  np.testing.assert_array_equal(
      block['token_mixing']['Dense_1']['kernel'],
      tensors[f'{prefix}MixerBlock_5/token_mixing/Dense_1/kernel'])
  np.testing.assert_array_equal(
      converted.variables['params']['final_norm']['scale'],
      tensors[f'{prefix}pre_head_layer_norm/scale'])


def _timm_state_dict(tensors: dict[str, np.ndarray], depth: int) -> dict:
  """A Google Mixer's arrays under timm's names, mapped by hand: kernels
  (in, out) are weights (out, in), the stem's (h, w, in, out) is
  (out, in, h, w); LayerNorm's scale is its weight."""
  sd = {'stem.proj.weight': tensors['stem/kernel'].transpose(3, 2, 0, 1),
        'stem.proj.bias': tensors['stem/bias']}
  for i in range(depth):
    google, ours = f'MixerBlock_{i}', f'blocks.{i}'
    for theirs, norm, mlp, mixing in (
        ('LayerNorm_0', 'norm1', 'mlp_tokens', 'token_mixing'),
        ('LayerNorm_1', 'norm2', 'mlp_channels', 'channel_mixing')):
      sd[f'{ours}.{norm}.weight'] = tensors[f'{google}/{theirs}/scale']
      sd[f'{ours}.{norm}.bias'] = tensors[f'{google}/{theirs}/bias']
      for k in range(2):
        dense = f'{google}/{mixing}/Dense_{k}'
        sd[f'{ours}.{mlp}.fc{k + 1}.weight'] = tensors[f'{dense}/kernel'].T
        sd[f'{ours}.{mlp}.fc{k + 1}.bias'] = tensors[f'{dense}/bias']
  sd['norm.weight'] = tensors['pre_head_layer_norm/scale']
  sd['norm.bias'] = tensors['pre_head_layer_norm/bias']
  sd['head.weight'] = tensors['head/kernel'].T
  sd['head.bias'] = tensors['head/bias']
  return {k: torch.as_tensor(np.ascontiguousarray(v)) for k, v in sd.items()}


def _check_google(zoo_name: str, tmp_path):
  sizes = SIZES[zoo_name]
  tensors = google_mixer_npz(sizes)
  np.savez(tmp_path / 'mixer.npz', **tensors)
  converted = convert.load(tmp_path / 'mixer.npz')
  assert converted.name == zoo_name
  # Flax's GELU, which Google's Mixers use, is the tanh approximation.
  reference = _timm_of_sizes(
      {'num_classes': sizes.num_classes, 'image_size': SIZE,
       'patch_size': sizes.patch, 'num_layers': sizes.depth,
       'hidden_size': sizes.width, 'tokens_mlp_dim': sizes.tokens_mlp_dim,
       'channels_mlp_dim': sizes.channels_mlp_dim},
      act_layer=functools.partial(torch.nn.GELU, approximate='tanh'))
  reference.load_state_dict(_timm_state_dict(tensors, sizes.depth),
                            strict=True)
  x = images(2, SIZE)
  difference = relative_difference(
      zoo_logits(zoo_name, converted.kwargs, converted.variables, x),
      torch_logits(reference.eval(), x))
  assert difference <= RTOL, difference


@needs_timm
def test_google_mixer_s16_gives_the_logits_of_timm_with_its_arrays(tmp_path):
  _check_google('mixer_s16', tmp_path)


@needs_timm
@pytest.mark.slow
@larger_mixers
def test_larger_google_mixers_give_the_logits_of_timm_with_their_arrays(
    zoo_name, tmp_path):
  _check_google(zoo_name, tmp_path)


def test_npz_files_that_do_not_fit_name_the_tensor():
  tensors = google_mixer_npz(prefix='params/')
  _one_line_error(r"s16\.npz does not fit mixer_b16 with 16x16 patches: its "
                  r"tensor 'params/stem/kernel' has shape \(16, 16, 3, 512\) "
                  r'where mixer_b16 with 16x16 patches needs '
                  r'\(16, 16, 3, 768\)', convert.convert, tensors,
                  file='s16.npz', name='mixer_b16')
  _one_line_error(r"no tensor 'params/MixerBlock_7/channel_mixing/Dense_1/"
                  r"bias'", convert.convert,
                  {k: v for k, v in tensors.items()
                   if k != 'params/MixerBlock_7/channel_mixing/Dense_1/bias'})
  _one_line_error(r"'params/MixerBlock_3/token_mixing/Dense_0/kernel' has "
                  r'shape \(16, 256\) where mixer_s16 with 16x16 patches '
                  r'needs \(9, 256\)', convert.convert,
                  {**tensors, 'params/MixerBlock_3/token_mixing/Dense_0/'
                   'kernel': np.ones((16, 256), np.float32)})
  _one_line_error('mixes 10 patches, not a square grid', convert.convert,
                  {**tensors, 'params/MixerBlock_0/token_mixing/Dense_0/'
                   'kernel': np.ones((10, 256), np.float32)})
  _one_line_error(r'token-mixing weights take 48x48 images only, not '
                  r'224x224', convert.convert, tensors, image_size=224)
  _one_line_error('converts to one of mixer_', convert.convert, tensors,
                  name='resnet50')
  _one_line_error('is a big_vision checkpoint', convert.convert, tensors,
                  source='timm')
  # A file without a head (num_classes=0 in big_vision) gives a Mixer
  # without one: the pooled features.
  headless = {k: v for k, v in tensors.items()
              if not k.startswith('params/head')}
  converted = convert.convert(headless)
  assert converted.kwargs['num_classes'] == 0
  assert_exactly_once(converted, headless, 'mixer_s16', converted.kwargs)


def test_each_registered_mixer_is_found_by_its_sizes():
  for name, s in SIZES.items():
    assert variants.mixer('f', s.width, s.depth, s.tokens_mlp_dim,
                          s.channels_mlp_dim) == name
  with pytest.raises(ValueError, match='width 1280, depth 32'):
    variants.mixer('f', 1280, 32, 640, 5120)  # Mixer-H/14.
  assert variants.resolve_mixer('f', 'mixer_l16_224.goog_in21k') == (
      'mixer_l16', {'patch_size': 16})
  assert variants.resolve_mixer('f', 'mixer_b32_224') == (
      'mixer_b16', {'patch_size': 32})
  assert variants.resolve_mixer('f', 'mixer_b16') == ('mixer_b16', {})


def test_only_the_mixer_converters_take_mixer_files():
  """Each file is taken by one converter (detection takes the first that
  matches, in module-name order)."""
  files = {
      big_vision_mixer: [google_mixer_npz(prefix=p)
                         for p in ('', 'params/', 'opt/target/')],
      timm_mixer: [_timm_mixer_names()],
  }
  for module, examples in files.items():
    for tensors in examples:
      assert [m for m in convert.CONVERTERS if m.matches(tensors)] == [
          module]
  others = [google_vit_npz(), google_vit_npz(layout='big_vision'),
            torchvision_resnet18_state_dict(),
            {'patch_embed.proj.weight': 0, 'pos_embed': 0, 'cls_token': 0}]
  for tensors in others:
    assert not big_vision_mixer.matches(tensors)
    assert not timm_mixer.matches(tensors)


def _timm_mixer_names() -> dict[str, np.ndarray]:
  """timm's Mixer-S/16 state dict (its template), with zeros."""
  kwargs = {**zoo.spec('mixer_s16').defaults, 'image_size': SIZE}
  return {k: np.zeros(shape, np.float32)
          for k, shape in timm_mixer.template('mixer_s16', kwargs).items()}

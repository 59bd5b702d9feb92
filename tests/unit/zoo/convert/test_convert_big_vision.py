"""Google's ViT .npz checkpoints converted to the zoo's ViT.

The fixture (tests/convert_helpers.py `google_vit_npz`) names and shapes its
arrays as the published checkpoints do, in the layouts of Google's original
ViT code (vit_jax) and of big_vision; the sources of the names are cited
there. Every layout converts with each array used once and each zoo
variable set once. Where timm is installed, its own reader of these files
(`VisionTransformer.load_pretrained`, timm/models/vision_transformer.py
`_load_weights`, with tanh GELU) is the reference for the logits: an
independent reading of the same format. Position-embedding resizing is
checked against scipy.ndimage.zoom(order=1), which Google's code uses.
"""

import numpy as np
import pytest

from tests.convert_helpers import (RTOL, GoogleViT, against,
                                   assert_exactly_once, google_vit_npz,
                                   images, optional, relative_difference,
                                   torch_logits, zoo_logits)
from tests.helpers import slow_after
from zoo import convert
from zoo.convert import posemb, variants

# Optional: only the comparisons with timm need it.
timm, = optional('timm')
needs_timms_reader = against(timm, "timm's reader")

SIZES = GoogleViT()  # ViT-Ti/16's widths on a 3x3 grid (48x48 images).
SIZE = SIZES.grid * SIZES.patch


def _name(case) -> str:
  return '-'.join(map(str, case))


# (layout, pool, posemb, pre_logits) -> what the converted model needs.
CASES = {
    ('vit_jax', 'token', 'learn', 0): {},
    ('vit_jax', 'token', 'learn', 96): {'pre_logits': 96},
    ('big_vision', 'gap', 'learn', 0): {'pool': 'gap'},
    ('big_vision', 'token', 'learn', 0): {},
    # Without a position embedding nothing tells the image size: the
    # registered default.
    ('big_vision', 'gap', 'sincos2d', 0): {'pool': 'gap', 'image_size': 224,
                                           'posemb': 'sincos2d'},
    ('big_vision_scan', 'token', 'learn', 0): {},
}


@pytest.mark.parametrize('case', list(CASES), ids=_name)
def test_every_layout_converts_each_array_once(case, tmp_path):
  layout, pool, pos, pre_logits = case
  tensors = google_vit_npz(SIZES, layout, pool, pos, pre_logits)
  np.savez(tmp_path / 'vit.npz', **tensors)
  converted = convert.load(tmp_path / 'vit.npz')
  assert converted.source == 'big_vision' and converted.name == 'vit_ti16'
  assert converted.kwargs == {'num_classes': SIZES.num_classes,
                              'patch_size': 16, 'gelu': 'tanh',
                              'image_size': SIZE, **CASES[case]}
  assert_exactly_once(converted, tensors, 'vit_ti16', converted.kwargs)
  p = '' if layout == 'vit_jax' else 'params/'
  np.testing.assert_array_equal(
      converted.variables['params']['final_norm']['scale'],
      tensors[f'{p}Transformer/encoder_norm/scale'])
  blocks = f'{p}Transformer/encoderblock'
  query = (tensors[f'{blocks}/MultiHeadDotProductAttention_0/query/kernel'][5]
           if layout == 'big_vision_scan' else tensors[
               f'{blocks}_5/MultiHeadDotProductAttention_'
               f'{1 if layout == "vit_jax" else 0}/query/kernel'])
  np.testing.assert_array_equal(
      converted.variables['params']['block5']['Attention_0']['query'][
          'kernel'], query)


def test_the_position_embedding_without_a_class_token_entry():
  """big_vision adds the embedding before prepending the class token; the
  zoo after: the same model with a zero class-token entry."""
  tensors = google_vit_npz(SIZES, 'big_vision', 'token')
  pos = convert.convert(tensors).variables['params']['pos_embedding']
  assert not pos[0, 0].any()
  np.testing.assert_array_equal(pos[:, 1:], tensors['params/pos_embedding'])


def test_resizing_matches_scipy_zoom_with_the_class_token_apart():
  scipy_ndimage = pytest.importorskip('scipy.ndimage')
  tensors = google_vit_npz(SIZES, 'vit_jax')
  converted = convert.convert(tensors, image_size=112)  # 3x3 -> 7x7.
  old = tensors['Transformer/posembed_input/pos_embedding']
  new = converted.variables['params']['pos_embedding']
  assert new.shape == (1, 50, SIZES.width)
  np.testing.assert_array_equal(new[:, 0], old[:, 0])
  # vit_jax/checkpoint.py load_pretrained and big_vision's resample_posemb:
  grid = scipy_ndimage.zoom(old[0, 1:].reshape(3, 3, -1), (7 / 3, 7 / 3, 1),
                            order=1)
  np.testing.assert_allclose(new[0, 1:], grid.reshape(49, -1), rtol=1e-5,
                             atol=1e-6)
  # Down as well as up; the same size changes nothing.
  grid = np.random.default_rng(1).normal(size=(5, 5, 4)).astype(np.float32)
  np.testing.assert_allclose(
      posemb.resize(grid, 2),
      scipy_ndimage.zoom(grid, (2 / 5, 2 / 5, 1), order=1), atol=1e-6)
  assert posemb.resize(grid, 5) is grid


def test_files_that_do_not_fit_name_the_tensor():
  tensors = google_vit_npz(SIZES, 'vit_jax')
  del tensors['Transformer/encoderblock_7/LayerNorm_2/bias']
  with pytest.raises(ValueError, match=r"no tensor 'Transformer/"
                     r"encoderblock_7/LayerNorm_2/bias'"):
    convert.convert(tensors, file='ti.npz')
  with pytest.raises(ValueError, match=r"ti\.npz does not fit vit_s16 with "
                     r"16x16 patches: its tensor 'embedding/kernel' has shape "
                     r'\(16, 16, 3, 192\) where vit_s16 with 16x16 patches '
                     r'needs \(16, 16, 3, 384\)'):
    convert.convert(google_vit_npz(SIZES), file='ti.npz', name='vit_s16')
  scan = google_vit_npz(SIZES, 'big_vision_scan')
  scan['params/Transformer/encoderblock/LayerNorm_0/scale'] = np.ones(
      (11, SIZES.width), np.float32)
  with pytest.raises(ValueError, match=r"'params/Transformer/encoderblock/"
                     r"LayerNorm_0/scale' has shape \(11, 192\) where "
                     r'vit_ti16 with 16x16 patches needs \(12, 192\)'):
    convert.convert(scan, name='vit_ti16')
  extra = {**google_vit_npz(SIZES), 'Transformer/encoderblock_12/x': np.ones(
      1, np.float32)}
  with pytest.raises(ValueError, match=r"'Transformer/encoderblock_12/x' has "
                     'no place in vit_ti16'):
    convert.convert(extra)
  with pytest.raises(ValueError, match='hybrid'):
    convert.convert({**google_vit_npz(SIZES, 'big_vision', 'gap'),
                     'params/conv_root/kernel': np.ones(1, np.float32)})
  # A MAP head is a SigLIP tower's (tests/unit/zoo/convert/
  # test_convert_siglip.py); none is of ViT-Ti's sizes.
  with pytest.raises(ValueError, match=r"width 192, depth 12, MLP 768, 3 "
                     r"heads: not one of the zoo's siglip ViTs"):
    convert.convert({**google_vit_npz(SIZES, 'big_vision', 'gap'),
                     'params/MAPHead_0/probe': np.ones(1, np.float32)})
  with pytest.raises(ValueError, match='not a multiple of the patch size'):
    convert.convert(google_vit_npz(SIZES), image_size=50)
  with pytest.raises(ValueError, match='is a big_vision checkpoint'):
    convert.convert(google_vit_npz(SIZES), source='timm')


def test_each_registered_vit_is_found_by_its_sizes():
  # The published B/16 and L/16 checkpoints (vit_jax/configs/models.py).
  assert variants.vit('f', 768, 12, 3072, 12) == 'vit_b16'
  assert variants.vit('f', 1024, 24, 4096, 16) == 'vit_l16'
  assert variants.vit('f', 384, 12, 1536, 6) == 'vit_s16'
  assert variants.vit('f', 192, 12, 768, 3) == 'vit_ti16'
  with pytest.raises(ValueError, match='width 1280, depth 32'):
    variants.vit('f', 1280, 32, 5120, 16)  # ViT-H/14.
  # A MAP head is SigLIP's; layer scale and registers DINOv2's.
  assert variants.vit('f', 1152, 27, 4304, 16, pool='map') == (
      'siglip_so400m14')
  assert variants.vit('f', 768, 12, 3072, layer_scale=True) == 'dinov2_b14'
  assert variants.vit('f', 1024, 24, 4096, layer_scale=True,
                      num_registers=4) == 'dinov2_l14_reg4'


def test_timm_names_are_the_zoo_variants_of_their_family():
  assert variants.resolve('vit_base_patch32_384.augreg_in21k') == (
      'vit_b16', {'patch_size': 32})
  assert variants.resolve('vit_so400m_patch14_siglip_224.v2_webli') == (
      'siglip_so400m14', {'patch_size': 14})
  # timm's SigLIP B/32 computes the tanh GELU, its B/16 the exact one.
  assert variants.resolve('vit_base_patch32_siglip_256') == (
      'siglip_b16', {'patch_size': 32, 'gelu': 'tanh'})
  assert variants.resolve('vit_small_patch14_reg4_dinov2.lvd142m') == (
      'dinov2_s14_reg4', {'patch_size': 14})
  assert variants.resolve('vit_large_patch14_dinov2') == (
      'dinov2_l14', {'patch_size': 14})
  with pytest.raises(ValueError, match='converts to one of vit_b16'):
    variants.check_vit('f', 'resnet50')


def test_bfloat16_checkpoints_load_as_float32(tmp_path):
  tensors = google_vit_npz(SIZES, 'big_vision', 'gap')
  import ml_dtypes  # pylint: disable=import-outside-toplevel
  np.savez(tmp_path / 'bf16.npz', **{
      k: v.astype(ml_dtypes.bfloat16).view('V2') for k, v in tensors.items()})
  converted = convert.load(tmp_path / 'bf16.npz')
  kernel = converted.variables['params']['head']['kernel']
  assert kernel.dtype == np.float32
  np.testing.assert_array_equal(
      kernel, tensors['params/head/kernel'].astype(ml_dtypes.bfloat16)
      .astype(np.float32))


# timm reads the same files: (layout, pool) -> its model's options.
TIMM_CASES = {
    ('vit_jax', 'token'): {},
    ('big_vision', 'gap'): dict(class_token=False, global_pool='avg',
                                fc_norm=False),
    ('big_vision_scan', 'token'): dict(no_embed_class=True),
}


@needs_timms_reader
# Every layout's arrays: test_every_layout_converts_each_array_once; timm
# reads one in the fast tier, all in the whole suite.
@pytest.mark.parametrize('case', slow_after(
    1, [pytest.param(c, id=_name(c)) for c in TIMM_CASES]))
def test_logits_match_timms_reading_of_the_same_file(case, tmp_path):
  layout, pool = case
  tensors = google_vit_npz(SIZES, layout, pool)
  path = tmp_path / 'vit.npz'
  np.savez(path, **tensors)
  reference = timm.create_model(
      'vit_tiny_patch16_224', img_size=SIZE, num_classes=SIZES.num_classes,
      act_layer='gelu_tanh', **TIMM_CASES[case])
  reference.load_pretrained(str(path))
  reference.eval()
  converted = convert.load(path)
  x = images(2, SIZE)
  difference = relative_difference(
      zoo_logits('vit_ti16', converted.kwargs, converted.variables, x),
      torch_logits(reference, x))
  assert difference <= RTOL, difference


@needs_timms_reader
def test_pre_logits_are_a_tanh_layer_before_the_head(tmp_path):
  """timm no longer reads 'pre_logits': its features (the normalized class
  token) with the layer applied in numpy are the reference."""
  tensors = google_vit_npz(SIZES, 'vit_jax', pre_logits=96)
  path = tmp_path / 'vit.npz'
  np.savez(path, **{k: v for k, v in tensors.items()
                    if not k.startswith(('pre_logits', 'head'))})
  reference = timm.create_model('vit_tiny_patch16_224', img_size=SIZE,
                                num_classes=0, act_layer='gelu_tanh')
  reference.load_pretrained(str(path))
  x = images(2, SIZE)
  features = torch_logits(reference.eval(), x).astype(np.float64)
  hidden = np.tanh(features @ tensors['pre_logits/kernel'] +
                   tensors['pre_logits/bias'])
  theirs = hidden @ tensors['head/kernel'] + tensors['head/bias']
  converted = convert.convert(tensors)
  difference = relative_difference(
      zoo_logits('vit_ti16', converted.kwargs, converted.variables, x), theirs)
  assert difference <= RTOL, difference

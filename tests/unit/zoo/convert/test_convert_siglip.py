"""SigLIP image towers converted to the zoo's siglip_*, verified against timm.

Two sources: timm's state dicts (vit_*_siglip_*, the attention-pooling head
`attn_pool.*`) and big_vision's SigLIP .npz files, which hold both towers of
the two-towers model. The .npz fixture (`siglip_npz`) names its arrays as
big_vision's code does (cited there); timm's own reader of those files
(`_load_weights` in timm/models/vision_transformer.py, which reads the
'params/img/' tower and its MAPHead) is the reference for their logits: an
independent reading of the same format. The fast tier converts a tiny
SigLIP (siglip_b16's structure at its test size, registered for the test:
a file's model is found by its sizes among the registered ones); siglip_b16
itself is in the slow tier. Needs torch and timm (the convert-test extra).
"""

import dataclasses

import numpy as np
import pytest

from tests.convert_helpers import originals

torch, timm, safetensors_torch = originals(
    'torch', 'timm', 'safetensors.torch')
# Compared with the originals: the whole suite's tier, not the fast one.
pytestmark = pytest.mark.slow

# pylint: disable=wrong-import-position
import zoo
from tests.convert_helpers import (RTOL, GoogleViT, all_sizes_only,
                                   assert_exactly_once, google_vit_npz, images,
                                   randomize_torch, relative_difference,
                                   torch_logits, zoo_logits)
from zoo import convert, registry
from zoo.convert import export, timm_vit

TINY = 'siglip_tiny'
SIZES = GoogleViT(width=32, depth=2, num_heads=2, mlp_dim=64, patch=8, grid=4)
SIZE = SIZES.patch * SIZES.grid
# timm's SigLIP B/16 at the tiny sizes.
TIMM_TINY = dict(embed_dim=32, depth=2, num_heads=2, mlp_ratio=2,
                 patch_size=8, img_size=SIZE)


@pytest.fixture
def tiny(monkeypatch):
  """siglip_tiny: siglip_b16 at its test kwargs, registered for one test."""
  spec = zoo.spec('siglip_b16')
  # pylint: disable-next=protected-access
  monkeypatch.setitem(registry._MODELS, TINY, dataclasses.replace(
      spec, name=TINY, defaults={**spec.defaults, **spec.test_kwargs}))


def _timm_tiny(**kwargs):
  return randomize_torch(timm.create_model('vit_base_patch16_siglip_224',
                                           **TIMM_TINY, **kwargs))


def _compare(name, converted, model, x):
  difference = relative_difference(
      zoo_logits(name, converted.kwargs, converted.variables, x),
      torch_logits(model, x))
  assert difference <= RTOL, difference
  return difference


@pytest.mark.parametrize('num_classes', [0, 5])
def test_timm_state_dicts_give_timms_outputs(tiny, tmp_path, num_classes):
  del tiny
  model = _timm_tiny(num_classes=num_classes)
  path = tmp_path / 'siglip.safetensors'
  safetensors_torch.save_file(model.state_dict(), str(path))
  converted = convert.load(path)
  assert (converted.name, converted.kwargs) == (TINY, {
      'num_classes': num_classes, 'patch_size': 8, 'image_size': SIZE,
      'gelu': 'exact'})
  assert_exactly_once(converted, model.state_dict(), TINY, converted.kwargs)
  # Without a head: the pooled embedding, as timm's num_classes=0.
  _compare(TINY, converted, model, images(2, SIZE))


def test_features_are_timms_intermediates(tiny):
  del tiny
  model = _timm_tiny()
  tensors = {k: v.numpy() for k, v in model.state_dict().items()}
  converted = convert.convert(tensors, 'timm')
  x = images(2, SIZE)
  ours = zoo_logits(TINY, {**converted.kwargs, 'features': True},
                    converted.variables, x)
  with torch.no_grad():
    theirs = model.forward_intermediates(torch.as_tensor(x),
                                         intermediates_only=True)
  assert len(ours) == len(theirs) == SIZES.depth
  for block, (a, b) in enumerate(zip(ours, theirs)):
    b = b.numpy().transpose(0, 2, 3, 1)  # NCHW -> NHWC
    assert a.shape == b.shape == (2, 4, 4, 32)
    difference = relative_difference(a, b)
    assert difference <= RTOL, (block, difference)


def test_template_is_timms_state_dict(tiny):
  del tiny
  kwargs = {**zoo.spec(TINY).defaults, 'num_classes': 5, 'gelu': 'exact'}
  theirs = timm.create_model('vit_base_patch16_siglip_224', **TIMM_TINY,
                             num_classes=5)
  assert list(timm_vit.template(TINY, kwargs).items()) == [
      (k, tuple(v.shape)) for k, v in theirs.state_dict().items()]


def test_export_gives_timm_the_same_model(tiny):
  del tiny
  model = _timm_tiny()
  converted = convert.convert(
      {k: v.numpy() for k, v in model.state_dict().items()}, 'timm')
  tensors = export.state_dict(timm_vit, TINY, converted.kwargs,
                              converted.variables)
  fresh = timm.create_model('vit_base_patch16_siglip_224', **TIMM_TINY)
  fresh.load_state_dict({k: torch.as_tensor(v) for k, v in tensors.items()},
                        strict=True)
  x = images(2, SIZE)
  difference = relative_difference(torch_logits(fresh.eval(), x),
                                   torch_logits(model, x))
  assert difference <= RTOL, difference


def siglip_npz(sizes: GoogleViT = SIZES, layout: str = 'big_vision',
               seed: int = 0) -> dict[str, np.ndarray]:
  """Random arrays named and shaped as big_vision's SigLIP checkpoints
  (google-research/big_vision at 0127fb6b).

  big_vision/models/proj/image_text/two_towers.py `Model` names its towers
  'img' (big_vision/models/vit.py with pool_type='map' and no head:
  out_dim (None, ...)) and 'txt' (text_transformer.py: `Embed_0`,
  `pos_embedding`, vit.Encoder auto-named `Encoder_0`, `head`), and its
  parameters 't' (the temperature) and 'b' (the bias); saved under
  'params/'. The image tower is `google_vit_npz`'s big_vision layout
  without class token and head, plus vit.py's `MAPHead` (auto-named
  MAPHead_0: `probe`, and MultiHeadDotProductAttention_0, LayerNorm_0 and
  MlpBlock_0 named and shaped as an encoder block's).
  """
  image = google_vit_npz(sizes, layout, 'gap', seed=seed)
  t = {k.replace('params/', 'params/img/', 1): v for k, v in image.items()
       if not k.startswith('params/head/')}
  rng = np.random.default_rng(seed + 1)
  block = google_vit_npz(sizes, 'big_vision', seed=seed + 2)
  first = 'params/Transformer/encoderblock_0/'
  for key, value in block.items():
    if key.startswith(first) and 'LayerNorm_1' not in key:
      t[f'params/img/MAPHead_0/{key[len(first):]}'] = value
  t['params/img/MAPHead_0/probe'] = (
      0.5 * rng.normal(size=(1, 1, sizes.width))).astype(np.float32)
  text = google_vit_npz(sizes, 'big_vision', 'gap', seed=seed + 3)
  for key, value in text.items():
    key = key.removeprefix('params/')
    if not key.startswith('embedding/'):  # Text is embedded by Embed_0.
      t[f'params/txt/{key.replace("Transformer/", "Encoder_0/", 1)}'] = value
  t['params/txt/Embed_0/embedding'] = rng.normal(
      size=(100, sizes.width)).astype(np.float32)
  t['params/t'] = np.array([2.3], np.float32)
  t['params/b'] = np.array([-10.0], np.float32)
  return t


@pytest.mark.parametrize('layout', ['big_vision', 'big_vision_scan'])
def test_big_vision_npz_gives_timms_reading_of_it(tiny, tmp_path, layout):
  del tiny
  tensors = siglip_npz(layout=layout)
  path = tmp_path / 'siglip.npz'
  np.savez(path, **tensors)
  converted = convert.load(path)
  assert converted.source == 'big_vision'
  assert (converted.name, converted.kwargs) == (TINY, {
      'num_classes': 0, 'patch_size': 8, 'gelu': 'tanh', 'image_size': SIZE})
  assert_exactly_once(converted, tensors, TINY, converted.kwargs)
  assert set(converted.ignored.values()) == {
      'the text tower', 'the loss temperature', 'the loss bias'}
  assert set(converted.ignored) == {k for k in tensors
                                    if not k.startswith('params/img/')}
  reference = timm.create_model('vit_base_patch16_siglip_224', **TIMM_TINY,
                                act_layer='gelu_tanh')
  reference.load_pretrained(str(path))
  _compare(TINY, converted, reference.eval(), images(2, SIZE))


def test_files_of_another_size_name_the_tensor(tiny):
  del tiny
  with pytest.raises(ValueError, match=r"does not fit siglip_b16 with 16x16 "
                     r"patches: its tensor 'params/img/embedding/kernel' has "
                     r'shape \(8, 8, 3, 32\)'):
    convert.convert(siglip_npz(), name='vit_base_patch16_siglip_224')
  tensors = siglip_npz()
  del tensors['params/img/MAPHead_0/MlpBlock_0/Dense_1/bias']
  with pytest.raises(ValueError, match=r"no tensor 'params/img/MAPHead_0/"
                     r"MlpBlock_0/Dense_1/bias'"):
    convert.convert(tensors)
  state = {k: v.numpy() for k, v in _timm_tiny().state_dict().items()}
  with pytest.raises(ValueError, match=r"'patch_embed\.proj\.weight' has "
                     r'shape \(32, 3, 8, 8\) where siglip_l16'):
    convert.convert(state, name='siglip_l16')
  without_the_head = {k: v for k, v in state.items()
                      if not k.startswith('attn_pool.')}
  with pytest.raises(ValueError, match='not one of the zoo\'s vit ViTs'):
    convert.convert(without_the_head)  # A gap ViT of siglip_tiny's sizes.


@pytest.mark.slow  # 93M parameters at 224x224 (the others: 316M, 428M).
@pytest.mark.parametrize('timm_name,name,patch,size', [
    ('vit_base_patch16_siglip_224', 'siglip_b16', 16, 224),
    pytest.param('vit_large_patch16_siglip_256', 'siglip_l16', 16, 256,
                 marks=all_sizes_only),
    pytest.param('vit_so400m_patch14_siglip_224', 'siglip_so400m14', 14, 224,
                 marks=all_sizes_only)])
def test_siglip_towers_give_timms_embedding(timm_name, name, patch, size,
                                            tmp_path):
  model = randomize_torch(timm.create_model(timm_name))
  path = tmp_path / f'{name}.safetensors'
  safetensors_torch.save_file(model.state_dict(), str(path))
  converted = convert.load(path)
  assert (converted.name, converted.kwargs) == (name, {
      'num_classes': 0, 'patch_size': patch, 'image_size': size,
      'gelu': 'exact'})
  print(f'{name}: {_compare(name, converted, model, images(2, size)):.1e}')

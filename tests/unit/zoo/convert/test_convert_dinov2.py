"""DINOv2 converted from timm's state dicts to the zoo's dinov2_*, verified
against timm: logits, every block's features, inputs of another size (the
position embedding resampled as timm's dynamic_img_size does it) and the
export back to timm.

timm's vit_*_patch14_dinov2 has a class token, layer scale (`ls1.gamma`,
`ls2.gamma`) and a position embedding with the class token's entry; its
_reg4_ variants add 4 register tokens (`reg_token`) and the embedding has
entries for the patches only (no_embed_class). The fast tier converts tiny
models of that structure (dinov2_s14's and dinov2_s14_reg4's test sizes,
registered for the test: a file's model is found by its sizes among the
registered ones); dinov2_s14_reg4 itself is in the slow tier. Needs torch
and timm (the convert-test extra).
"""

import dataclasses

import numpy as np
import pytest

from tests.convert_helpers import originals

torch, timm, functional = originals('torch', 'timm', 'torch.nn.functional')
# Compared with the originals: the whole suite's tier, not the fast one.
pytestmark = pytest.mark.slow

# pylint: disable=wrong-import-position
import zoo
from tests.convert_helpers import (RTOL, all_sizes_only, assert_exactly_once,
                                   images, randomize_torch, relative_difference,
                                   torch_logits, zoo_logits)
from tests.helpers import slow_after
from zoo import convert, registry, vit
from zoo.convert import export, timm_vit

SIZE = 32  # A 4x4 grid of 8x8 patches.
# timm's model -> the tiny zoo variant of its structure.
TINY = {'vit_small_patch14_dinov2': 'dinov2_tiny',
        'vit_small_patch14_reg4_dinov2': 'dinov2_tiny_reg4'}
_BASES = {'dinov2_tiny': 'dinov2_s14', 'dinov2_tiny_reg4': 'dinov2_s14_reg4'}
TIMM_TINY = dict(embed_dim=32, depth=2, num_heads=2, mlp_ratio=2,
                 patch_size=8, img_size=SIZE)
both = pytest.mark.parametrize('timm_name', list(TINY))
PLAIN, REG4 = TINY


@pytest.fixture
def tiny(monkeypatch):
  """dinov2_tiny and dinov2_tiny_reg4: dinov2_s14 and dinov2_s14_reg4 at
  their test kwargs, registered for one test."""
  for name, base in _BASES.items():
    spec = zoo.spec(base)
    # pylint: disable-next=protected-access
    monkeypatch.setitem(registry._MODELS, name, dataclasses.replace(
        spec, name=name, defaults={**spec.defaults, **spec.test_kwargs}))


def _timm_tiny(timm_name, **kwargs):
  return randomize_torch(timm.create_model(timm_name, **TIMM_TINY, **kwargs))


def _converted(model):
  return convert.convert({k: v.numpy() for k, v in model.state_dict().items()},
                         'timm')


def _compare(converted, model, x, **kwargs):
  difference = relative_difference(
      zoo_logits(converted.name, {**converted.kwargs, **kwargs},
                 converted.variables, x), torch_logits(model, x))
  assert difference <= RTOL, difference
  return difference


# Each model and each head in the fast tier, every pair in the whole suite.
@pytest.mark.parametrize('timm_name,num_classes', slow_after(2, [
    pytest.param(name, n, id=f'{n}-{name}')
    for name, n in [(PLAIN, 0), (REG4, 5), (PLAIN, 5), (REG4, 0)]]))
def test_timm_state_dicts_give_timms_outputs(tiny, timm_name, num_classes):
  del tiny
  model = _timm_tiny(timm_name, num_classes=num_classes)
  converted = _converted(model)
  # timm's layout is the model's by default: registers and their embedding
  # without the class token's entry, layer scale.
  assert (converted.name, converted.kwargs) == (TINY[timm_name], {
      'num_classes': num_classes, 'patch_size': 8, 'image_size': SIZE,
      'gelu': 'exact'})
  assert_exactly_once(converted, model.state_dict(), converted.name,
                      converted.kwargs)
  _compare(converted, model, images(2, SIZE))


@both
def test_features_are_timms_intermediates(tiny, timm_name):
  del tiny
  model = _timm_tiny(timm_name)
  converted = _converted(model)
  x = images(2, SIZE)
  ours = zoo_logits(converted.name, {**converted.kwargs, 'features': True},
                    converted.variables, x)
  with torch.no_grad():
    theirs = model.forward_intermediates(torch.as_tensor(x),
                                         intermediates_only=True)
  assert len(ours) == len(theirs) == 2
  for block, (a, b) in enumerate(zip(ours, theirs)):
    b = b.numpy().transpose(0, 2, 3, 1)  # NCHW -> NHWC, without the tokens.
    assert a.shape == b.shape == (2, 4, 4, 32)
    difference = relative_difference(a, b)
    assert difference <= RTOL, (block, difference)


# Up (6x6, 7x5 patches) and down (3x3: antialiased).
# Each size and each model in the fast tier, every pair in the whole suite.
@pytest.mark.parametrize('timm_name,shape', slow_after(3, [
    pytest.param(name, shape, id=f'{shape[0]}x{shape[1]}-{name}')
    for name, shape in [(PLAIN, (48, 48)), (REG4, (56, 40)),
                        (PLAIN, (24, 24)), (REG4, (48, 48)),
                        (PLAIN, (56, 40)), (REG4, (24, 24))]]))
def test_other_input_sizes_give_timms_dynamic_img_size(tiny, timm_name,
                                                        shape):
  del tiny
  model = _timm_tiny(timm_name, dynamic_img_size=True)
  converted = _converted(model)
  assert zoo.create(converted.name, **converted.kwargs).dynamic_size
  x = np.random.default_rng(0).normal(size=(2, 3, *shape)).astype(np.float32)
  _compare(converted, model, x)


@pytest.mark.parametrize('old,new', [(4, 7), (37, 16), (16, 37), (5, 3),
                                     (9, 2), (1, 4), (6, 6)])
@pytest.mark.parametrize('antialias', [True, False])
def test_bicubic_matrix_is_torchs_interpolate(old, new, antialias):
  grid = np.random.default_rng(0).normal(size=(1, 3, old, old))
  theirs = functional.interpolate(torch.as_tensor(grid), size=(new, new),
                                  mode='bicubic', align_corners=False,
                                  antialias=antialias).numpy()
  matrix = vit.bicubic_matrix(old, new, antialias)
  ours = np.einsum('Hh,nchw,Ww->ncHW', matrix, grid, matrix)
  np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)


@both
def test_template_is_timms_state_dict(tiny, timm_name):
  del tiny
  name = TINY[timm_name]
  kwargs = {**zoo.spec(name).defaults, 'num_classes': 5}
  theirs = timm.create_model(timm_name, **TIMM_TINY, num_classes=5)
  assert list(timm_vit.template(name, kwargs).items()) == [
      (k, tuple(v.shape)) for k, v in theirs.state_dict().items()]


@both
def test_export_gives_timm_the_same_model(tiny, timm_name):
  del tiny
  model = _timm_tiny(timm_name)
  converted = _converted(model)
  tensors = export.state_dict(timm_vit, converted.name, converted.kwargs,
                              converted.variables)
  fresh = timm.create_model(timm_name, **TIMM_TINY)
  fresh.load_state_dict({k: torch.as_tensor(v) for k, v in tensors.items()},
                        strict=True)
  x = images(2, SIZE)
  difference = relative_difference(torch_logits(fresh.eval(), x),
                                   torch_logits(model, x))
  assert difference <= RTOL, difference


def test_a_file_of_another_size_names_the_tensor(tiny):
  del tiny
  registers = _timm_tiny('vit_small_patch14_reg4_dinov2').state_dict()
  state = {k: v.numpy() for k, v in registers.items()}
  # The structure the file has, the kwargs set: registers for dinov2_tiny.
  converted = convert.convert(state, name='dinov2_tiny')
  assert converted.kwargs['num_registers'] == 4
  assert not converted.kwargs['class_posemb']
  with pytest.raises(ValueError, match=r"'patch_embed\.proj\.weight' has "
                     r'shape \(32, 3, 8, 8\) where dinov2_s14_reg4 with 8x8 '
                     r'patches needs \(384, 3, 8, 8\)'):
    convert.convert(state, name='vit_small_patch8_reg4_dinov2')
  del state['blocks.1.ls2.gamma']
  with pytest.raises(ValueError, match=r"no tensor 'blocks\.1\.ls2\.gamma'"):
    convert.convert(state)


@pytest.mark.slow  # 22M parameters; timm's sizes at 224 and 280.
@pytest.mark.parametrize('timm_name,name', [
    ('vit_small_patch14_reg4_dinov2', 'dinov2_s14_reg4'),
    *(pytest.param(t, n, marks=all_sizes_only) for t, n in [
        ('vit_small_patch14_dinov2', 'dinov2_s14'),
        ('vit_base_patch14_dinov2', 'dinov2_b14'),
        ('vit_base_patch14_reg4_dinov2', 'dinov2_b14_reg4'),
        ('vit_large_patch14_dinov2', 'dinov2_l14'),
        ('vit_large_patch14_reg4_dinov2', 'dinov2_l14_reg4')])])
def test_dinov2s_give_timms_features(timm_name, name):
  model = randomize_torch(timm.create_model(timm_name, img_size=224,
                                            dynamic_img_size=True))
  converted = _converted(model)
  assert (converted.name, converted.kwargs) == (name, {
      'num_classes': 0, 'patch_size': 14, 'image_size': 224,
      'gelu': 'exact'})
  differences = [_compare(converted, model, images(2, 224)),
                 # 20x20 patches from the 16x16 of the position embedding.
                 _compare(converted, model, images(1, 280))]
  print(f'{name}: {max(differences):.1e}')

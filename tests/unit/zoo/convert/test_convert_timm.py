"""timm ViTs converted to the zoo's, verified against timm.

timm's model with random weights (layer-norm scales, class token and
position embedding too) is saved, converted and compared in float32: the
largest logit difference relative to the largest logit is at most 1e-5 with
the exact GELU the converter sets; with the zoo's default tanh GELU it is
about 2e-4, which the comparison tells apart. Needs torch and timm (the
convert-test extra); skipped without them.
"""

import numpy as np
import pytest

from tests.convert_helpers import originals

torch, timm, safetensors_torch = originals(
    'torch', 'timm', 'safetensors.torch')
# Compared with the originals: the whole suite's tier, not the fast one.
pytestmark = pytest.mark.slow

# pylint: disable=wrong-import-position
import zoo
from tests.convert_helpers import (RTOL, all_sizes_only, assert_exactly_once,
                                   images, randomize_torch,
                                   relative_difference, torch_logits,
                                   zoo_logits)
from zoo import convert
from zoo.convert import export, timm_vit

SIZE = 48  # A 3x3 grid of 16x16 patches.


def _reference(name: str, tmp_path, fmt: str = 'safetensors', **kwargs):
  model = randomize_torch(timm.create_model(name, img_size=SIZE, **kwargs))
  path = tmp_path / f'{name}.{fmt}'
  if fmt == 'safetensors':
    safetensors_torch.save_file(model.state_dict(), str(path))
  else:
    torch.save(model.state_dict(), path)
  return model, path


def _check(name, zoo_name, tmp_path, fmt):
  model, path = _reference(name, tmp_path, fmt)
  converted = convert.load(path, 'timm')
  assert (converted.name, converted.kwargs) == (zoo_name, {
      'num_classes': 1000, 'patch_size': 16, 'image_size': SIZE,
      'gelu': 'exact'})
  assert_exactly_once(converted, model.state_dict(), zoo_name,
                      converted.kwargs)
  x = images(2, SIZE)
  theirs = torch_logits(model, x)
  difference = relative_difference(
      zoo_logits(zoo_name, converted.kwargs, converted.variables, x), theirs)
  assert difference <= RTOL, difference
  return converted, x, theirs


# ViT-Ti's code at another width, which the fast tier compares below; the
# .pth reader is the fast tier's in test_convert_bit.py.
@pytest.mark.slow
def test_vit_s16_gives_timms_logits(tmp_path):
  _check('vit_small_patch16_224', 'vit_s16', tmp_path, 'pth')


# 86M and 304M parameters: the same code as ViT-Ti and S at full width,
# larger (each found from its sizes in test_convert_big_vision.py's
# test_each_registered_vit_is_found_by_its_sizes).
@pytest.mark.slow
@pytest.mark.parametrize('name,zoo_name', [
    pytest.param(*names, marks=all_sizes_only) for names in [
        ('vit_base_patch16_224', 'vit_b16'),
        ('vit_large_patch16_224', 'vit_l16')]])
def test_larger_vits_give_timms_logits(name, zoo_name, tmp_path):
  _check(name, zoo_name, tmp_path, 'safetensors')


def test_vit_ti16_gives_timms_logits_with_the_exact_gelu_only(tmp_path):
  """Why timm's ViTs get gelu='exact': the zoo's default tanh GELU misses
  timm's logits by far more than the tolerance."""
  converted, x, theirs = _check('vit_tiny_patch16_224', 'vit_ti16', tmp_path,
                                'safetensors')
  tanh = relative_difference(
      zoo_logits('vit_ti16', {**converted.kwargs, 'gelu': 'tanh'},
                 converted.variables, x), theirs)
  assert 10 * RTOL < tanh < 1e-2, tanh


@pytest.mark.slow  # Compiles the ViT's initialization for the new head.
def test_timm_names_and_a_new_head(tmp_path, caplog):
  _, path = _reference('vit_tiny_patch16_224', tmp_path)
  with caplog.at_level('WARNING'):
    model, variables = zoo.load_pretrained('vit_tiny_patch16_224', path,
                                           num_classes=10)
  assert (model.hidden_size, model.gelu, model.image_size) == (192, 'exact',
                                                               SIZE)
  assert 'params/head/kernel' in caplog.text
  assert '1000 classes, not 10' in caplog.text
  # The zoo's ViT head starts at zero.
  assert not np.asarray(variables['params']['head']['kernel']).any()


def test_a_file_of_another_model_names_the_first_tensor_that_does_not_fit(
    tmp_path):
  _, path = _reference('vit_tiny_patch16_224', tmp_path)
  with pytest.raises(ValueError, match=r"'patch_embed\.proj\.weight' has "
                     r'shape \(192, 3, 16, 16\) where vit_s16 with 16x16 '
                     r'patches needs \(384, 3, 16, 16\)'):
    zoo.load_pretrained('vit_small_patch16_224', path)
  with pytest.raises(ValueError, match='converts to one of vit_'):
    zoo.load_pretrained('resnet50', path)


@pytest.mark.slow  # Compiles two ViTs.
def test_a_larger_image_size_resizes_the_position_embedding(tmp_path):
  scipy_ndimage = pytest.importorskip('scipy.ndimage')
  model, path = _reference('vit_tiny_patch16_224', tmp_path)
  converted = convert.load(path, image_size=80)  # A 5x5 grid from 3x3.
  assert converted.kwargs['image_size'] == 80
  pos = converted.variables['params']['pos_embedding']
  theirs = model.pos_embed.detach().numpy()
  np.testing.assert_array_equal(pos[:, 0], theirs[:, 0])  # Class token.
  # What Google's vit_jax/checkpoint.py load_pretrained does to the grid.
  grid = scipy_ndimage.zoom(theirs[0, 1:].reshape(3, 3, -1), (5 / 3, 5 / 3, 1),
                            order=1)
  np.testing.assert_allclose(pos[0, 1:], grid.reshape(25, -1), rtol=1e-6,
                             atol=1e-6)
  logits = zoo_logits('vit_ti16', converted.kwargs, converted.variables,
                      images(1, 80))
  assert logits.shape == (1, 1000) and np.isfinite(logits).all()


def test_features_are_timms_intermediates(tmp_path):
  model, path = _reference('vit_tiny_patch16_224', tmp_path)
  converted = convert.load(path)
  x = images(2, SIZE)
  ours = zoo_logits('vit_ti16', {**converted.kwargs, 'features': True},
                    converted.variables, x)
  with torch.no_grad():
    theirs = model.forward_intermediates(torch.as_tensor(x),
                                         intermediates_only=True)
  assert len(ours) == len(theirs) == 12
  for block, (a, b) in enumerate(zip(ours, theirs)):
    b = b.numpy().transpose(0, 2, 3, 1)  # NCHW -> NHWC, no class token.
    assert a.shape == b.shape == (2, 3, 3, 192)
    difference = relative_difference(a, b)
    assert difference <= RTOL, (block, difference)


def test_template_is_timms_state_dict():
  kwargs = {**zoo.spec('vit_ti16').defaults, 'image_size': SIZE,
            'num_classes': 10, 'patch_size': 8}
  theirs = timm.create_model('vit_tiny_patch16_224', img_size=SIZE,
                             num_classes=10, patch_size=8)
  assert list(timm_vit.template('vit_ti16', kwargs).items()) == [
      (k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
  with pytest.raises(ValueError, match='not a timm ViT'):
    timm_vit.template('vit_ti16', {**kwargs, 'posemb': 'sincos2d'})


def test_export_gives_timm_the_same_model(tmp_path):
  model, path = _reference('vit_tiny_patch16_224', tmp_path)
  converted = convert.load(path)
  tensors = export.state_dict(timm_vit, 'vit_ti16', converted.kwargs,
                              converted.variables)
  fresh = timm.create_model('vit_tiny_patch16_224', img_size=SIZE)
  fresh.load_state_dict({k: torch.as_tensor(v) for k, v in tensors.items()},
                        strict=True)
  x = images(2, SIZE)
  difference = relative_difference(torch_logits(fresh.eval(), x),
                                   torch_logits(model, x))
  assert difference <= RTOL, difference
  with pytest.raises(ValueError, match="gelu='tanh'"):
    export.state_dict(timm_vit, 'vit_ti16', {**converted.kwargs,
                                             'gelu': 'tanh'},
                      converted.variables)

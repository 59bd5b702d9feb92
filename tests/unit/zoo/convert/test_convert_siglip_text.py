"""transformers' SigLIP converted to the zoo's text towers (siglip_*_text),
image towers (siglip_*) and SigLIP (zoo/siglip.py), verified against
transformers.

Each original is built at a tiny size with random weights (norm scales,
biases, the logits' scale and bias too), written with `save_pretrained`,
converted and compared in float32: the largest difference relative to the
largest value is at most 1e-5, for SiglipTextModel's pooled output (with
and without a padding mask) and SiglipModel's embeddings and logits. Every
tensor of the file is used exactly once, and each export goes back into a
fresh transformers model that computes the same. The registered parameter
counts are transformers' own at full size. Needs torch and transformers
(the convert-test extra); skipped without them.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.convert_helpers import originals

torch, transformers, safetensors_numpy = originals(
    'torch', 'transformers', 'safetensors.numpy')
# Compared with the originals: the whole suite's tier, not the fast one.
pytestmark = pytest.mark.slow

# pylint: disable=wrong-import-position
import zoo
from tests.convert_helpers import (RTOL, all_sizes_only, assert_exactly_once,
                                   images, randomize_torch,
                                   relative_difference, zoo_on_tokens)
from tests.helpers import slow_after
from zoo import convert
from zoo.convert import export, transformers_siglip

# The originals' text_config (Hugging Face repositories
# google/siglip-base-patch16-224, siglip-large-patch16-256,
# siglip-so400m-patch14-384, and SigLIP 2's siglip2-*: Gemma's vocabulary);
# SiglipTextConfig's defaults (vocabulary 32,000, 64 positions, the head as
# wide as the tower) are the base model's.
_B, _L, _SO400M = {}, dict(hidden_size=1024, intermediate_size=4096,
                           num_hidden_layers=24, num_attention_heads=16), dict(
                               hidden_size=1152, intermediate_size=4304,
                               num_hidden_layers=27, num_attention_heads=16)
_V2 = dict(vocab_size=256000)
ORIGINALS = {
    'siglip_b16_text': _B, 'siglip_l16_text': _L,
    'siglip_so400m14_text': _SO400M, 'siglip2_b16_text': dict(_B, **_V2),
    'siglip2_l16_text': dict(_L, **_V2),
    'siglip2_so400m14_text': dict(_SO400M, **_V2)}
# Tiny towers of the same structure: heads of 64 features, as the base
# model's (the file does not say how many heads; the named model's width
# does).
TEXT = dict(vocab_size=101, hidden_size=128, intermediate_size=192,
            num_hidden_layers=2, num_attention_heads=2,
            max_position_embeddings=16)
VISION = dict(hidden_size=128, intermediate_size=192, num_hidden_layers=2,
              num_attention_heads=2, image_size=32, patch_size=8)
LENGTH = 16


def _text_model(**changes):
  config = transformers.SiglipTextConfig(**{**TEXT, **changes})
  return randomize_torch(transformers.SiglipTextModel(config)).float().eval()


def _siglip_model():
  config = transformers.SiglipConfig(text_config=TEXT, vision_config=VISION)
  return randomize_torch(transformers.SiglipModel(config)).float().eval()


def _tokens(seed: int = 0, n: int = 3) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 101, (n, LENGTH),
                                              dtype=np.int64)


def _save(model, tmp_path):
  model.save_pretrained(tmp_path, safe_serialization=True)
  path = tmp_path / 'model.safetensors'
  return path, safetensors_numpy.load_file(str(path))


def _their_text(model, tokens, mask=None) -> np.ndarray:
  with torch.no_grad():
    return model(torch.as_tensor(tokens),
                 attention_mask=None if mask is None else torch.as_tensor(
                     mask)).pooler_output.numpy()


def _our_text(converted, tokens, mask=None) -> np.ndarray:
  return zoo_on_tokens(converted.name, converted.kwargs, converted.variables,
                       tokens, mask)


def test_text_tower_gives_transformers_embedding_with_padding(tmp_path):
  model = _text_model()
  path, tensors = _save(model, tmp_path)
  converted = convert.load(path, 'transformers', 'siglip_b16_text')
  assert converted.kwargs == {'vocab_size': 101, 'hidden_size': 128,
                              'num_layers': 2, 'mlp_dim': 192,
                              'max_length': 16, 'num_heads': 2}
  assert_exactly_once(converted, tensors, converted.name, converted.kwargs)
  tokens = _tokens()
  difference = relative_difference(_our_text(converted, tokens),
                                   _their_text(model, tokens))
  assert difference <= RTOL, difference
  # Shorter sequences, padded at their end and masked: the pooled last
  # token is padding that attends to the real tokens only.
  mask = np.ones_like(tokens)
  mask[1, -5:] = mask[2, -9:] = 0
  tokens[mask == 0] = 1  # SigLIP's padding id.
  masked = _our_text(converted, tokens, mask)
  difference = relative_difference(masked, _their_text(model, tokens, mask))
  assert difference <= RTOL, difference
  assert relative_difference(masked, _our_text(converted, tokens)) > 1e-3
  # Fewer tokens than positions: the first positions.
  difference = relative_difference(_our_text(converted, tokens[:, :5]),
                                   _their_text(model, tokens[:, :5]))
  assert difference <= RTOL, difference
  # The export loads into a fresh transformers model, which computes the
  # same.
  exported = export.state_dict(transformers_siglip, converted.name,
                               converted.kwargs, converted.variables)
  fresh = transformers.SiglipTextModel(model.config).float().eval()
  assert {k: v.shape for k, v in exported.items()} == {
      k: tuple(v.shape) for k, v in fresh.state_dict().items()}
  fresh.load_state_dict({k: torch.as_tensor(v) for k, v in exported.items()})
  difference = relative_difference(_their_text(fresh, tokens),
                                   _their_text(model, tokens))
  assert difference <= RTOL, difference


def test_a_projection_of_another_width_converts(tmp_path):
  model = _text_model(projection_size=48)
  path, _ = _save(model, tmp_path)
  converted = convert.load(path, name='siglip_b16_text')
  assert converted.kwargs['projection_size'] == 48
  tokens = _tokens()
  difference = relative_difference(_our_text(converted, tokens),
                                   _their_text(model, tokens))
  assert difference <= RTOL, difference


def test_siglip_model_gives_transformers_embeddings_and_logits(tmp_path):
  model = _siglip_model()
  _, tensors = _save(model, tmp_path)
  converted = transformers_siglip.convert_model(
      tensors, image='siglip_b16', text='siglip_b16_text')
  # Every tensor of the file used once: by one tower, or as the logits'
  # scale and bias.
  used = {}
  for tower in (converted.image, converted.text):
    assert_exactly_once(tower, tensors, tower.name, tower.kwargs)
    for key in tensors:
      used[key] = used.get(key, 0) + (key not in tower.ignored)
  assert {k for k, n in used.items() if n != 1} == {'logit_scale',
                                                    'logit_bias'}
  assert all(n == 0 for k, n in used.items()
             if k in ('logit_scale', 'logit_bias'))
  x, tokens = images(2, 32), _tokens()
  ours = jax.jit(converted.model.apply)(
      converted.variables, jnp.asarray(x.transpose(0, 2, 3, 1)),
      jnp.asarray(tokens, jnp.int32))
  with torch.no_grad():
    theirs = model(input_ids=torch.as_tensor(tokens),
                   pixel_values=torch.as_tensor(x))
  for ours_, theirs_ in ((ours.image_embeddings, theirs.image_embeds),
                         (ours.text_embeddings, theirs.text_embeds),
                         (ours.logits, theirs.logits_per_image)):
    difference = relative_difference(ours_, theirs_.numpy())
    assert difference <= RTOL, difference
  assert ours.logits.shape == (2, 3)
  # The export is SiglipModel's state dict, which computes the same.
  exported = transformers_siglip.export_model(
      converted.image.name, converted.image.kwargs, converted.text.name,
      converted.text.kwargs, converted.variables)
  # The file back, bit for bit.
  assert exported.keys() == tensors.keys()
  assert all(np.array_equal(exported[k], tensors[k]) for k in tensors)
  fresh = transformers.SiglipModel(model.config).float().eval()
  assert {k: v.shape for k, v in exported.items()} == {
      k: tuple(v.shape) for k, v in fresh.state_dict().items()}
  fresh.load_state_dict({k: torch.as_tensor(v) for k, v in exported.items()})
  with torch.no_grad():
    again = fresh(input_ids=torch.as_tensor(tokens),
                  pixel_values=torch.as_tensor(x)).logits_per_image.numpy()
  difference = relative_difference(again, theirs.logits_per_image.numpy())
  assert difference <= RTOL, difference


def test_one_tower_of_a_siglip_model_file(tmp_path):
  """The file's text tower by default, its image tower by name; the rest
  set aside."""
  model = _siglip_model()
  path, _ = _save(model, tmp_path)
  with pytest.raises(ValueError, match='which no zoo model has'):
    convert.load(path)  # The text tower, of no registered size.
  text = convert.load(path, name='siglip_b16_text')
  assert set(text.ignored.values()) == {
      'the image tower', "the logits' scale and bias (convert_model)"}
  image = convert.load(path, name='siglip_b16')
  assert image.kwargs == {'num_classes': 0, 'patch_size': 8,
                          'image_size': 32, 'hidden_size': 128,
                          'num_layers': 2, 'mlp_dim': 192, 'num_heads': 2}
  assert set(image.ignored.values()) == {
      'the text tower', "the logits' scale and bias (convert_model)"}
  x = images(2, 32)
  ours = zoo.create('siglip_b16', **image.kwargs).apply(
      image.variables, jnp.asarray(x.transpose(0, 2, 3, 1)))
  with torch.no_grad():
    theirs = model.vision_model(
        pixel_values=torch.as_tensor(x)).pooler_output.numpy()
  difference = relative_difference(ours, theirs)
  assert difference <= RTOL, difference
  with pytest.raises(ValueError, match='no image_size or num_classes'):
    convert.load(path, name='siglip_b16_text', image_size=64)
  # Fine-tuning the image tower: a new classifier, larger images (the
  # position embedding resized).
  tuned = convert.load(path, name='siglip_b16', num_classes=5, image_size=48)
  assert tuned.initialized == ['params/head/kernel', 'params/head/bias']
  assert tuned.variables['params']['pos_embedding'].shape == (1, 36, 128)


def test_templates_are_transformers_state_dicts():
  text = {**zoo.spec('siglip_b16_text').defaults, 'vocab_size': 101,
          'hidden_size': 128, 'num_layers': 2, 'mlp_dim': 192,
          'num_heads': 2, 'max_length': 16}
  assert list(transformers_siglip.template('siglip_b16_text', text).items()
              ) == [(k, tuple(v.shape)) for k, v in transformers.
                    SiglipTextModel(transformers.SiglipTextConfig(**TEXT))
                    .state_dict().items()]
  image = {**zoo.spec('siglip_b16').defaults, 'hidden_size': 128,
           'num_layers': 2, 'mlp_dim': 192, 'num_heads': 2,
           'patch_size': 8, 'image_size': 32}
  assert list(transformers_siglip.template('siglip_b16', image).items()) == [
      (k, tuple(v.shape)) for k, v in transformers.SiglipVisionModel(
          transformers.SiglipVisionConfig(**VISION)).state_dict().items()]
  with pytest.raises(ValueError, match='not a transformers SigLIP image'):
    transformers_siglip.template('siglip_b16', {**image, 'gelu': 'exact'})


@pytest.mark.parametrize('name', slow_after(1, list(ORIGINALS)))
def test_registered_counts_are_the_originals(name):
  config = transformers.SiglipTextConfig(**ORIGINALS[name])
  with torch.device('meta'):  # Shapes only: nothing is allocated.
    model = transformers.SiglipTextModel(config)
  count = sum(p.numel() for p in model.parameters())
  assert count == zoo.spec(name).reference_params == zoo.num_params(name)
  # And the converter's template is that model's state dict.
  assert list(transformers_siglip.template(
      name, zoo.spec(name).defaults).items()) == [
          (k, tuple(v.shape)) for k, v in model.state_dict().items()]


@pytest.mark.slow  # 110M parameters (the others: 336M, 450M).
@pytest.mark.parametrize('name', [
    pytest.param('siglip_b16_text', marks=pytest.mark.skipif(
        os.environ.get('TESTS_ALL_SIZES') != '1',
        reason='compared at full size as the text tower of '
        'test_full_size_siglip_model_gives_transformers_logits: '
        'TESTS_ALL_SIZES=1 runs it alone too')),
    pytest.param('siglip_l16_text', marks=all_sizes_only),
    pytest.param('siglip_so400m14_text', marks=all_sizes_only)])
def test_full_size_text_towers_give_transformers_embedding(name, tmp_path):
  config = transformers.SiglipTextConfig(**ORIGINALS[name])
  model = randomize_torch(transformers.SiglipTextModel(config)).eval()
  path, _ = _save(model, tmp_path)
  converted = convert.load(path)
  assert (converted.name, converted.kwargs) == (name, {})
  tokens = np.random.default_rng(0).integers(0, 32000, (2, 64))
  difference = relative_difference(_our_text(converted, tokens),
                                   _their_text(model, tokens))
  print(f'{name}: {difference:.1e}')
  assert difference <= RTOL, difference


@pytest.mark.slow  # 203M parameters: both of siglip-base-patch16-224's towers.
def test_full_size_siglip_model_gives_transformers_logits(tmp_path):
  model = randomize_torch(transformers.SiglipModel(
      transformers.SiglipConfig())).eval()  # The base model's config.
  _, tensors = _save(model, tmp_path)
  converted = transformers_siglip.convert_model(tensors)
  assert (converted.image.name, converted.text.name) == ('siglip_b16',
                                                         'siglip_b16_text')
  x = images(2, 224)
  tokens = np.random.default_rng(0).integers(0, 32000, (3, 64))
  ours = jax.jit(converted.model.apply)(
      converted.variables, jnp.asarray(x.transpose(0, 2, 3, 1)),
      jnp.asarray(tokens, jnp.int32)).logits
  with torch.no_grad():
    theirs = model(input_ids=torch.as_tensor(tokens),
                   pixel_values=torch.as_tensor(x)).logits_per_image.numpy()
  difference = relative_difference(ours, theirs)
  print(f'siglip_b16 + siglip_b16_text logits: {difference:.1e}')
  assert difference <= RTOL, difference

"""zoo/siglip.py: two tiny towers joined into SigLIP's embeddings and
logits. (tests/unit/zoo/convert/test_convert_siglip_text.py compares them
with transformers' SiglipModel.)"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo import siglip

pytestmark = pytest.mark.usefixtures('fast_compiles')


def _text_tower(**kwargs):
  return zoo.create('siglip_b16_text', **{
      **zoo.spec('siglip_b16_text').test_kwargs, 'projection_size': None,
      **kwargs})


def _tiny(**kwargs):
  return siglip.SigLIP(
      zoo.create('siglip_b16', **zoo.spec('siglip_b16').test_kwargs,
                 **kwargs), _text_tower(**kwargs))


@jax.jit
def _outputs(variables, images, tokens):
  """SigLIP's outputs, each tower's alone, the text tower's raw output and
  the bfloat16 model's outputs: one compiled program."""
  model = _tiny()
  return (model.apply(variables, images, tokens),
          model.apply(variables, images, method='embed_images'),
          model.apply(variables, tokens, method='embed_texts'),
          _text_tower().apply({'params': variables['params']['text']},
                              tokens),
          _tiny(dtype=jnp.bfloat16).apply(variables, images, tokens))


def test_logits_are_the_scaled_cosines_plus_the_bias():
  images = jax.random.normal(jax.random.PRNGKey(0), (2, 32, 32, 3))
  tokens = jax.random.randint(jax.random.PRNGKey(1), (3, 16), 0, 97)
  variables = jax.jit(_tiny().init)(jax.random.PRNGKey(2), images, tokens)
  params = variables['params']
  # The paper's start: t' = log 10, b = -10.
  np.testing.assert_allclose(params['logit_scale'].value, [np.log(10.0)])
  np.testing.assert_allclose(params['logit_bias'].value, [-10.0])
  out, image, text, raw, low = _outputs(variables, images, tokens)
  assert out.logits.shape == (2, 3)
  np.testing.assert_allclose(np.linalg.norm(out.image_embeddings, axis=-1),
                             1, rtol=1e-6)
  np.testing.assert_allclose(np.linalg.norm(out.text_embeddings, axis=-1),
                             1, rtol=1e-6)
  np.testing.assert_allclose(out.logits, 10 * image @ text.T - 10,
                             rtol=1e-5, atol=1e-5)
  # The text tower's output is the registered model's, normalized.
  np.testing.assert_allclose(
      text, raw / np.linalg.norm(raw, axis=-1, keepdims=True), rtol=1e-5,
      atol=1e-6)
  # bfloat16 towers: the embeddings and logits stay float32.
  assert {low.logits.dtype, low.text_embeddings.dtype} == {
      jnp.dtype(jnp.float32)}
  np.testing.assert_allclose(low.logits, out.logits, atol=0.2)


def test_create_pairs_each_image_tower_with_its_text_tower():
  for image in ('siglip_b16', 'siglip_l16', 'siglip_so400m14'):
    model = siglip.create(image)
    assert model.text.hidden_size == model.image.hidden_size
    assert model.text.vocab_size == 32000
  assert siglip.create('siglip_b16', 'siglip2_b16_text').text.vocab_size == (
      256000)


def test_logits_of_embeddings_and_ensembled_prompts():
  images = jax.random.normal(jax.random.PRNGKey(0), (2, 32, 32, 3))
  tokens = jax.random.randint(jax.random.PRNGKey(1), (6, 16), 0, 97)
  model = _tiny()
  variables = jax.jit(model.init)(jax.random.PRNGKey(2), images, tokens)
  out = jax.jit(model.apply)(variables, images, tokens)
  logits = jax.jit(lambda v, i, t: model.apply(v, i, t, method='logits'))
  # Texts embedded once, then matched: the same logits.
  np.testing.assert_allclose(
      logits(variables, out.image_embeddings, out.text_embeddings),
      out.logits, rtol=1e-6, atol=1e-6)
  # One prompt per class: its own embedding.
  text = out.text_embeddings
  np.testing.assert_allclose(siglip.ensemble(text[:, None]), text,
                             rtol=1e-6, atol=1e-6)
  # Three classes of two prompts: the normalized mean of each pair.
  pairs = siglip.ensemble(text.reshape(3, 2, -1))
  mean = (text[0::2] + text[1::2]) / 2
  np.testing.assert_allclose(
      pairs, mean / np.linalg.norm(mean, axis=-1, keepdims=True), rtol=1e-5,
      atol=1e-6)

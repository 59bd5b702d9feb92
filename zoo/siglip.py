"""SigLIP (Zhai et al. 2023): an image tower and a text tower whose
normalized embeddings meet in sigmoid logits.

    model = siglip.create('siglip_b16')   # + siglip_b16_text
    out = model.apply(variables, images, tokens)
    out.logits            # (images, texts): sigmoid(logits) = P(match)
    out.image_embeddings  # (images, width), unit norm
    out.text_embeddings   # (texts, width), unit norm
    model.apply(variables, images, method='embed_images')  # one tower only
    model.apply(variables, image_embeddings, text_embeddings,
                method='logits')   # texts embedded once, many images

logits[i, j] = exp(logit_scale) * cos(image i, text j) + logit_bias, as
transformers' SiglipModel computes `logits_per_image` (its
`logits_per_text` is the transpose). The towers are the registered ones
(zoo/vit.py's siglip_*, zoo/siglip_text.py's siglip_*_text); the variables
are {'params': {'image': ..., 'text': ..., 'logit_scale': (1,),
'logit_bias': (1,)}}. zoo/convert/transformers_siglip.py's `convert_model`
makes them from a transformers SiglipModel file.

Not a registered model: it takes two inputs, where every registered model
takes one.
"""

from typing import Any, NamedTuple

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
from flax.linen import initializers

from zoo import layers, registry


class Outputs(NamedTuple):
  """What SigLIP gives: both embeddings, normalized, and the logits of every
  (image, text) pair, float32."""

  image_embeddings: Any  # (images, width)
  text_embeddings: Any  # (texts, width)
  logits: Any  # (images, texts)


def normalize(x):
  """x / |x| along the last axis, in float32 (a bfloat16 norm of 1,152
  features loses digits the logits' scale of about 100 would show)."""
  x = x.astype(jnp.float32)
  return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


class SigLIP(nn.Module):
  """The two towers and the logits' learned scale and bias.

  Attributes:
    image: the image tower, a zoo ViT with num_classes=0 (its pooled
      embedding; siglip_b16 ...).
    text: the text tower (siglip_b16_text ...), of the image tower's width.
  """

  image: nn.Module
  text: nn.Module

  def setup(self):
    # The paper's start: t' = log 10, b = -10 (big_vision's defaults), so
    # that the many negative pairs start near sigmoid's zero.
    self.logit_scale = self.param(
        'logit_scale', layers.named(initializers.constant(np.log(10.0)),
                                    (None,)), (1,), jnp.float32)
    self.logit_bias = self.param(
        'logit_bias', layers.named(initializers.constant(-10.0), (None,)),
        (1,), jnp.float32)

  def embed_images(self, images, train: bool = False):
    """(images, width) unit-norm embeddings of NHWC float images."""
    return normalize(self.image(images, train=train))

  def embed_texts(self, tokens, mask=None, train: bool = False):
    """(texts, width) unit-norm embeddings of int token ids (texts,
    length); `mask` as the text tower's."""
    return normalize(self.text(tokens, train=train, mask=mask))

  def logits(self, image_embeddings, text_embeddings):
    """(images, texts) logits of unit-norm embeddings (images, width) and
    (texts, width): e.g. of texts embedded once, for many images."""
    return ((image_embeddings @ text_embeddings.T) *
            jnp.exp(self.logit_scale) + self.logit_bias)

  def __call__(self, images, tokens, mask=None, train: bool = False):
    image = self.embed_images(images, train)
    text = self.embed_texts(tokens, mask, train)
    return Outputs(image, text, self.logits(image, text))


def ensemble(text_embeddings):
  """(classes, prompts, width) unit-norm text embeddings to one (classes,
  width) per class: their mean, normalized again, as CLIP's and big_vision's
  zero-shot classifiers average a class's prompts ('a photo of a {}.', 'a
  {}.', ...)."""
  return normalize(jnp.mean(text_embeddings, axis=1))


def create(image: str = 'siglip_b16', text: str | None = None,
           **kwargs) -> SigLIP:
  """SigLIP of the registered towers `image` and `text`.

  Args:
    image: a registered image tower (siglip_b16, siglip_l16,
      siglip_so400m14).
    text: a registered text tower; None: `image` + '_text'
      (siglip_b16_text). SigLIP 2's weights take siglip2_*_text.
    **kwargs: options of both towers (dtype, param_dtype, attention_impl,
      remat, dropout_rate).

  Returns:
    The unbound SigLIP module.

  Raises:
    ValueError: a tower is unknown, or rejects an option.
  """
  return SigLIP(registry.create(image, **kwargs),
                registry.create(text or f'{image}_text', **kwargs))

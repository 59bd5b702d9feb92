"""Zero-shot image classification with SigLIP (zoo/siglip.py): the prompts
of each class embedded once into one text embedding per class, then each
batch of images ranked against them by SigLIP's logits.

    classifier = zero_shot.Classifier(model, variables, tokens)
    logits = classifier(images)           # (images, classes) float32
    best = zero_shot.ranked(logits, 5)    # (images, 5) class indices

`tokens` are int (classes, prompts, length): every class in every prompt
template (recipes/data/text/prompts.py makes them). A class of several
prompts is their embeddings' normalized mean (`siglip.ensemble`).
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from zoo import siglip


class Classifier:
  """SigLIP's logits of images against fixed classes; texts and images go
  through the towers `batch_size` at a time, the last batch padded so that
  each tower is compiled once."""

  def __init__(self, model: siglip.SigLIP, variables: Any, tokens,
               batch_size: int = 64):
    """Embeds the classes' prompts.

    Args:
      model: a SigLIP.
      variables: its variables.
      tokens: int (classes, prompts, length) token ids.
      batch_size: texts, then images, through a tower at once.
    """
    self.batch_size = batch_size
    self._variables = jax.device_put(variables)

    def embed_texts(variables, tokens):
      return model.apply(variables, tokens, method='embed_texts')

    def logits(variables, classes, images):
      embedded = model.apply(variables, images, method='embed_images')
      return model.apply(variables, embedded, classes, method='logits')

    self._logits = jax.jit(logits)
    classes, prompts, length = np.shape(tokens)
    texts = _batched(jax.jit(embed_texts), self._variables,
                     np.reshape(tokens, (classes * prompts, length)),
                     batch_size)
    self.classes = siglip.ensemble(texts.reshape(classes, prompts, -1))

  def __call__(self, images) -> np.ndarray:
    """float32 (images, classes) logits of NHWC images as the image tower
    takes them (its size, normalized)."""
    return _batched(
        lambda v, x: self._logits(v, self.classes, x), self._variables,
        np.asarray(images, np.float32), self.batch_size)


def _batched(function, variables, inputs: np.ndarray,
             batch_size: int) -> np.ndarray:
  """function(variables, batch) over `inputs`, batch_size rows at a time,
  the last batch padded with zeros (its padding's outputs dropped)."""
  out = []
  for start in range(0, len(inputs), batch_size):
    batch = inputs[start:start + batch_size]
    rows = len(batch)
    if rows < batch_size:
      batch = np.concatenate(
          [batch, np.zeros((batch_size - rows, *batch.shape[1:]),
                           batch.dtype)])
    out.append(np.asarray(function(variables, jnp.asarray(batch)))[:rows])
  return np.concatenate(out)


def ranked(logits: np.ndarray, k: int) -> np.ndarray:
  """The indices of the `k` highest logits of each row, highest first (ties
  to the lower index, as argmax takes them)."""
  return np.argsort(-np.asarray(logits), axis=-1, kind='stable')[:, :k]

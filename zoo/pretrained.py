"""Pretrained weights as a zoo model and its variables, in one call.

    model, variables = zoo.load_pretrained('resnet50', 'resnet50.pth',
                                           num_classes=10)
    logits = model.apply(variables, images, train=False)

The file is converted by zoo.convert (torchvision ResNets, timm ViTs,
Google's ViT .npz files; the source is told by the tensors' names).
"""

import logging
import os
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import traverse_util

from zoo import convert, registry


def load_pretrained(name: str | None, path: str | os.PathLike,
                    num_classes: int | None = None,
                    image_size: int | None = None, *,
                    source: str | None = None, seed: int = 0,
                    **model_kwargs) -> tuple[nn.Module, dict[str, Any]]:
  """(model, variables) of the zoo model `name` with the weights of `path`.

  The model gets what the file needs (a ViT's patch and image size, GELU
  variant, pooling). A file that does not fit the model is a ValueError
  (zoo.convert.ConversionError) naming the first tensor that does not fit.

  Args:
    name: a zoo name ('resnet50', 'vit_b16') or timm's ViT name
      ('vit_base_patch16_224'); None: the file's model.
    path: .safetensors, .pth/.pt/.bin (torchvision or timm state dicts) or
      .npz (Google's ViT checkpoints); local, or a URL such as gs://...
    num_classes: None keeps the file's head; another number re-initializes
      the head (from `seed`) and says so in a warning.
    image_size: ViTs: the input size; the position embedding is resized to
      it (bilinear over the patch grid). None: the file's.
    source: 'torchvision', 'timm' or 'big_vision'; None: detected.
    seed: the PRNG seed of the variables the file does not give (a new
      head).
    **model_kwargs: more `zoo.create` arguments, e.g. dtype=jnp.bfloat16;
      they win over what the file fixes.

  Returns:
    (model, variables): the Linen module and its {'params': ...} (and
    'batch_stats' for a ResNet) as nested dicts of jax arrays (the file's
    as float32), for `model.apply(variables, images, train=False)`.

  Raises:
    ValueError: zoo.convert.ConversionError when the file cannot be read or
      does not fit the model; ValueError for an unknown `name`.
  """
  converted = convert.load(path, source, name, num_classes, image_size)
  model = registry.create(converted.name,
                          **{**converted.kwargs, **model_kwargs})
  variables = traverse_util.flatten_dict(converted.variables, sep='/')
  if converted.initialized:
    shape = registry.input_shape(converted.name, **converted.kwargs)
    initial = jax.jit(model.init)(jax.random.PRNGKey(seed),
                                  jnp.zeros((1, *shape), jnp.float32))
    initial = traverse_util.flatten_dict(nn.meta.unbox(initial), sep='/')
    for target in converted.initialized:
      variables[target] = initial[target]
    why = sorted(set(converted.ignored.values()) - {'a step counter'})
    logging.getLogger(__name__).warning(
        '%s: %s re-initialized (the file %s has %s).', converted.describe(),
        ', '.join(converted.initialized), os.fspath(path),
        '; '.join(why) or 'no head')
  variables = jax.tree.map(jnp.asarray, variables)
  return model, traverse_util.unflatten_dict(variables, sep='/')


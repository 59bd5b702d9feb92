"""Pretrained weights of other libraries as the zoo's models.

    converted = zoo.convert.load('resnet50.pth')       # the source is detected
    model = zoo.create(converted.name, **converted.kwargs)
    logits = model.apply(converted.variables, images)

or in one call `zoo.load_pretrained('resnet50', 'resnet50.pth')` (zoo/
pretrained.py). The recipes' `python -m recipes.convert --source=torchvision
SRC_FILE DST_DIR` writes the result as an orbax checkpoint that
`--config.init_from=DST_DIR` fine-tunes from (recipes/convert.py).

Converters, one module per source library and family (every module of this
package with a SOURCE is one; a new one is a new file):
  torchvision  ResNet-18/34/50/101/152 state dicts     torchvision_resnet.py
  timm         ViT, SigLIP, DINOv2 state dicts        timm_vit.py
  big_vision   Google's ViT, SigLIP .npz (tanh GELU)   big_vision_vit.py
  timm         ConvNeXt-T/S/B/L state dicts            timm_convnext.py
  torchvision  ConvNeXt-T/S/B/L state dicts            torchvision_convnext.py
  timm         Mixer-S/B/L state dicts (exact GELU)    timm_mixer.py
  big_vision   Google's Mixer .npz files (tanh GELU)   big_vision_mixer.py
  timm         BiT-R50x1 ... R152x4 state dicts        timm_bit.py
  big_vision   BiT's published and big_vision .npz     big_vision_bit.py
  transformers GPT-2, Llama, Qwen2 model.safetensors    transformers_decoder.py
  transformers SigLIP's towers model.safetensors      transformers_siglip.py
Each has `SOURCE`, `matches(tensors)` (the tensors' names are its; no two
converters match the same file) and `convert(...)`; an exportable one also
`template(name, kwargs)`, the names and shapes of the file a zoo model makes
(export.py); one whose model's settings are not all in the weights also
`read_config(path)`, the config.json beside the file, which its `convert`
takes as `config` (transformers' decoders: their heads, RoPE, norm
epsilon). Files are read by files.py (.safetensors without torch; .pth
with torch; .npz); transfer.py checks that every tensor is used exactly once and every
variable set exactly once, and names the first tensor that does not fit.
"""

import importlib
import os
import pkgutil
from types import ModuleType
from typing import Mapping

import numpy as np

from zoo.convert import files
from zoo.convert.transfer import ConversionError, Converted

CONVERTERS: tuple[ModuleType, ...] = tuple(
    module for module in (importlib.import_module(f'{__name__}.{m.name}')
                          for m in sorted(pkgutil.iter_modules(__path__),
                                          key=lambda m: m.name))
    if hasattr(module, 'SOURCE'))
# The libraries files come from: 'big_vision', 'timm', 'torchvision'.
SOURCES: tuple[str, ...] = tuple(sorted({m.SOURCE for m in CONVERTERS}))


def converter(tensors: Mapping[str, np.ndarray]) -> ModuleType | None:
  """The converter module whose names `tensors` have, or None.

  Args:
    tensors: a checkpoint's tensors by name (as `files.read` gives them).

  Returns:
    The module of CONVERTERS that recognizes the names, or None.
  """
  return next((m for m in CONVERTERS if m.matches(tensors)), None)


def detect(tensors: Mapping[str, np.ndarray]) -> str | None:
  """The source whose names `tensors` have, or None.

  Args:
    tensors: a checkpoint's tensors by name (as `files.read` gives them).

  Returns:
    The source library of the converter that recognizes the names (one of
    SOURCES: 'torchvision', 'timm', 'big_vision'), or None.
  """
  module = converter(tensors)
  return module.SOURCE if module else None


def convert(tensors: Mapping[str, np.ndarray], source: str | None = None,
            file: str = 'the checkpoint', name: str | None = None,
            num_classes: int | None = None,
            image_size: int | None = None,
            config: Mapping | None = None) -> Converted:
  """`tensors` of a `source` checkpoint (None: detected) as the zoo model
  `name` (None: the file's; a zoo name or timm's ViT name).

  A `num_classes` other than the file's leaves the head to initialization
  (`Converted.initialized`); `image_size` (ViTs) resizes the position
  embedding. A ConversionError names the first tensor that does not fit.

  Args:
    tensors: the checkpoint's tensors by name.
    source: 'torchvision', 'timm' or 'big_vision'; None: detected from the
      names.
    file: what to call the checkpoint in error messages (its path).
    name: the zoo model to convert to ('resnet50'), or timm's ViT name
      ('vit_base_patch16_224'); None: the one the file's shapes give.
    num_classes: the model's classes; None: the file's head's.
    image_size: a ViT's input side, in pixels; None: the file's. Ignored by
      ResNets, which take any size.
    config: the model's config.json, for a converter with `read_config`
      (transformers' decoders); None: none.

  Returns:
    The Converted model: name, kwargs, variables and the bookkeeping.

  Raises:
    ConversionError: (a ValueError) `tensors` is empty or of no known
      source, `source` is unknown or not the file's, `num_classes` or
      `image_size` is not a positive int, `config` is given to a converter
      that reads none, or the file does not fit `name`.
  """
  if not tensors:
    raise ConversionError(f'{file} holds no tensors.')
  module = converter(tensors)
  found = module.SOURCE if module else None
  if source is None:
    source = found
    if source is None:
      first = ', '.join(repr(n) for n in list(tensors)[:3])
      raise ConversionError(
          f'{file} is not a checkpoint of {", ".join(SOURCES)}: its tensors '
          f'are named {first}, ...')
  elif source not in SOURCES:
    raise ConversionError(f'unknown source {source!r}; choose one of '
                          f'{", ".join(SOURCES)}.')
  elif found != source:
    first = next(iter(tensors))
    what = f'is a {found}' if found else 'is not a'
    raise ConversionError(f'{file} {what} checkpoint (its first tensor is '
                          f'{first!r}), not a {source} one; give the source '
                          'it comes from.')
  for what, value in (('num_classes', num_classes),
                      ('image_size', image_size)):
    if value is not None and not (isinstance(value, int) and value > 0
                                  and not isinstance(value, bool)):
      raise ConversionError(f'{what} must be a positive int, not {value!r}.')
  if config is None:
    return module.convert(tensors, file, name, num_classes, image_size)
  if not hasattr(module, 'read_config'):
    raise ConversionError(f'{file} is a {source} checkpoint, whose '
                          'converter takes no config.')
  return module.convert(tensors, file, name, num_classes, image_size,
                        config=config)


def load(path: str | os.PathLike, source: str | None = None,
         name: str | None = None, num_classes: int | None = None,
         image_size: int | None = None) -> Converted:
  """The checkpoint file at `path` converted: see `convert`; with the
  config.json beside it where its converter reads one (transformers'
  decoders: their heads, RoPE and norm epsilon are in it, not in the
  weights).

  Args:
    path: a .safetensors, .pth/.pt/.bin or .npz file; local, or a URL such
      as gs://BUCKET/file.npz (see `files.read`).
    source: as in `convert`; None: detected.
    name: as in `convert`; None: the file's model.
    num_classes: as in `convert`; None: the file's.
    image_size: as in `convert`; None: the file's.

  Returns:
    The Converted model.

  Raises:
    ConversionError: the file cannot be read (missing, another extension,
      damaged; .pth without torch) or converted (see `convert`).
  """
  tensors = files.read(path)
  module = converter(tensors)
  config = (module.read_config(path) if hasattr(module, 'read_config')
            else None)
  return convert(tensors, source, os.fspath(path), name, num_classes,
                 image_size, config)


__all__ = ['CONVERTERS', 'ConversionError', 'Converted', 'SOURCES',
           'convert', 'converter', 'detect', 'load']

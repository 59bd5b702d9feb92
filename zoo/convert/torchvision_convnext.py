"""torchvision's ConvNeXt-T/S/B/L state dicts (and ConvNeXts of other depths
and widths) to the zoo's convnext_*.

torchvision's ConvNeXt (torchvision/models/convnext.py) is timm's under
other names, so timm_convnext.Layout converts it: `features.0.0` (the stem's
4x4 conv) and `features.0.1` (its layer norm); stage i's blocks in
`features.{2i+1}.{j}`, each with `layer_scale` (C, 1, 1) and `block.0` (7x7
depthwise conv), `block.2` (layer norm), `block.3` and `block.5` (the MLP's
linears; 1 and 4 are the permutation and the GELU); the downsampling before
stage i in `features.{2i}.0` (layer norm) and `.1` (2x2 conv); the head's
`classifier.0` (layer norm) and `classifier.2` (linear).
"""

from typing import Any, Mapping

import numpy as np

from zoo.convert import timm_convnext
from zoo.convert.transfer import Converted

SOURCE = 'torchvision'
LAYOUT = timm_convnext.Layout(
    SOURCE, stem=('features.0.0', 'features.0.1'),
    downsample=lambda i: (f'features.{2 * i}.0', f'features.{2 * i}.1'),
    block=lambda i, j: f'features.{2 * i + 1}.{j}',
    parts=('layer_scale', 'block.0', 'block.2', 'block.3', 'block.5'),
    head=('classifier.0', 'classifier.2'), layer_scale_ndim=3)


def matches(tensors: Mapping[str, np.ndarray]) -> bool:
  """Whether `tensors` are named as a torchvision ConvNeXt state dict.

  Args:
    tensors: a checkpoint's tensors by name.

  Returns:
    True if the names are this source's ('features.0.0.weight' and
    'features.1.0.layer_scale').
  """
  return LAYOUT.matches(tensors)


def convert(tensors: Mapping[str, np.ndarray], file: str,
            name: str | None = None, num_classes: int | None = None,
            image_size: int | None = None) -> Converted:
  """The zoo ConvNeXt `name` (default: the file's size) with the file's
  weights; a head of another `num_classes` is left to initialization.

  Args:
    tensors: the state dict's tensors by name.
    file: what to call the file in error messages.
    name: a zoo ConvNeXt ('convnext_tiny'; torchvision's names are the
      same); None: the registered one of the file's sizes. Needed for a file
      of other sizes.
    num_classes: the model's classes (0: none, the pooled features); None:
      the file's.
    image_size: ignored: a ConvNeXt takes any image size.

  Returns:
    The Converted ConvNeXt; its kwargs fix num_classes and, for a file of
    sizes no registered ConvNeXt has, depths and dims.

  Raises:
    ConversionError: `name` is not a ConvNeXt, the file's sizes are none
      of the zoo's and no `name` is given, or a tensor does not fit.
    ValueError: `name` is not a known model.
  """
  del image_size  # A ConvNeXt takes any image size.
  return LAYOUT.convert(tensors, file, name, num_classes)


def template(name: str, kwargs: Mapping[str, Any]) -> dict[str, tuple]:
  """The names and shapes of torchvision's state dict of the zoo ConvNeXt
  `name` with `kwargs`, in torchvision's order (for zoo/convert/export.py).

  Args:
    name: a zoo ConvNeXt's name.
    kwargs: its `zoo.create` arguments.

  Returns:
    {tensor name: shape}.

  Raises:
    ConversionError: the model is not a ConvNeXt, or has no classifier
      (features=True or num_classes=0), which the file has.
  """
  return LAYOUT.template(name, kwargs)

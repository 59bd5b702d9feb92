"""timm's ConvNeXt state dicts (convnext_tiny, _small, _base, _large, and
ConvNeXts of other depths and widths) to the zoo's convnext_*.

timm's names (timm/models/convnext.py, `ConvNeXt` with the default
conv_mlp=False): the stem `stem.0` (4x4 conv) and `stem.1` (layer norm);
stage i's `stages.{i}.downsample.0` (layer norm) and `.1` (2x2 conv), none in
stage 0; its blocks `stages.{i}.blocks.{j}` with `gamma` (the layer scale,
(C,)), `conv_dw` (7x7 depthwise conv), `norm`, `mlp.fc1`, `mlp.fc2`; the
head's `head.norm` and classifier `head.fc` (none with num_classes=0).
Layer norms have epsilon 1e-6 and the MLP the exact GELU there as here, so
the conversion is exact.

torchvision's ConvNeXt is the same net under other names
(torchvision_convnext.py): `Layout` says where a state dict keeps each
layer, and converts and describes either.
"""

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

from zoo import registry
from zoo.convert import heads, variants
from zoo.convert.transfer import (ConversionError, Converted, Transfer,
                                  check_family, target_shapes)
from zoo.convnext import ConvNeXt

SOURCE = 'timm'
_CONV = (2, 3, 1, 0)  # (out, in, h, w) -> (h, w, in, out)
_LINEAR = (1, 0)
_LAYER_SCALE = 'layer scale'  # Reshaped to (C,) from the file's shape.


@dataclasses.dataclass(frozen=True)
class Layout:
  """Where a ConvNeXt state dict keeps each layer, by the prefix of its
  tensors' names (a layer's are '{prefix}.weight' and '{prefix}.bias').

  Attributes:
    source: the library ('timm').
    stem: the stem's conv and layer norm.
    downsample: stage i -> its downsampling layer norm and conv (i > 0).
    block: (stage i, block j) -> the block's prefix.
    parts: within a block: the layer scale (the tensor itself), the
      depthwise conv, the layer norm, the MLP's first and second linear.
    head: the head's layer norm and classifier.
    layer_scale_ndim: the layer scale's dimensions, (C,) or (C, 1, 1).
  """

  source: str
  stem: tuple[str, str]
  downsample: Callable[[int], tuple[str, str]]
  block: Callable[[int, int], str]
  parts: tuple[str, str, str, str, str]
  head: tuple[str, str]
  layer_scale_ndim: int

  def matches(self, tensors: Mapping[str, np.ndarray]) -> bool:
    """Whether `tensors` are named as this layout's state dict.

    Args:
      tensors: a checkpoint's tensors by name.

    Returns:
      True if it has the stem's conv and the first block's layer scale.
    """
    return (f'{self.stem[0]}.weight' in tensors and
            f'{self.block(0, 0)}.{self.parts[0]}' in tensors)

  def sizes(self, tensors: Mapping[str, np.ndarray]
            ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(blocks per stage, width per stage) of the file.

    Args:
      tensors: a checkpoint's tensors by name, of this layout.

    Returns:
      (depths, dims), counted from the depthwise convs.
    """
    depths, dims = [], []

    def conv_dw(i, j):
      return f'{self.block(i, j)}.{self.parts[1]}.weight'

    while conv_dw(len(depths), 0) in tensors:
      stage, depth = len(depths), 0
      while conv_dw(stage, depth) in tensors:
        depth += 1
      depths.append(depth)
      dims.append(int(tensors[conv_dw(stage, 0)].shape[0]))
    return tuple(depths), tuple(dims)

  def tensors(self, depths) -> list[tuple[str, str, Any]]:
    """(tensor, variable, axes) of every tensor but the classifier's, in
    the state dict's order; axes as `Transfer.move` takes them, or
    _LAYER_SCALE.

    Args:
      depths: the blocks of each stage.

    Returns:
      The tensors' names, their variables ('params/...') and axes.
    """
    entries = []

    def add(source, target, weight, axes):
      entries.append((f'{source}.weight', f'params/{target}/{weight}', axes))
      entries.append((f'{source}.bias', f'params/{target}/bias', None))

    gamma, conv_dw, norm, fc1, fc2 = self.parts
    add(self.stem[0], 'stem_conv', 'kernel', _CONV)
    add(self.stem[1], 'stem_norm', 'scale', None)
    for i, depth in enumerate(depths):
      if i:
        downsample_norm, downsample_conv = self.downsample(i)
        add(downsample_norm, f'stage{i}/downsample_norm', 'scale', None)
        add(downsample_conv, f'stage{i}/downsample_conv', 'kernel', _CONV)
      for j in range(depth):
        source, target = self.block(i, j), f'stage{i}/block{j}'
        entries.append((f'{source}.{gamma}', f'params/{target}/gamma',
                        _LAYER_SCALE))
        add(f'{source}.{conv_dw}', f'{target}/conv_dw', 'kernel', _CONV)
        add(f'{source}.{norm}', f'{target}/norm', 'scale', None)
        add(f'{source}.{fc1}', f'{target}/fc1', 'kernel', _LINEAR)
        add(f'{source}.{fc2}', f'{target}/fc2', 'kernel', _LINEAR)
    add(self.head[0], 'head_norm', 'scale', None)
    return entries

  def convert(self, tensors: Mapping[str, np.ndarray], file: str,
              name: str | None, num_classes: int | None) -> Converted:
    """The zoo ConvNeXt `name` with the file's weights (see `convert`)."""
    depths, dims = self.sizes(tensors)
    name, sizes = variants.convnext(file, name, depths, dims)
    classifier = self.head[1]
    file_classes, num_classes = heads.classes(tensors, f'{classifier}.bias',
                                              file, num_classes)
    kwargs = {'num_classes': num_classes, **sizes}
    t = Transfer(tensors, target_shapes(name, kwargs), file, name)
    for tensor, target, axes in self.tensors(_depths(name, kwargs)):
      if axes == _LAYER_SCALE:
        width = t.targets[target][0]
        t.move(tensor, target, shape=self._layer_scale(width),
               convert=lambda gamma: gamma.reshape(-1))
      else:
        t.move(tensor, target, axes)
    heads.move(t, f'{classifier}.weight', f'{classifier}.bias',
               'params/head', _LINEAR, file_classes, num_classes)
    return t.finish(name, kwargs, self.source)

  def template(self, name: str,
               kwargs: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The names and shapes of the state dict of the zoo ConvNeXt `name`
    with `kwargs` (see `template`)."""
    check_family(name, ConvNeXt, f'{self.source} ConvNeXt')
    if kwargs.get('features') or not kwargs.get('num_classes'):
      raise ConversionError(f'a {self.source} ConvNeXt file holds a '
                            'classifier; this model has none (features=True '
                            'or num_classes=0).')
    targets = target_shapes(name, kwargs)
    shapes = {}
    for tensor, target, axes in self.tensors(_depths(name, kwargs)):
      want = targets[target]
      if axes == _LAYER_SCALE:
        shapes[tensor] = self._layer_scale(want[0])
      else:
        shape = [0] * len(want)
        for i, axis in enumerate(axes or range(len(want))):
          shape[axis] = want[i]
        shapes[tensor] = tuple(shape)
    width, num_classes = targets['params/head/kernel']
    shapes[f'{self.head[1]}.weight'] = (num_classes, width)
    shapes[f'{self.head[1]}.bias'] = (num_classes,)
    return shapes

  def _layer_scale(self, width: int) -> tuple[int, ...]:
    return (width,) + (1,) * (self.layer_scale_ndim - 1)


def _depths(name: str, kwargs: Mapping[str, Any]) -> tuple[int, ...]:
  """The blocks per stage of `zoo.create(name, **kwargs)`."""
  return tuple({**registry.spec(name).defaults, **kwargs}['depths'])


LAYOUT = Layout(
    SOURCE, stem=('stem.0', 'stem.1'),
    downsample=lambda i: (f'stages.{i}.downsample.0',
                          f'stages.{i}.downsample.1'),
    block=lambda i, j: f'stages.{i}.blocks.{j}',
    parts=('gamma', 'conv_dw', 'norm', 'mlp.fc1', 'mlp.fc2'),
    head=('head.norm', 'head.fc'), layer_scale_ndim=1)


def matches(tensors: Mapping[str, np.ndarray]) -> bool:
  """Whether `tensors` are named as a timm ConvNeXt state dict.

  Args:
    tensors: a checkpoint's tensors by name.

  Returns:
    True if the names are this source's ('stem.0.weight' and
    'stages.0.blocks.0.gamma').
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
    name: a zoo ConvNeXt ('convnext_tiny') or timm's name, with or without
      a pretrained tag ('convnext_tiny.fb_in22k_ft_in1k'); None: the
      registered one of the file's sizes. Needed for a file of other sizes.
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
  """The names and shapes of timm's state dict of the zoo ConvNeXt `name`
  with `kwargs`, in timm's order (for zoo/convert/export.py).

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

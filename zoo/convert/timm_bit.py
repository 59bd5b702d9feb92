"""timm's BiT state dicts (resnetv2_{50x1,50x3,101x1,101x3,152x2,152x4}_bit)
to the zoo's bit_*.

timm's names (timm/models/resnetv2.py, `ResNetV2` with
`PreActBottleneck`s): the stem's `stem.conv`, then
`stages.{i}.blocks.{j}.norm1`, `conv1`, `norm2`, `conv2`, `norm3`, `conv3`
and, in each stage's first block, the shortcut's `downsample.conv`; the
final `norm` and the classifier `head.fc`, a 1x1 conv on the pooled
features. Its BiT models are built with stem_type='fixed' (the max-pool
padded with zeros) and StdConv2d(eps=1e-8), so the converted model has
pool_padding='zeros' and std_conv_eps=1e-8; group norms have 32 groups and
epsilon 1e-5 there as here. Conv weights (out, in, h, w) become kernels
(h, w, in, out); group norms' `weight` and `bias` their `scale` and `bias`.
timm's ResNetV2 with batch norm (resnetv2_50, resnetv2_50d, ...) is not BiT.
"""

from typing import Any, Mapping

import numpy as np

from zoo import registry
from zoo.bit import BiT
from zoo.convert import heads, variants
from zoo.convert.transfer import (ConversionError, Converted, Transfer,
                                  check_family, target_shapes)

SOURCE = 'timm'
# What timm's resnetv2_*_bit compute (`_create_resnetv2_bit`).
OPTIONS = {'std_conv_eps': 1e-8, 'pool_padding': 'zeros'}
_CONV = (2, 3, 1, 0)  # (out, in, h, w) -> (h, w, in, out)


def matches(tensors: Mapping[str, np.ndarray]) -> bool:
  """Whether `tensors` are named as a timm ResNetV2 state dict (its 7x7
  stem and pre-activation bottlenecks).

  Args:
    tensors: a checkpoint's tensors by name.

  Returns:
    True if the names are this source's.
  """
  return ('stem.conv.weight' in tensors
          and 'stages.0.blocks.0.conv3.weight' in tensors)


def sizes(tensors: Mapping[str, np.ndarray],
          file: str) -> tuple[tuple[int, ...], int]:
  """(blocks per stage, width) of timm's ResNetV2 state dict `tensors`.

  Args:
    tensors: the state dict's tensors by name.
    file: what to call the file in error messages.

  Returns:
    The blocks of each stage, and the stem's output channels (the zoo's
    `width`).

  Raises:
    ConversionError: the net has batch norm (timm's resnetv2_50 and
      relatives), not BiT's group norm.
  """
  if 'stages.0.blocks.0.norm1.running_mean' in tensors:
    raise ConversionError(
        f'{file} is a timm ResNetV2 with batch norm (it has '
        "'stages.0.blocks.0.norm1.running_mean'), not a BiT with group "
        'norm.')
  stage_sizes = []
  while f'stages.{len(stage_sizes)}.blocks.0.conv1.weight' in tensors:
    i, count = len(stage_sizes), 0
    while f'stages.{i}.blocks.{count}.conv1.weight' in tensors:
      count += 1
    stage_sizes.append(count)
  return tuple(stage_sizes), int(tensors['stem.conv.weight'].shape[0])


def template(name: str, kwargs: Mapping[str, Any]) -> dict[str, tuple]:
  """The names and shapes of timm's state dict of the zoo BiT `name` with
  `kwargs`, in timm's order (for zoo/convert/export.py).

  Args:
    name: a bit_* name.
    kwargs: its `zoo.create` arguments.

  Returns:
    {tensor name: shape}.

  Raises:
    ConversionError: `name` is not a BiT.
  """
  check_family(name, BiT, 'timm BiT')
  model = registry.create(name, **kwargs)
  width = model.width
  shapes = {'stem.conv.weight': (width, 3, 7, 7)}
  channels = width
  for i, num_blocks in enumerate(model.stage_sizes):
    mid = width * 2**i
    for j in range(num_blocks):
      source = f'stages.{i}.blocks.{j}'
      if j == 0:  # timm's first block of a stage always projects.
        shapes[f'{source}.downsample.conv.weight'] = (4 * mid, channels, 1, 1)
      for c, (out, inp, size) in enumerate(
          ((mid, channels, 1), (mid, mid, 3), (4 * mid, mid, 1)), 1):
        shapes[f'{source}.norm{c}.weight'] = (inp,)
        shapes[f'{source}.norm{c}.bias'] = (inp,)
        shapes[f'{source}.conv{c}.weight'] = (out, inp, size, size)
      channels = 4 * mid
  shapes['norm.weight'] = shapes['norm.bias'] = (channels,)
  if model.num_classes:
    shapes['head.fc.weight'] = (model.num_classes, channels, 1, 1)
    shapes['head.fc.bias'] = (model.num_classes,)
  return shapes


def convert(tensors: Mapping[str, np.ndarray], file: str,
            name: str | None = None, num_classes: int | None = None,
            image_size: int | None = None) -> Converted:
  """The zoo BiT `name` (default: the file's size) with the file's weights;
  a head of another `num_classes` is left to initialization.

  Args:
    tensors: the state dict's tensors by name.
    file: what to call the file in error messages.
    name: a bit_* name or timm's ('resnetv2_50x1_bit.goog_in21k'); None:
      the registered BiT of the file's sizes. A BiT of other sizes needs a
      name and keeps its sizes (see variants.bit).
    num_classes: the model's classes (0: no head); None: the file's.
    image_size: ignored: BiT takes any image size.

  Returns:
    The Converted BiT; its kwargs fix num_classes, std_conv_eps and
    pool_padding (timm's), and the file's stage_sizes and width where no
    registered BiT has them.

  Raises:
    ConversionError: the file is a ResNetV2 with batch norm, `name` is not
      a BiT, or a tensor does not fit.
    ValueError: `name` is not a known model.
  """
  del image_size  # BiT takes any image size.
  name, kwargs = variants.bit(file, name, *sizes(tensors, file))
  file_classes, num_classes = heads.classes(tensors, 'head.fc.bias', file,
                                            num_classes)
  kwargs = {'num_classes': num_classes, **kwargs, **OPTIONS}
  t = Transfer(tensors, target_shapes(name, kwargs), file, name)
  model = registry.create(name, **kwargs)

  t.move('stem.conv.weight', 'params/StdConv_0/kernel', _CONV)
  k = 0
  for i, num_blocks in enumerate(model.stage_sizes):
    for j in range(num_blocks):
      source, target = f'stages.{i}.blocks.{j}', f'params/PreActBottleneck_{k}'
      if f'{target}/proj_conv/kernel' in t.targets:
        t.move(f'{source}.downsample.conv.weight', f'{target}/proj_conv/kernel',
               _CONV)
      for c in range(3):
        t.move(f'{source}.norm{c + 1}.weight', f'{target}/GroupNorm_{c}/scale')
        t.move(f'{source}.norm{c + 1}.bias', f'{target}/GroupNorm_{c}/bias')
        t.move(f'{source}.conv{c + 1}.weight', f'{target}/StdConv_{c}/kernel',
               _CONV)
      k += 1
  t.move('norm.weight', 'params/final_norm/scale')
  t.move('norm.bias', 'params/final_norm/bias')
  if num_classes and file_classes == num_classes:
    # A 1x1 conv on the pooled features: its (classes, features, 1, 1).
    t.move('head.fc.weight', 'params/head/kernel',
           shape=(num_classes, model.width * 2**(len(model.stage_sizes) + 1),
                  1, 1),
           convert=lambda w: w[:, :, 0, 0].T)
    t.move('head.fc.bias', 'params/head/bias')
  else:
    heads.move(t, 'head.fc.weight', 'head.fc.bias', 'params/head', (1, 0),
               file_classes, num_classes)
  return t.finish(name, kwargs, SOURCE)

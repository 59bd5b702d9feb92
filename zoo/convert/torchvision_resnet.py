"""torchvision's ResNet-18/34/50/101/152 state dicts to the zoo's resnet*.

The zoo's ImageNet ResNets are torchvision's function for function (v1.5:
the stride on the bottleneck's 3x3 conv; 1-pixel padding; BatchNorm epsilon
1e-5), so the conversion is exact. torchvision's names
(torchvision/models/resnet.py): `conv1`, `bn1`, `layer{1..4}.{j}.conv{1,2,3}`
and `bn{1,2,3}`, the projection shortcut `downsample.0` (1x1 conv) and
`downsample.1` (its BatchNorm), the classifier `fc`. A BatchNorm's `weight`,
`bias`, `running_mean`, `running_var` become the zoo's `scale`, `bias` and
batch statistics `mean`, `var`; its step counter `num_batches_tracked` is not
needed. Conv weights (out, in, h, w) become kernels (h, w, in, out), linear
weights (out, in) kernels (in, out).
"""

from typing import Any, Mapping

import numpy as np

from zoo import registry
from zoo.convert import heads
from zoo.convert.transfer import (ConversionError, Converted, Transfer,
                                  target_shapes)

SOURCE = 'torchvision'

# (blocks per stage, bottleneck?) -> the zoo's model.
MODELS = {
    ((2, 2, 2, 2), False): 'resnet18',
    ((3, 4, 6, 3), False): 'resnet34',
    ((3, 4, 6, 3), True): 'resnet50',
    ((3, 4, 23, 3), True): 'resnet101',
    ((3, 8, 36, 3), True): 'resnet152',
}
_CONV = (2, 3, 1, 0)  # (out, in, h, w) -> (h, w, in, out)
_LINEAR = (1, 0)


def matches(tensors: Mapping[str, np.ndarray]) -> bool:
  """Whether `tensors` are named as a torchvision ResNet state dict.

  Args:
    tensors: a checkpoint's tensors by name.

  Returns:
    True if the names are this source's.
  """
  return 'conv1.weight' in tensors and 'layer1.0.conv1.weight' in tensors


def architecture(tensors: Mapping[str, np.ndarray], file: str) -> str:
  """The zoo's name for the ResNet whose state dict `tensors` is.

  Args:
    tensors: a torchvision ResNet state dict.
    file: what to call the file in error messages.

  Returns:
    One of MODELS' names, from the blocks per stage and the block type.

  Raises:
    ConversionError: the stages are not those of ResNet-18/34/50/101/152.
  """
  stages = []
  for i in range(1, 5):
    count = 0
    while f'layer{i}.{count}.conv1.weight' in tensors:
      count += 1
    stages.append(count)
  bottleneck = 'layer1.0.conv3.weight' in tensors
  name = MODELS.get((tuple(stages), bottleneck))
  if name is None:
    raise ConversionError(
        f'{file} is not a torchvision ResNet-18/34/50/101/152: its stages '
        f'have {tuple(stages)} {"bottleneck" if bottleneck else "basic"} '
        'blocks.')
  return name


def template(name: str, kwargs: Mapping[str, Any]) -> dict[str, tuple]:
  """The names and shapes of torchvision's state dict of the zoo ResNet
  `name` with `kwargs`, in torchvision's order (for zoo/convert/export.py).

  Args:
    name: one of MODELS' names.
    kwargs: its `zoo.create` arguments.

  Returns:
    {tensor name: shape}.

  Raises:
    ConversionError: `name` is not one of MODELS' (another family).
  """
  if name not in MODELS.values():
    raise ConversionError(f'{name} is not a torchvision ResNet.')
  shapes = {}

  def conv(source, out, inp, size):
    shapes[f'{source}.weight'] = (out, inp, size, size)

  def batch_norm(source, channels):
    for leaf in ('weight', 'bias', 'running_mean', 'running_var'):
      shapes[f'{source}.{leaf}'] = (channels,)
    shapes[f'{source}.num_batches_tracked'] = ()

  model = registry.create(name, **kwargs)
  width = model.num_filters
  bottleneck = model.block_cls.__name__ == 'Bottleneck'
  expansion = 4 if bottleneck else 1
  conv('conv1', width, 3, 7)
  batch_norm('bn1', width)
  channels = width
  for i, num_blocks in enumerate(model.stage_sizes, 1):
    planes = width * 2**(i - 1)
    for j in range(num_blocks):
      source = f'layer{i}.{j}'
      sizes = ((planes, channels, 1), (planes, planes, 3),
               (planes * 4, planes, 1)) if bottleneck else (
                   (planes, channels, 3), (planes, planes, 3))
      for c, (out, inp, size) in enumerate(sizes, 1):
        conv(f'{source}.conv{c}', out, inp, size)
        batch_norm(f'{source}.bn{c}', out)
      if j == 0 and (i > 1 or channels != planes * expansion):
        conv(f'{source}.downsample.0', planes * expansion, channels, 1)
        batch_norm(f'{source}.downsample.1', planes * expansion)
      channels = planes * expansion
  shapes['fc.weight'] = (model.num_classes, channels)
  shapes['fc.bias'] = (model.num_classes,)
  return shapes


def convert(tensors: Mapping[str, np.ndarray], file: str,
            name: str | None = None, num_classes: int | None = None,
            image_size: int | None = None) -> Converted:
  """The zoo ResNet `name` (default: the file's depth) with the file's
  weights; a head of another `num_classes` is left to initialization.

  Args:
    tensors: the state dict's tensors by name.
    file: what to call the file in error messages.
    name: one of MODELS' names ('resnet50'); None: the file's.
    num_classes: the model's classes; None: the file's.
    image_size: ignored: a ResNet takes any image size.

  Returns:
    The Converted ResNet, its params and batch_stats; its kwargs fix
    num_classes only.

  Raises:
    ConversionError: the file is not a ResNet-18/34/50/101/152, `name` is
      not an ImageNet ResNet, or a tensor does not fit `name`.
    ValueError: `name` is not a known model.
  """
  del image_size  # A ResNet takes any image size.
  name = name or architecture(tensors, file)
  spec = registry.spec(name)
  block = spec.defaults.get('block_cls')
  if block is None or spec.defaults.get('small_inputs'):
    raise ConversionError(f'{file} is a torchvision ResNet; it converts to '
                          f'{", ".join(MODELS.values())}, not {name!r}.')
  file_classes, num_classes = heads.classes(tensors, 'fc.bias', file,
                                            num_classes)
  kwargs = {'num_classes': num_classes}
  t = Transfer(tensors, target_shapes(name, kwargs), file, name)

  def batch_norm(source: str, target: str):
    t.move(f'{source}.weight', f'params/{target}/scale')
    t.move(f'{source}.bias', f'params/{target}/bias')
    t.move(f'{source}.running_mean', f'batch_stats/{target}/mean')
    t.move(f'{source}.running_var', f'batch_stats/{target}/var')
    if t.has(f'{source}.num_batches_tracked'):
      t.ignore(f'{source}.num_batches_tracked', 'a step counter')

  t.move('conv1.weight', 'params/Conv_0/kernel', _CONV)
  batch_norm('bn1', 'BatchNorm_0')
  convs = 3 if block.__name__ == 'Bottleneck' else 2
  k = 0
  for i, num_blocks in enumerate(spec.defaults['stage_sizes'], 1):
    for j in range(num_blocks):
      source, target = f'layer{i}.{j}', f'{block.__name__}_{k}'
      for c in range(convs):
        t.move(f'{source}.conv{c + 1}.weight',
               f'params/{target}/Conv_{c}/kernel', _CONV)
        batch_norm(f'{source}.bn{c + 1}', f'{target}/BatchNorm_{c}')
      if f'params/{target}/proj_conv/kernel' in t.targets:
        t.move(f'{source}.downsample.0.weight',
               f'params/{target}/proj_conv/kernel', _CONV)
        batch_norm(f'{source}.downsample.1', f'{target}/proj_bn')
      k += 1
  heads.move(t, 'fc.weight', 'fc.bias', 'params/Dense_0', _LINEAR,
             file_classes, num_classes)
  return t.finish(name, kwargs, SOURCE)

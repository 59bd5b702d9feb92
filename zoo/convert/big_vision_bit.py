"""BiT's .npz checkpoints, as the paper published them (BiT-M-R50x1.npz, ...)
and as big_vision's BiT model saves them, to the zoo's bit_*.

The published files (google-research/big_transfer; timm's `_load_weights`
in timm/models/resnetv2.py reads them) hold, with prefix 'resnet/':

    root_block/standardized_conv2d/kernel        the stem conv (7, 7, 3, w)
    block{i}/unit{jj}/{a,b,c}/group_norm/gamma, beta
                                                 the norm before conv 1, 2, 3
    block{i}/unit{jj}/{a,b,c}/standardized_conv2d/kernel
    block{i}/unit{jj}/a/proj/standardized_conv2d/kernel
                                                 the shortcut's 1x1 conv
    group_norm/gamma, beta                       the final norm
    head/conv2d/kernel (1, 1, features, classes), head/conv2d/bias

(i from 1, jj from 01; some files number a conv 'standardized_conv2d_1',
which big_vision's loader renames, and so does this one.) big_vision's own
model (big_vision/models/bit_paper.py, whose
`maybe_convert_big_transfer_format` maps the names above to it) names them
root_block/conv_root/kernel, block{i}/unit{jj}/gn{1,2,3}/scale and bias
(shaped (1, 1, 1, channels)), conv{1,2,3}/kernel, conv_proj/kernel,
norm-pre-head/scale and bias, and a dense head/kernel (features, classes),
head/bias; under a 'params/' or 'opt/target/' prefix in its checkpoints.
(big_vision/models/bit.py is another model, a ResNet v1 with group norm.)

Both standardize conv kernels with epsilon 1e-10, so the converted model has
std_conv_eps=1e-10. The original code pads the stem's max-pool with zeros
(pool_padding='zeros'); big_vision's model with Flax's max_pool, whose
padding never wins (pool_padding='ignored'), so a file in its layout
converts to that.
"""

import re
from typing import Mapping

import numpy as np

from zoo import registry
from zoo.convert import heads, variants
from zoo.convert.transfer import (ConversionError, Converted, Transfer,
                                  target_shapes)

SOURCE = 'big_vision'
_PREFIXES = ('', 'params/', 'opt/target/')
# Each part's name in a unit or at the top: (published, big_vision's), with
# {abc} the conv's letter and {n} its number.
_PARTS = {
    'stem': ('root_block/standardized_conv2d/kernel',
             'root_block/conv_root/kernel'),
    'conv': ('{abc}/standardized_conv2d/kernel', 'conv{n}/kernel'),
    'scale': ('{abc}/group_norm/gamma', 'gn{n}/scale'),
    'bias': ('{abc}/group_norm/beta', 'gn{n}/bias'),
    'proj': ('a/proj/standardized_conv2d/kernel', 'conv_proj/kernel'),
    'final_scale': ('group_norm/gamma', 'norm-pre-head/scale'),
    'final_bias': ('group_norm/beta', 'norm-pre-head/bias'),
    'head_kernel': ('head/conv2d/kernel', 'head/kernel'),
    'head_bias': ('head/conv2d/bias', 'head/bias'),
}
_PUBLISHED = 'resnet/'
_NUMBERED = re.compile(r'/standardized_conv2d_\d+/')
EPS = 1e-10


def _names(tensors: Mapping[str, np.ndarray]) -> dict[str, str]:
  """{name with the convs unnumbered: the file's name}."""
  return {_NUMBERED.sub('/standardized_conv2d/', k): k for k in tensors}


def _prefix(tensors: Mapping[str, np.ndarray]) -> str | None:
  """'resnet/' for the published layout, big_vision's prefix for its own;
  None for neither."""
  if f'{_PUBLISHED}{_PARTS["stem"][0]}' in _names(tensors):
    return _PUBLISHED
  return next((p for p in _PREFIXES if f'{p}{_PARTS["stem"][1]}' in tensors),
              None)


def matches(tensors: Mapping[str, np.ndarray]) -> bool:
  """Whether `tensors` are named as a published BiT .npz or big_vision's
  BiT checkpoint.

  Args:
    tensors: a checkpoint's tensors by name.

  Returns:
    True if the names are this source's.
  """
  return _prefix(tensors) is not None


def convert(tensors: Mapping[str, np.ndarray], file: str,
            name: str | None = None, num_classes: int | None = None,
            image_size: int | None = None) -> Converted:
  """The zoo BiT `name` (default: the file's size) with the file's weights;
  a head of another `num_classes` is left to initialization.

  Args:
    tensors: the checkpoint's tensors by name.
    file: what to call the file in error messages.
    name: a bit_* name or timm's ('resnetv2_50x1_bit'); None: the
      registered BiT of the file's sizes. A BiT of other sizes needs a name
      and keeps its sizes (see variants.bit).
    num_classes: the model's classes (0: no head); None: the file's.
    image_size: ignored: BiT takes any image size.

  Returns:
    The Converted BiT; its kwargs fix num_classes, std_conv_eps (1e-10),
    pool_padding ('zeros' for the published layout, 'ignored' for
    big_vision's), and the file's stage_sizes and width where no registered
    BiT has them.

  Raises:
    ConversionError: the file is not a BiT checkpoint, `name` is not a BiT,
      or a tensor does not fit.
    ValueError: `name` is not a known model.
  """
  del image_size  # BiT takes any image size.
  prefix = _prefix(tensors)
  if prefix is None:
    raise ConversionError(
        f'{file} has no tensor {_PUBLISHED + _PARTS["stem"][0]!r} or '
        f'{_PARTS["stem"][1]!r}: not a BiT checkpoint.')
  published = prefix == _PUBLISHED
  names = _names(tensors)

  def part(key: str, unit: str = '', c: int = 0) -> str:
    """The file's name of `key` in `unit` (of conv c), or at the top."""
    path = prefix + unit + _PARTS[key][not published].format(abc='abc'[c],
                                                             n=c + 1)
    return names.get(path, path)

  def unit(i: int, j: int) -> str:
    return f'block{i + 1}/unit{j + 1:02d}/'

  stage_sizes = []
  while part('conv', unit(len(stage_sizes), 0)) in tensors:
    i, count = len(stage_sizes), 0
    while part('conv', unit(i, count)) in tensors:
      count += 1
    stage_sizes.append(count)
  width = int(tensors[part('stem')].shape[-1])
  name, kwargs = variants.bit(file, name, tuple(stage_sizes), width)
  file_classes, num_classes = heads.classes(tensors, part('head_bias'), file,
                                            num_classes)
  kwargs = {'num_classes': num_classes, **kwargs, 'std_conv_eps': EPS,
            'pool_padding': 'zeros' if published else 'ignored'}
  t = Transfer(tensors, target_shapes(name, kwargs), file, name)
  model = registry.create(name, **kwargs)

  def vector(source: str, target: str):
    """A norm's (channels,); big_vision's are (1, 1, 1, channels)."""
    if published:
      t.move(source, target)
    else:
      want = t.targets[target]
      t.move(source, target, shape=(1, 1, 1, *want),
             convert=lambda x: x.reshape(want))

  t.move(part('stem'), 'params/StdConv_0/kernel')
  k = 0
  for i, num_blocks in enumerate(model.stage_sizes):
    for j in range(num_blocks):
      source, target = unit(i, j), f'params/PreActBottleneck_{k}'
      if f'{target}/proj_conv/kernel' in t.targets:
        t.move(part('proj', source), f'{target}/proj_conv/kernel')
      for c in range(3):
        vector(part('scale', source, c), f'{target}/GroupNorm_{c}/scale')
        vector(part('bias', source, c), f'{target}/GroupNorm_{c}/bias')
        t.move(part('conv', source, c), f'{target}/StdConv_{c}/kernel')
      k += 1
  vector(part('final_scale'), 'params/final_norm/scale')
  vector(part('final_bias'), 'params/final_norm/bias')
  weight, bias = part('head_kernel'), part('head_bias')
  if published and num_classes and file_classes == num_classes:
    # A 1x1 conv on the pooled features: (1, 1, features, classes).
    t.move(weight, 'params/head/kernel',
           shape=(1, 1, *t.targets['params/head/kernel']),
           convert=lambda w: w[0, 0])
    t.move(bias, 'params/head/bias')
  else:
    heads.move(t, weight, bias, 'params/head', (0, 1), file_classes,
               num_classes)
  return t.finish(name, kwargs, SOURCE)

"""timm's MLP-Mixer state dicts (mixer_s16_224, mixer_b16_224,
mixer_l16_224 and the other patch sizes of those widths) to the zoo's
mixer_*.

timm's names (timm/models/mlp_mixer.py, `MlpMixer` with `MixerBlock`):
`stem.proj` (the patch conv), `blocks.{i}.norm1`, `mlp_tokens.fc1`, `fc2`
(the token-mixing MLP, over the patches), `norm2`, `mlp_channels.fc1`, `fc2`
(the channel-mixing MLP), the final `norm` and `head`. Layer norms have
epsilon 1e-6 there as here. timm's MLPs use the exact (erf) GELU, so the
converted model has gelu='exact'; the image size is the one the
token-mixing weights are made for.
"""

from typing import Any, Mapping

import numpy as np

from zoo import registry
from zoo.convert import heads, variants
from zoo.convert.transfer import Converted, Transfer, target_shapes

SOURCE = 'timm'
_CONV = (2, 3, 1, 0)  # (out, in, h, w) -> (h, w, in, out)
_LINEAR = (1, 0)
# A block's (timm, zoo) layer norms and MLPs.
_NORMS = (('norm1', 'LayerNorm_0'), ('norm2', 'LayerNorm_1'))
_MLPS = (('mlp_tokens', 'token_mixing'), ('mlp_channels', 'channel_mixing'))


def matches(tensors: Mapping[str, np.ndarray]) -> bool:
  """Whether `tensors` are named as a timm MLP-Mixer state dict.

  Args:
    tensors: a checkpoint's tensors by name.

  Returns:
    True if the names are this source's.
  """
  return ('stem.proj.weight' in tensors
          and 'blocks.0.mlp_tokens.fc1.weight' in tensors)


def template(name: str, kwargs: Mapping[str, Any]) -> dict[str, tuple]:
  """The names and shapes of timm's state dict of the zoo Mixer `name` with
  `kwargs`, in timm's order (for zoo/convert/export.py).

  Args:
    name: a registered mixer_* name.
    kwargs: its `zoo.create` arguments.

  Returns:
    {tensor name: shape}.

  Raises:
    ConversionError: `name` is not a Mixer.
  """
  variants.resolve_mixer('a timm file', name)
  model = registry.create(name, **kwargs)
  width, patch = model.hidden_size, model.patch_size
  tokens = (model.image_size // patch)**2
  shapes = {'stem.proj.weight': (width, 3, patch, patch),
            'stem.proj.bias': (width,)}

  def linear(prefix: str, out: int, inputs: int):
    shapes[f'{prefix}.weight'] = (out, inputs)
    shapes[f'{prefix}.bias'] = (out,)

  def norm(prefix: str):
    shapes[f'{prefix}.weight'] = (width,)
    shapes[f'{prefix}.bias'] = (width,)

  for i in range(model.num_layers):
    block = f'blocks.{i}'
    norm(f'{block}.norm1')
    linear(f'{block}.mlp_tokens.fc1', model.tokens_mlp_dim, tokens)
    linear(f'{block}.mlp_tokens.fc2', tokens, model.tokens_mlp_dim)
    norm(f'{block}.norm2')
    linear(f'{block}.mlp_channels.fc1', model.channels_mlp_dim, width)
    linear(f'{block}.mlp_channels.fc2', width, model.channels_mlp_dim)
  norm('norm')
  if model.num_classes:
    linear('head', model.num_classes, width)
  return shapes


def convert(tensors: Mapping[str, np.ndarray], file: str,
            name: str | None = None, num_classes: int | None = None,
            image_size: int | None = None) -> Converted:
  """The zoo Mixer `name` (default: the file's size) with the file's weights.

  Args:
    tensors: the checkpoint's tensors by name.
    file: what to call the file in error messages.
    name: a zoo Mixer ('mixer_b16') or timm's Mixer name (its patch size
      wins over the file's); None: the zoo Mixer of the file's sizes.
    num_classes: the model's classes; None: the file's (0, no head, for a
      file without one). Another number leaves the head to initialization.
    image_size: the model's input side, in pixels; None or the file's (the
      token-mixing weights fix it).

  Returns:
    The Converted Mixer; its kwargs fix num_classes, patch_size, image_size
    and gelu ('exact').

  Raises:
    ConversionError: no zoo Mixer has the file's sizes, `name` is not a
      Mixer, `image_size` is not the file's, or a tensor does not fit.
    ValueError: `name` is not a known model.
  """
  stem = tensors['stem.proj.weight']
  width, patch = int(stem.shape[0]), int(stem.shape[-1])
  depth = 0
  while f'blocks.{depth}.norm1.weight' in tensors:
    depth += 1
  tokens_mlp_dim, tokens = tensors['blocks.0.mlp_tokens.fc1.weight'].shape
  channels = tensors.get('blocks.0.mlp_channels.fc1.weight')
  channels_mlp_dim = int(channels.shape[0]) if channels is not None else 0
  if name:
    name, fixed = variants.resolve_mixer(file, name)
  else:
    name, fixed = variants.mixer(file, width, depth, int(tokens_mlp_dim),
                                 channels_mlp_dim), {}
  file_classes, num_classes = heads.classes(tensors, 'head.bias', file,
                                            num_classes)
  patch = fixed.get('patch_size', patch)
  kwargs = {'num_classes': num_classes, 'patch_size': patch,
            'image_size': variants.mixer_image_size(file, int(tokens), patch,
                                                    image_size),
            'gelu': 'exact'}
  t = Transfer(tensors, target_shapes(name, kwargs), file,
               f'{name} with {patch}x{patch} patches')

  t.move('stem.proj.weight', 'params/stem/kernel', _CONV)
  t.move('stem.proj.bias', 'params/stem/bias')
  for i in range(registry.spec(name).defaults['num_layers']):
    source, target = f'blocks.{i}', f'params/block{i}'
    for theirs, ours in _NORMS:
      t.move(f'{source}.{theirs}.weight', f'{target}/{ours}/scale')
      t.move(f'{source}.{theirs}.bias', f'{target}/{ours}/bias')
    for theirs, ours in _MLPS:
      for k in range(2):
        layer = f'{source}.{theirs}.fc{k + 1}'
        t.move(f'{layer}.weight', f'{target}/{ours}/Dense_{k}/kernel',
               _LINEAR)
        t.move(f'{layer}.bias', f'{target}/{ours}/Dense_{k}/bias')
  t.move('norm.weight', 'params/final_norm/scale')
  t.move('norm.bias', 'params/final_norm/bias')
  heads.move(t, 'head.weight', 'head.bias', 'params/head', _LINEAR,
             file_classes, num_classes)
  return t.finish(name, kwargs, SOURCE)

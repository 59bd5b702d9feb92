"""Google's MLP-Mixer .npz checkpoints (the paper's, gs://mixer_models/, and
big_vision's) to the zoo's mixer_*.

An .npz holds one array per parameter, named by its '/'-joined path in the
Flax model (google-research/vision_transformer vit_jax/models_mixer.py;
big_vision/models/mlp_mixer.py names them the same):

    stem/kernel, stem/bias                 the patch conv (p, p, 3, width)
    MixerBlock_{i}/LayerNorm_0             before the token mixing
    MixerBlock_{i}/token_mixing/Dense_0, Dense_1
                                           kernels (patches, tokens_mlp_dim),
                                           (tokens_mlp_dim, patches)
    MixerBlock_{i}/LayerNorm_1             before the channel mixing
    MixerBlock_{i}/channel_mixing/Dense_0, Dense_1
    pre_head_layer_norm                    the final layer norm
    head/kernel, head/bias

big_vision's own checkpoints put them under 'params/' (or 'opt/target/',
Flax's old optimizer; its utils.load_params reads both). The zoo's Mixer has
the same layers under the zoo's names, so every array moves as it is. These
models use Flax's tanh-approximated GELU, so the converted model keeps
gelu='tanh'; the image size is the one the token-mixing weights are made
for.
"""

from typing import Mapping

import numpy as np

from zoo import registry
from zoo.convert import heads, variants
from zoo.convert.transfer import (ConversionError, Converted, Transfer,
                                  target_shapes)

SOURCE = 'big_vision'
_PREFIXES = ('', 'params/', 'opt/target/')
_FIRST_BLOCK = 'MixerBlock_0/token_mixing/Dense_0/kernel'
_MLPS = ('token_mixing', 'channel_mixing')


def _prefix(tensors: Mapping[str, np.ndarray]) -> str | None:
  for prefix in _PREFIXES:
    if (f'{prefix}stem/kernel' in tensors
        and f'{prefix}{_FIRST_BLOCK}' in tensors):
      return prefix
  return None


def matches(tensors: Mapping[str, np.ndarray]) -> bool:
  """Whether `tensors` are named as a Google or big_vision Mixer .npz.

  Any of the prefixes '', 'params/' and 'opt/target/' is taken.

  Args:
    tensors: a checkpoint's tensors by name.

  Returns:
    True if the names are this source's.
  """
  return _prefix(tensors) is not None


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
    and gelu ('tanh').

  Raises:
    ConversionError: the file is not such a Mixer, no zoo Mixer has its
      sizes, `name` is not a Mixer, `image_size` is not the file's, or a
      tensor does not fit.
    ValueError: `name` is not a known model.
  """
  p = _prefix(tensors)
  if p is None:
    raise ConversionError(f'{file} has no tensors \'stem/kernel\' and '
                          f'{_FIRST_BLOCK!r}: not an MLP-Mixer checkpoint of '
                          'Google\'s code or big_vision.')
  stem = tensors[f'{p}stem/kernel']
  width, patch = int(stem.shape[-1]), int(stem.shape[0])
  depth = 0
  while f'{p}MixerBlock_{depth}/LayerNorm_0/scale' in tensors:
    depth += 1
  tokens, tokens_mlp_dim = tensors[f'{p}{_FIRST_BLOCK}'].shape
  channels = tensors.get(f'{p}MixerBlock_0/channel_mixing/Dense_0/kernel')
  channels_mlp_dim = int(channels.shape[-1]) if channels is not None else 0
  if name:
    name, fixed = variants.resolve_mixer(file, name)
  else:
    name, fixed = variants.mixer(file, width, depth, int(tokens_mlp_dim),
                                 channels_mlp_dim), {}
  file_classes, num_classes = heads.classes(tensors, f'{p}head/bias', file,
                                            num_classes)
  patch = fixed.get('patch_size', patch)
  kwargs = {'num_classes': num_classes, 'patch_size': patch,
            'image_size': variants.mixer_image_size(file, int(tokens), patch,
                                                    image_size),
            'gelu': 'tanh'}
  t = Transfer(tensors, target_shapes(name, kwargs), file,
               f'{name} with {patch}x{patch} patches')

  for leaf in ('kernel', 'bias'):
    t.move(f'{p}stem/{leaf}', f'params/stem/{leaf}')
  for i in range(registry.spec(name).defaults['num_layers']):
    source, target = f'{p}MixerBlock_{i}', f'params/block{i}'
    for k in range(2):
      for leaf in ('scale', 'bias'):
        t.move(f'{source}/LayerNorm_{k}/{leaf}',
               f'{target}/LayerNorm_{k}/{leaf}')
      for mlp in _MLPS:
        for leaf in ('kernel', 'bias'):
          t.move(f'{source}/{mlp}/Dense_{k}/{leaf}',
                 f'{target}/{mlp}/Dense_{k}/{leaf}')
  for leaf in ('scale', 'bias'):
    t.move(f'{p}pre_head_layer_norm/{leaf}', f'params/final_norm/{leaf}')
  heads.move(t, f'{p}head/kernel', f'{p}head/bias', 'params/head', (0, 1),
             file_classes, num_classes)
  return t.finish(name, kwargs, SOURCE)

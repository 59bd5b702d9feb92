"""Which zoo model a file, or another library's model name, is.

timm's ViT names (`vit_tiny_patch16_224`, `vit_small_...`, `vit_base_...`,
`vit_large_...`, with or without a pretrained tag such as
`.augreg2_in21k_ft_in1k`) are the zoo's vit_ti16, vit_s16, vit_b16 and
vit_l16 with that patch size; torchvision's ResNet names are the zoo's.
"""

import re
from typing import Any

from zoo import registry
from zoo.convert.transfer import ConversionError

_TIMM_VIT = re.compile(r'^vit_(tiny|small|base|large)_patch(\d+)_(\d+)'
                       r'(\..*)?$')
_SIZES = {'tiny': 'vit_ti16', 'small': 'vit_s16', 'base': 'vit_b16',
          'large': 'vit_l16'}


def resolve(name: str) -> tuple[str, dict[str, Any]]:
  """(zoo name, keyword arguments the name fixes) of a zoo, timm or
  torchvision model name.

  Args:
    name: a zoo name ('vit_b16', 'resnet50'; torchvision's are the same) or
      timm's ViT name ('vit_base_patch32_384.augreg_in21k').

  Returns:
    (zoo name, kwargs): for a timm name, the zoo ViT of that width and
    {'patch_size': its patch}; else `name` and {}.

  Raises:
    ValueError: `name` is neither a timm ViT name nor a known model.
  """
  match = _TIMM_VIT.match(name)
  if match:
    return _SIZES[match[1]], {'patch_size': int(match[2])}
  registry.spec(name)  # A ValueError with the closest names if unknown.
  return name, {}


def vit(file: str, width: int, depth: int, mlp_dim: int,
        num_heads: int | None = None) -> str:
  """The registered ViT of these sizes.

  Args:
    file: what to call the file in error messages.
    width: the hidden size (embedding width).
    depth: the number of encoder blocks.
    mlp_dim: the MLP's hidden features.
    num_heads: the attention heads; None: any.

  Returns:
    The name of the first vit_* whose defaults have these sizes.

  Raises:
    ConversionError: no registered ViT has them.
  """
  for name in registry.list_models('vit_*'):
    d = registry.spec(name).defaults
    if (d.get('hidden_size'), d.get('num_layers'), d.get('mlp_dim')) == (
        width, depth, mlp_dim) and num_heads in (None, d.get('num_heads')):
      return name
  heads = f', {num_heads} heads' if num_heads else ''
  raise ConversionError(
      f'{file} is a ViT of width {width}, depth {depth}, MLP {mlp_dim}'
      f'{heads}: not one of the zoo\'s ViTs '
      f'({", ".join(registry.list_models("vit_*"))}).')


def check_vit(file: str, name: str):
  """Checks that the zoo model `name` is a ViT, for a ViT file.

  Args:
    file: what to call the file in error messages.
    name: a zoo name.

  Raises:
    ConversionError: `name` is not a ViT.
    ValueError: `name` is not a known model.
  """
  if 'hidden_size' not in registry.spec(name).defaults:
    raise ConversionError(f'{file} is a ViT; it converts to one of '
                          f'{", ".join(registry.list_models("vit_*"))}, not '
                          f'{name!r}.')


def check_image_size(image_size: int, patch_size: int):
  """Checks that images of `image_size` split into whole patches.

  Args:
    image_size: the input side, in pixels.
    patch_size: the patch side, in pixels.

  Raises:
    ConversionError: `image_size` is not a multiple of `patch_size`.
  """
  if image_size % patch_size:
    raise ConversionError(f'image size {image_size} is not a multiple of the '
                          f'patch size {patch_size}.')

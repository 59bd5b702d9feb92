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
  torchvision model name."""
  match = _TIMM_VIT.match(name)
  if match:
    return _SIZES[match[1]], {'patch_size': int(match[2])}
  registry.spec(name)  # A ValueError with the closest names if unknown.
  return name, {}


def vit(file: str, width: int, depth: int, mlp_dim: int,
        num_heads: int | None = None) -> str:
  """The registered ViT of these sizes."""
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
  if 'hidden_size' not in registry.spec(name).defaults:
    raise ConversionError(f'{file} is a ViT; it converts to one of '
                          f'{", ".join(registry.list_models("vit_*"))}, not '
                          f'{name!r}.')


def check_image_size(image_size: int, patch_size: int):
  if image_size % patch_size:
    raise ConversionError(f'image size {image_size} is not a multiple of the '
                          f'patch size {patch_size}.')

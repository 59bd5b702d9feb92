"""Which zoo model a file, or another library's model name, is.

timm's ViT names (`vit_tiny_patch16_224`, `vit_small_...`, `vit_base_...`,
`vit_large_...`, with or without a pretrained tag such as
`.augreg2_in21k_ft_in1k`) are the zoo's vit_ti16, vit_s16, vit_b16 and
vit_l16 with that patch size; its SigLIP image towers
(`vit_base_patch16_siglip_224`, `vit_large_patch16_siglip_256`,
`vit_so400m_patch14_siglip_224`, any image size, `.webli` or `.v2_webli`;
the `_siglip_gap_` ones pool='gap') the zoo's siglip_b16, siglip_l16 and
siglip_so400m14; its DINOv2 models
(`vit_small_patch14_dinov2`, `vit_base_patch14_reg4_dinov2`, ...) the
zoo's dinov2_s14, dinov2_b14, dinov2_l14 and their _reg4 variants.
torchvision's ResNet names are the zoo's.
"""

import dataclasses
import math
import re
from typing import Any, Mapping

from zoo import registry
from zoo.convert.transfer import ConversionError
from zoo.vit import ViT

# timm's ViT names -> the zoo's, each with the patch size in the name.
_TIMM_VITS = (
    (re.compile(r'^vit_(tiny|small|base|large)_patch(\d+)_(\d+)(\..*)?$'),
     {'tiny': 'vit_ti16', 'small': 'vit_s16', 'base': 'vit_b16',
      'large': 'vit_l16'}),
    (re.compile(r'^vit_(base|large|so400m)_patch(\d+)_siglip(_gap)?_(\d+)'
                r'(\..*)?$'),
     {'base': 'siglip_b16', 'large': 'siglip_l16',
      'so400m': 'siglip_so400m14'}),
    (re.compile(r'^vit_(small|base|large)_patch(\d+)_dinov2(\..*)?$'),
     {'small': 'dinov2_s14', 'base': 'dinov2_b14', 'large': 'dinov2_l14'}),
    (re.compile(r'^vit_(small|base|large)_patch(\d+)_reg4_dinov2(\..*)?$'),
     {'small': 'dinov2_s14_reg4', 'base': 'dinov2_b14_reg4',
      'large': 'dinov2_l14_reg4'}),
)

# timm's SigLIPs that compute the tanh GELU, as big_vision trained them; its
# others (and its other ViTs) have the exact one.
_TIMM_TANH_GELU = ('vit_base_patch32_siglip_', 'vit_large_patch16_siglip_512',
                   'vit_large_patch16_siglip_gap_512',
                   'vit_so400m_patch16_siglip_')


def resolve(name: str) -> tuple[str, dict[str, Any]]:
  """(zoo name, keyword arguments the name fixes) of a zoo, timm or
  torchvision model name.

  Args:
    name: a zoo name ('vit_b16', 'resnet50'; torchvision's are the same) or
      timm's ViT name ('vit_base_patch32_384.augreg_in21k',
      'vit_so400m_patch14_siglip_224.v2_webli',
      'vit_small_patch14_reg4_dinov2.lvd142m').

  Returns:
    (zoo name, kwargs): for a timm name, the zoo ViT of that width and
    {'patch_size': its patch}, and {'gelu': 'tanh'} where timm's model has
    that GELU; else `name` and {}.

  Raises:
    ValueError: `name` is neither a timm ViT name nor a known model.
  """
  for pattern, names in _TIMM_VITS:
    match = pattern.match(name)
    if match:
      fixed = {'patch_size': int(match[2])}
      if name.startswith(_TIMM_TANH_GELU):
        fixed['gelu'] = 'tanh'
      return names[match[1]], fixed
  registry.spec(name)  # A ValueError with the closest names if unknown.
  return name, {}


def vits() -> list[str]:
  """The registered ViTs.

  Returns:
    Their names: the vit_* first, then the others (siglip_*, dinov2_*),
    each sorted.
  """
  names = [n for n in registry.list_models() if registry.spec(n).cls is ViT]
  return sorted(names, key=lambda n: (not n.startswith('vit_'), n))


def vit(file: str, width: int, depth: int, mlp_dim: int,
        num_heads: int | None = None, *, pool: str = 'token',
        layer_scale: bool = False, num_registers: int = 0) -> str:
  """The registered ViT of these sizes and this structure.

  Args:
    file: what to call the file in error messages.
    width: the hidden size (embedding width).
    depth: the number of encoder blocks.
    mlp_dim: the MLP's hidden features.
    num_heads: the attention heads; None: any.
    pool: the file's pooling: 'map' (an attention-pooling head) is a
      siglip_*; 'token' and 'gap' another ViT.
    layer_scale: whether the file's blocks have layer scale: a dinov2_*.
    num_registers: the file's register tokens (a dinov2_*_reg4 has 4).

  Returns:
    The name of the first siglip_* (pool='map'), dinov2_* (layer scale or
    registers) or else vit_* whose defaults have these sizes and registers.

  Raises:
    ConversionError: no registered ViT of that family has them.
  """
  family = ('siglip' if pool == 'map' else
            'dinov2' if layer_scale or num_registers else 'vit')
  # siglip_* names the text towers (siglip_b16_text) too: ViTs only.
  names = [n for n in registry.list_models(f'{family}_*')
           if registry.spec(n).cls is ViT]
  for name in names:
    d = options(name)
    if (d['hidden_size'], d['num_layers'], d['mlp_dim'],
        d['num_registers']) == (width, depth, mlp_dim, num_registers) and (
            num_heads in (None, d['num_heads'])):
      return name
  heads = f', {num_heads} heads' if num_heads else ''
  registers = f', {num_registers} registers' if num_registers else ''
  raise ConversionError(
      f'{file} is a ViT of width {width}, depth {depth}, MLP {mlp_dim}'
      f'{heads}{registers}: not one of the zoo\'s {family} ViTs '
      f'({", ".join(names)}).')


def options(name: str, kwargs: Mapping[str, Any] | None = None
            ) -> dict[str, Any]:
  """Every attribute of the zoo model `name` made with `kwargs`: the class's
  defaults, updated by the registered ones, updated by `kwargs`.

  Args:
    name: a registered name.
    kwargs: the `zoo.create` arguments; None: none.

  Returns:
    {attribute: value}, those without a default left out.
  """
  spec = registry.spec(name)
  fields = {f.name: f.default for f in dataclasses.fields(spec.cls)
            if f.default is not dataclasses.MISSING}
  return {**fields, **spec.defaults, **(kwargs or {})}


def differing(name: str, **file_options) -> dict[str, Any]:
  """The options of a file's model that the zoo model `name` does not have
  by default: what its `zoo.create` arguments must set.

  Args:
    name: a registered name.
    **file_options: the file's options, e.g. pool='map'.

  Returns:
    Those of `file_options` whose values differ from `name`'s defaults.
  """
  defaults = options(name)
  return {k: v for k, v in file_options.items() if defaults.get(k) != v}


def check_vit(file: str, name: str):
  """Checks that the zoo model `name` is a ViT, for a ViT file.

  Args:
    file: what to call the file in error messages.
    name: a zoo name.

  Raises:
    ConversionError: `name` is not a ViT.
    ValueError: `name` is not a known model.
  """
  if registry.spec(name).cls is not ViT:
    raise ConversionError(f'{file} is a ViT; it converts to one of '
                          f'{", ".join(vits())}, not {name!r}.')


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


# MLP-Mixer: the zoo's mixer_s16, mixer_b16 and mixer_l16; timm's names are
# mixer_{s,b,l}{patch}_{image size}, with or without a pretrained tag.
_TIMM_MIXER = re.compile(r'^mixer_([sbl])(\d+)_(\d+)(\..*)?$')


def resolve_mixer(file: str, name: str) -> tuple[str, dict[str, Any]]:
  """(zoo name, keyword arguments the name fixes) of a zoo or timm Mixer
  name, for a Mixer file.

  Args:
    file: what to call the file in error messages.
    name: a zoo name ('mixer_b16') or timm's Mixer name
      ('mixer_b32_224.goog_in21k_ft_in1k').

  Returns:
    (zoo name, kwargs): for a timm name, the zoo Mixer of that width and
    {'patch_size': its patch}; else `name` and {}.

  Raises:
    ConversionError: `name` is a model, but not a Mixer.
    ValueError: `name` is not a known model.
  """
  match = _TIMM_MIXER.match(name)
  if match:
    return f'mixer_{match[1]}16', {'patch_size': int(match[2])}
  if 'tokens_mlp_dim' not in registry.spec(name).defaults:
    raise ConversionError(f'{file} is an MLP-Mixer; it converts to one of '
                          f'{", ".join(registry.list_models("mixer_*"))}, '
                          f'not {name!r}.')
  return name, {}


def mixer(file: str, width: int, depth: int, tokens_mlp_dim: int,
          channels_mlp_dim: int) -> str:
  """The registered Mixer of these sizes.

  Args:
    file: what to call the file in error messages.
    width: the hidden size (channels of a patch).
    depth: the number of blocks.
    tokens_mlp_dim: the token-mixing MLP's hidden features.
    channels_mlp_dim: the channel-mixing MLP's hidden features.

  Returns:
    The name of the first mixer_* whose defaults have these sizes.

  Raises:
    ConversionError: no registered Mixer has them.
  """
  sizes = (width, depth, tokens_mlp_dim, channels_mlp_dim)
  for name in registry.list_models('mixer_*'):
    d = registry.spec(name).defaults
    if (d['hidden_size'], d['num_layers'], d['tokens_mlp_dim'],
        d['channels_mlp_dim']) == sizes:
      return name
  raise ConversionError(
      f'{file} is an MLP-Mixer of width {width}, depth {depth}, MLPs '
      f'{tokens_mlp_dim} (tokens) and {channels_mlp_dim} (channels): not one '
      f'of the zoo\'s Mixers ({", ".join(registry.list_models("mixer_*"))}).')


def mixer_image_size(file: str, tokens: int, patch_size: int,
                     image_size: int | None) -> int:
  """The image size of a Mixer file whose token-mixing weights take `tokens`
  patches of `patch_size`; it cannot change, as the weights are made for
  that many patches.

  Args:
    file: what to call the file in error messages.
    tokens: the patches the token-mixing MLP takes.
    patch_size: the patch side, in pixels.
    image_size: the size asked for; None: the file's.

  Returns:
    The input side, in pixels.

  Raises:
    ConversionError: the patches are not a square grid, or `image_size` is
      given and not the file's.
  """
  side = math.isqrt(tokens)
  if side * side != tokens:
    raise ConversionError(f'{file} mixes {tokens} patches, not a square grid '
                          'of them.')
  if image_size not in (None, side * patch_size):
    raise ConversionError(
        f'{file} mixes {side}x{side} patches of {patch_size}x{patch_size}: '
        f'its token-mixing weights take {side * patch_size}x'
        f'{side * patch_size} images only, not {image_size}x{image_size}.')
  return side * patch_size


# ConvNeXt: the zoo's convnext_tiny, _small, _base and _large are timm's and
# torchvision's names; timm's may carry a pretrained tag
# (convnext_tiny.fb_in22k_ft_in1k).
def convnext(file: str, name: str | None, depths: tuple[int, ...],
             dims: tuple[int, ...]) -> tuple[str, dict[str, Any]]:
  """(zoo name, keyword arguments the file fixes) of a ConvNeXt file whose
  stages have `depths` blocks of widths `dims`.

  A file of a registered variant's sizes is that variant: with `name` given,
  it must be that one (the conversion then names the first tensor that does
  not fit). A file of other sizes converts only to a `name` given, with its
  depths and dims.

  Args:
    file: what to call the file in error messages.
    name: a zoo, timm or torchvision ConvNeXt name; None: the file's.
    depths: the blocks of each stage in the file.
    dims: the width of each stage in the file.

  Returns:
    (zoo name, kwargs): {} for a registered variant's sizes, else
    {'depths': depths, 'dims': dims}.

  Raises:
    ConversionError: `name` is a model but not a ConvNeXt, or `name` is None
      and no registered ConvNeXt has the file's sizes.
    ValueError: `name` is not a known model.
  """
  def sizes(variant):
    defaults = registry.spec(variant).defaults
    return tuple(defaults['depths']), tuple(defaults['dims'])

  variants = registry.list_models('convnext_*')
  known = next((v for v in variants if sizes(v) == (depths, dims)), None)
  if name is None and known is None:
    raise ConversionError(
        f'{file} is a ConvNeXt of depths {depths} and widths {dims}: not one '
        f'of the zoo\'s ({", ".join(variants)}); give a name to convert it '
        'with these sizes.')
  if name is not None:
    if name not in variants:
      name = name.split('.')[0]  # timm's pretrained tag.
    registry.spec(name)  # A ValueError with the closest names if unknown.
    if name not in variants:
      raise ConversionError(f'{file} is a ConvNeXt; it converts to one of '
                            f'{", ".join(variants)}, not {name!r}.')
  return name or known, {} if known else {'depths': depths, 'dims': dims}


# BiT: the zoo's bit_r{depth}x{k} are timm's resnetv2_{depth}x{k}_bit, with
# or without a pretrained tag (resnetv2_50x1_bit.goog_in21k).
_TIMM_BIT = re.compile(r'^resnetv2_(\d+x\d+)_bit(\..*)?$')


def bit(file: str, name: str | None, stage_sizes: tuple[int, ...],
        width: int) -> tuple[str, dict[str, Any]]:
  """(zoo name, keyword arguments the file fixes) of a BiT file whose stages
  have `stage_sizes` blocks and whose stem has `width` channels.

  A file of a registered variant's sizes is that variant: with `name` given,
  it must be that one (the conversion then names the first tensor that does
  not fit). A file of other sizes converts only to a `name` given, with its
  stage sizes and width.

  Args:
    file: what to call the file in error messages.
    name: a zoo or timm BiT name; None: the file's.
    stage_sizes: the blocks of each stage in the file.
    width: the stem's output channels in the file.

  Returns:
    (zoo name, kwargs): {} for a registered variant's sizes, else
    {'stage_sizes': stage_sizes, 'width': width}.

  Raises:
    ConversionError: `name` is a model but not a BiT, or `name` is None and
      no registered BiT has the file's sizes.
    ValueError: `name` is not a known model.
  """
  def sizes(variant):
    defaults = registry.spec(variant).defaults
    return tuple(defaults['stage_sizes']), defaults['width']

  variants = registry.list_models('bit_*')
  known = next((v for v in variants if sizes(v) == (stage_sizes, width)),
               None)
  if name is None and known is None:
    raise ConversionError(
        f'{file} is a BiT of stages {stage_sizes} and width {width}: not one '
        f'of the zoo\'s ({", ".join(variants)}); give a name to convert it '
        'with these sizes.')
  if name is not None:
    match = _TIMM_BIT.match(name)
    if match:
      name = f'bit_r{match[1]}'
    registry.spec(name)  # A ValueError with the closest names if unknown.
    if name not in variants:
      raise ConversionError(f'{file} is a BiT; it converts to one of '
                            f'{", ".join(variants)}, not {name!r}.')
  return name or known, ({} if known else
                         {'stage_sizes': stage_sizes, 'width': width})

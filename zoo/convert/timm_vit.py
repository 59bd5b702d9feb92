"""timm's ViT state dicts (timm/models/vision_transformer.py,
`VisionTransformer`) to the zoo's ViTs: vit_tiny/small/base/large_patch16_224
and the other patch and image sizes of those widths (vit_*), the SigLIP and
SigLIP 2 image towers vit_{base,large,so400m}_patch*_siglip_* (siglip_*) and
DINOv2 vit_{small,base,large}_patch14[_reg4]_dinov2 (dinov2_*).

timm's names: `cls_token`, `reg_token` (register tokens), `pos_embed` (with
the class token's entry, or without it: timm's no_embed_class, as in its
DINOv2 with registers), `patch_embed.proj` (the patch conv),
`blocks.{i}.norm1`, `attn.qkv` (query, key and value fused: rows
[3][heads][head_dim], as its forward reshapes them), `attn.proj`, `ls1.gamma`
(layer scale), `norm2`, `mlp.fc1`, `mlp.fc2`, `ls2.gamma`, the final `norm`,
the attention-pooling head `attn_pool` (timm/layers/attention_pool.py,
`AttentionPoolLatent`: `latent` the probe, `q`, `kv` fused key and value
(rows [2][heads][head_dim]), `proj`, `norm`, `mlp.fc1`, `mlp.fc2`) and the
classifier `head` (none where num_classes=0: SigLIP's and DINOv2's files).
Layer norms have epsilon 1e-6 there as here. timm's MLP uses the exact (erf)
GELU, so the converted model has gelu='exact'; with the zoo's default tanh
approximation the logits would differ by about 2e-4 (relative). The state
dict does not say which GELU; a few of timm's SigLIPs (B/32, L/16 at 512,
So400m/16) use the tanh one, which their timm names give (`name=`).
"""

from typing import Any, Mapping, Sequence

import numpy as np

from zoo.convert import heads, posemb, variants
from zoo.convert.transfer import (ConversionError, Converted, Transfer,
                                  target_shapes)

SOURCE = 'timm'
_CONV = (2, 3, 1, 0)  # (out, in, h, w) -> (h, w, in, out)
_LINEAR = (1, 0)


def matches(tensors: Mapping[str, np.ndarray]) -> bool:
  """Whether `tensors` are named as a timm ViT state dict.

  Args:
    tensors: a checkpoint's tensors by name.

  Returns:
    True if the names are this source's.
  """
  return 'patch_embed.proj.weight' in tensors and 'pos_embed' in tensors


def template(name: str, kwargs: Mapping[str, Any]) -> dict[str, tuple]:
  """The names and shapes, in timm's state_dict order, of the timm file that
  holds the zoo ViT `name` made with `kwargs`.

  Args:
    name: a registered ViT.
    kwargs: its `zoo.create` arguments (those not given are its defaults).

  Returns:
    {tensor name: shape}.

  Raises:
    ConversionError: `name` is not a ViT, or has what timm's ViT has not (a
      sin-cos position embedding, a pre-logits layer).
  """
  variants.check_vit('a timm file', name)
  k = variants.options(name, kwargs)
  if k['posemb'] != 'learn' or k['pre_logits']:
    raise ConversionError(
        f'{name} with posemb={k["posemb"]!r}, pre_logits={k["pre_logits"]} '
        'is not a timm ViT: timm\'s learns its position embedding and has no '
        'pre-logits layer.')
  width, mlp_dim, p = k['hidden_size'], k['mlp_dim'], k['patch_size']
  class_token = k['pool'] == 'token'
  grid = (k['image_size'] // p)**2
  shapes = {}
  if class_token:
    shapes['cls_token'] = (1, 1, width)
  if k['num_registers']:
    shapes['reg_token'] = (1, k['num_registers'], width)
  shapes['pos_embed'] = (1, grid + int(class_token and k['class_posemb']),
                         width)
  shapes['patch_embed.proj.weight'] = (width, 3, p, p)
  shapes['patch_embed.proj.bias'] = (width,)

  def linear(prefix: str, out: int, inputs: int):
    shapes[f'{prefix}.weight'] = (out, inputs)
    shapes[f'{prefix}.bias'] = (out,)

  def norm(prefix: str):
    shapes[f'{prefix}.weight'] = shapes[f'{prefix}.bias'] = (width,)

  for i in range(k['num_layers']):
    block = f'blocks.{i}'
    norm(f'{block}.norm1')
    linear(f'{block}.attn.qkv', 3 * width, width)
    linear(f'{block}.attn.proj', width, width)
    if k['layer_scale']:
      shapes[f'{block}.ls1.gamma'] = (width,)
    norm(f'{block}.norm2')
    linear(f'{block}.mlp.fc1', mlp_dim, width)
    linear(f'{block}.mlp.fc2', width, mlp_dim)
    if k['layer_scale']:
      shapes[f'{block}.ls2.gamma'] = (width,)
  norm('norm')
  if k['pool'] == 'map':
    shapes['attn_pool.latent'] = (1, 1, width)
    linear('attn_pool.q', width, width)
    linear('attn_pool.kv', 2 * width, width)
    linear('attn_pool.proj', width, width)
    norm('attn_pool.norm')
    linear('attn_pool.mlp.fc1', mlp_dim, width)
    linear('attn_pool.mlp.fc2', width, mlp_dim)
  if k['num_classes']:
    linear('head', k['num_classes'], width)
  return shapes


def convert(tensors: Mapping[str, np.ndarray], file: str,
            name: str | None = None, num_classes: int | None = None,
            image_size: int | None = None) -> Converted:
  """The zoo ViT `name` (default: the file's size and family) with the
  file's weights, its position embedding resized to `image_size` (default:
  the file's).

  Args: as big_vision_vit.convert's, for a timm state dict.

  Returns:
    The Converted ViT; its kwargs fix num_classes (0 for a file without a
    head), patch_size, image_size, gelu ('exact', or the timm name's) and,
    where the file's differ from the model's defaults, pool ('gap' without
    a class token, 'map' with an attention-pooling head), class_posemb,
    num_registers and layer_scale (1e-5, DINOv2's, where the model has none
    by default; the value only initializes).

  Raises:
    ConversionError: no zoo ViT has the file's sizes, `name` is not a
      ViT, the position embedding is not a square grid, or a tensor does
      not fit.
    ValueError: `name` is not a known model.
  """
  patches = tensors['patch_embed.proj.weight']
  width, patch = int(patches.shape[0]), int(patches.shape[-1])
  depth = 0
  while f'blocks.{depth}.norm1.weight' in tensors:
    depth += 1
  mlp_dim = int(tensors['blocks.0.mlp.fc1.weight'].shape[0]) if depth else 0
  class_token = 'cls_token' in tensors
  num_registers = (int(tensors['reg_token'].shape[1])
                   if 'reg_token' in tensors else 0)
  pool = ('map' if 'attn_pool.latent' in tensors else
          'token' if class_token else 'gap')
  layer_scale = 'blocks.0.ls1.gamma' in tensors
  prefix, side = posemb.split(tensors['pos_embed'], class_token, 'pos_embed')
  if name:
    name, fixed = variants.resolve(name)
    variants.check_vit(file, name)
  else:
    name, fixed = variants.vit(file, width, depth, mlp_dim, pool=pool,
                               layer_scale=layer_scale,
                               num_registers=num_registers), {}
  file_classes, num_classes = heads.classes(tensors, 'head.bias', file,
                                            num_classes)
  patch = fixed.get('patch_size', patch)
  kwargs = {'num_classes': num_classes, 'patch_size': patch,
            'image_size': image_size or side * patch,
            'gelu': fixed.get('gelu', 'exact')}
  d = variants.options(name)
  kwargs.update(variants.differing(
      name, pool=pool, num_registers=num_registers,
      layer_scale=(d['layer_scale'] or 1e-5) if layer_scale else 0.0,
      **({'class_posemb': bool(prefix)} if class_token else {})))
  variants.check_image_size(kwargs['image_size'], patch)
  t = Transfer(tensors, target_shapes(name, kwargs), file,
               f'{name} with {patch}x{patch} patches')

  t.move('patch_embed.proj.weight', 'params/embedding/kernel', _CONV)
  t.move('patch_embed.proj.bias', 'params/embedding/bias')
  if class_token:
    t.move('cls_token', 'params/cls')
  if num_registers:
    t.move('reg_token', 'params/registers')
  model_side = kwargs['image_size'] // patch
  # The class token's entry, if the file has one; else none (class_posemb).
  t.move('pos_embed', 'params/pos_embedding', shape=tensors['pos_embed'].shape,
         convert=lambda x: posemb.arrange(x, prefix, bool(prefix),
                                          model_side))
  for i in range(d['num_layers']):
    source, target = f'blocks.{i}', f'params/block{i}'
    move_norm(t, f'{source}.norm1', f'{target}/LayerNorm_0')
    project_in(t, f'{source}.attn.qkv', f'{target}/Attention_0',
                ('query', 'key', 'value'))
    project_out(t, f'{source}.attn.proj', f'{target}/Attention_0')
    move_norm(t, f'{source}.norm2', f'{target}/LayerNorm_1')
    move_mlp(t, f'{source}.mlp', target)
    if layer_scale:
      for k in range(2):
        t.move(f'{source}.ls{k + 1}.gamma', f'{target}/LayerScale_{k}/scale')
  move_norm(t, 'norm', 'params/final_norm')
  if pool == 'map':
    t.move('attn_pool.latent', 'params/map_head/probe')
    project_in(t, 'attn_pool.q', 'params/map_head/Attention_0', ('query',))
    project_in(t, 'attn_pool.kv', 'params/map_head/Attention_0',
                ('key', 'value'))
    project_out(t, 'attn_pool.proj', 'params/map_head/Attention_0')
    move_norm(t, 'attn_pool.norm', 'params/map_head/LayerNorm_0')
    move_mlp(t, 'attn_pool.mlp', 'params/map_head')
  heads.move(t, 'head.weight', 'head.bias', 'params/head', _LINEAR,
             file_classes, num_classes)
  return t.finish(name, kwargs, SOURCE)


# The moves below serve transformers' SigLIP too (transformers_siglip.py):
# its layer names differ, its layers' layouts are these.


def move_norm(t: Transfer, source: str, target: str):
  """A layer norm's `weight` and `bias` to the zoo's scale and bias."""
  t.move(f'{source}.weight', f'{target}/scale')
  t.move(f'{source}.bias', f'{target}/bias')


def move_mlp(t: Transfer, source: str, target: str):
  """An MLP's `fc1` and `fc2` to the zoo's Dense_0 and Dense_1 of
  `target`."""
  for k in range(2):
    t.move(f'{source}.fc{k + 1}.weight', f'{target}/Dense_{k}/kernel',
           _LINEAR)
    t.move(f'{source}.fc{k + 1}.bias', f'{target}/Dense_{k}/bias')


def project_in(t: Transfer, source: str, target: str, parts: Sequence[str],
               names: tuple[str, str] | None = None):
  """A linear layer of timm's that projects to `parts` (e.g. query, key,
  value) at once, its rows [part][head][head_dim], to the zoo's kernels
  (width, heads, head_dim) and biases (heads, head_dim) of each part;
  `names`: its weight's and bias's (default: `source`.weight and .bias;
  torch's MultiheadAttention has `in_proj_weight` and `in_proj_bias`)."""
  weight_name, bias_name = names or (f'{source}.weight', f'{source}.bias')
  width, num_heads, head_dim = t.targets[f'{target}/{parts[0]}/kernel']
  rows = len(parts) * num_heads * head_dim
  weight = t.take(weight_name, (rows, width))
  weight = weight.reshape(len(parts), num_heads, head_dim, width)
  bias = t.take(bias_name, (rows,)).reshape(len(parts), num_heads, head_dim)
  for s, part in enumerate(parts):
    t.put(f'{target}/{part}/kernel', weight[s].transpose(2, 0, 1))
    t.put(f'{target}/{part}/bias', bias[s])


def project_out(t: Transfer, source: str, target: str):
  """timm's output projection (width, heads * head_dim) to the zoo's kernel
  (heads, head_dim, width)."""
  num_heads, head_dim, width = t.targets[f'{target}/out/kernel']
  t.move(f'{source}.weight', f'{target}/out/kernel',
         shape=(width, num_heads * head_dim),
         convert=lambda w: w.T.reshape(num_heads, head_dim, width))
  t.move(f'{source}.bias', f'{target}/out/bias')

"""timm's ViT state dicts (vit_tiny/small/base/large_patch16_224 and the
other patch and image sizes of those widths) to the zoo's vit_*.

timm's names (timm/models/vision_transformer.py, `VisionTransformer`):
`patch_embed.proj` (the patch conv), `cls_token`, `pos_embed` (with the class
token's entry), `blocks.{i}.norm1`, `attn.qkv` (query, key and value fused:
rows [3][heads][head_dim], as its forward reshapes them), `attn.proj`,
`norm2`, `mlp.fc1`, `mlp.fc2`, the final `norm` and `head`. Layer norms have
epsilon 1e-6 there as here. timm's MLP uses the exact (erf) GELU, so the
converted model has gelu='exact'; with the zoo's default tanh approximation
the logits would differ by about 2e-4 (relative).
"""

from typing import Mapping

import numpy as np

from zoo import registry
from zoo.convert import heads, posemb, variants
from zoo.convert.transfer import Converted, Transfer, target_shapes

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


def convert(tensors: Mapping[str, np.ndarray], file: str,
            name: str | None = None, num_classes: int | None = None,
            image_size: int | None = None) -> Converted:
  """The zoo ViT `name` (default: the file's size) with the file's weights,
  its position embedding resized to `image_size` (default: the file's).

  Args: as big_vision_vit.convert's, for a timm state dict.

  Returns:
    The Converted ViT; its kwargs fix num_classes, patch_size, image_size,
    gelu ('exact') and, without a class token, pool='gap'.

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
  prefix, side = posemb.split(tensors['pos_embed'], class_token, 'pos_embed')
  if name:
    name, fixed = variants.resolve(name)
    variants.check_vit(file, name)
  else:
    name, fixed = variants.vit(file, width, depth, mlp_dim), {}
  file_classes, num_classes = heads.classes(tensors, 'head.bias', file,
                                            num_classes)
  patch = fixed.get('patch_size', patch)
  kwargs = {'num_classes': num_classes, 'patch_size': patch,
            'image_size': image_size or side * patch, 'gelu': 'exact'}
  if not class_token:
    kwargs['pool'] = 'gap'
  variants.check_image_size(kwargs['image_size'], patch)
  t = Transfer(tensors, target_shapes(name, kwargs), file,
               f'{name} with {patch}x{patch} patches')
  d = registry.spec(name).defaults
  num_heads = d['num_heads']
  head_dim = d['hidden_size'] // num_heads

  t.move('patch_embed.proj.weight', 'params/embedding/kernel', _CONV)
  t.move('patch_embed.proj.bias', 'params/embedding/bias')
  if class_token:
    t.move('cls_token', 'params/cls')
  model_side = kwargs['image_size'] // patch
  t.move('pos_embed', 'params/pos_embedding', shape=tensors['pos_embed'].shape,
         convert=lambda x: posemb.arrange(x, prefix, class_token, model_side))
  for i in range(d['num_layers']):
    source, target = f'blocks.{i}', f'params/block{i}'
    t.move(f'{source}.norm1.weight', f'{target}/LayerNorm_0/scale')
    t.move(f'{source}.norm1.bias', f'{target}/LayerNorm_0/bias')
    width = d['hidden_size']
    qkv = t.take(f'{source}.attn.qkv.weight', (3 * width, width))
    qkv = qkv.reshape(3, num_heads, head_dim, width).transpose(0, 3, 1, 2)
    qkv_bias = t.take(f'{source}.attn.qkv.bias', (3 * width,))
    qkv_bias = qkv_bias.reshape(3, num_heads, head_dim)
    for s, part in enumerate(('query', 'key', 'value')):
      t.put(f'{target}/Attention_0/{part}/kernel', qkv[s])
      t.put(f'{target}/Attention_0/{part}/bias', qkv_bias[s])
    t.move(f'{source}.attn.proj.weight', f'{target}/Attention_0/out/kernel',
           shape=(width, width),
           convert=lambda w: w.T.reshape(num_heads, head_dim, -1))
    t.move(f'{source}.attn.proj.bias', f'{target}/Attention_0/out/bias')
    t.move(f'{source}.norm2.weight', f'{target}/LayerNorm_1/scale')
    t.move(f'{source}.norm2.bias', f'{target}/LayerNorm_1/bias')
    for k in range(2):
      t.move(f'{source}.mlp.fc{k + 1}.weight', f'{target}/Dense_{k}/kernel',
             _LINEAR)
      t.move(f'{source}.mlp.fc{k + 1}.bias', f'{target}/Dense_{k}/bias')
  t.move('norm.weight', 'params/final_norm/scale')
  t.move('norm.bias', 'params/final_norm/bias')
  heads.move(t, 'head.weight', 'head.bias', 'params/head', _LINEAR,
             file_classes, num_classes)
  return t.finish(name, kwargs, SOURCE)

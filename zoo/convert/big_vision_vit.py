"""Google's ViT .npz checkpoints (google-research/vision_transformer, e.g.
the AugReg ones, and big_vision's) to the zoo's vit_*.

An .npz holds one array per parameter, named by its '/'-joined path in the
Flax model (vit_jax/checkpoint.py saves and `recover_tree`s them that way):

    embedding/kernel, embedding/bias           the patch conv (p, p, 3, width)
    cls                                        the class token (1, 1, width)
    Transformer/posembed_input/pos_embedding   (1, 1 + grid, width)
    Transformer/encoderblock_{i}/LayerNorm_0, MultiHeadDotProductAttention_1
        (query, key, value: kernel (width, heads, head_dim); out: kernel
        (heads, head_dim, width)), LayerNorm_2, MlpBlock_3/Dense_0, Dense_1
    Transformer/encoder_norm                   the final layer norm
    pre_logits/kernel, pre_logits/bias         (some ImageNet-21k checkpoints)
    head/kernel, head/bias

(vit_jax/models_vit.py; the block's child numbers are those of pre-Linen
Flax, which `flax.training.checkpoints.convert_pre_linen` renumbers on load.)
big_vision (big_vision/models/vit.py, its `fix_old_checkpoints` and
`scan_to_pyloop`) reads these and its own variants, which are taken here too:
a 'params/' or 'opt/target/' prefix; Linen's numbering (LayerNorm_0,
MultiHeadDotProductAttention_0, LayerNorm_1, MlpBlock_0); the position
embedding at 'Transformer/pos_embedding' or at the top, 'pos_embedding',
without the class token's entry; none at all (posemb='sincos2d'); no 'cls'
(pool_type='gap'); the blocks stacked along a first axis in
'Transformer/encoderblock/...' (scan_layers); and the multi-head attention
pooling head (pool_type='map'; vit.py `MAPHead`, auto-named MAPHead_0:
`probe`, MultiHeadDotProductAttention_0, LayerNorm_0, MlpBlock_0), which
becomes pool='map'. SigLIP's files (big_vision/models/proj/image_text/
two_towers.py) hold both towers under 'params/img/' (this ViT, no head:
out_dim (None, ...)) and 'params/txt/' (text_transformer.py), and the loss's
temperature 'params/t' and bias 'params/b': the image tower is converted, the
rest set aside by name. Hybrid ResNet stems are not in the zoo's ViT. These
models use Flax's tanh-approximated GELU, so the converted model keeps
gelu='tanh'.
"""

from typing import Mapping

import numpy as np

from zoo import registry
from zoo.convert import heads, posemb, variants
from zoo.convert.transfer import (ConversionError, Converted, Transfer,
                                  target_shapes)

SOURCE = 'big_vision'
# 'params/img/': SigLIP's image tower (two_towers.py names it 'img').
_PREFIXES = ('', 'params/', 'opt/target/', 'params/img/')
_TWO_TOWERS = 'params/img/'
# What else a SigLIP file holds, by its first name under 'params/'.
_NOT_THE_IMAGE_TOWER = {'txt': 'the text tower', 't': 'the loss temperature',
                        'b': 'the loss bias'}
_POSEMB = ('Transformer/posembed_input/pos_embedding',
           'Transformer/pos_embedding', 'pos_embedding')
# A block's children: pre-Linen numbering (published ViT checkpoints), then
# Linen's (big_vision).
_BLOCK_NAMES = (
    ('LayerNorm_0', 'MultiHeadDotProductAttention_1', 'LayerNorm_2',
     'MlpBlock_3'),
    ('LayerNorm_0', 'MultiHeadDotProductAttention_0', 'LayerNorm_1',
     'MlpBlock_0'),
)


def _prefix(tensors: Mapping[str, np.ndarray]) -> str | None:
  for prefix in _PREFIXES:
    if f'{prefix}embedding/kernel' in tensors:
      return prefix
  return None


def matches(tensors: Mapping[str, np.ndarray]) -> bool:
  """Whether `tensors` are named as a Google ViT or big_vision .npz.

  Any of the prefixes '', 'params/', 'opt/target/' and 'params/img/'
  (SigLIP's image tower) is taken.

  Args:
    tensors: a checkpoint's tensors by name.

  Returns:
    True if the names are this source's.
  """
  return _prefix(tensors) is not None


def convert(tensors: Mapping[str, np.ndarray], file: str,
            name: str | None = None, num_classes: int | None = None,
            image_size: int | None = None) -> Converted:
  """The zoo ViT `name` (default: the file's size) with the file's weights,
  its position embedding resized to `image_size` (default: the file's).

  Args:
    tensors: the checkpoint's tensors by name.
    file: what to call the file in error messages.
    name: a zoo ViT ('vit_b16') or timm's ViT name (its patch size wins
      over the file's); None: the zoo ViT of the file's sizes.
    num_classes: the model's classes (0: no head); None: the file's (0
      without a head, as SigLIP's image tower). Another number leaves the
      head to initialization.
    image_size: the model's input side, in pixels, a multiple of the patch
      size; None: the file's.

  Returns:
    The Converted ViT; its kwargs fix num_classes, patch_size, image_size,
    gelu ('tanh') and, as the file has them, posemb, pool and pre_logits.

  Raises:
    ConversionError: the file is not such a ViT (no patch embedding; a
      hybrid model), no zoo ViT has its sizes, `name` is not a ViT, or a
      tensor does not fit.
    ValueError: `name` is not a known model.
  """
  p = _prefix(tensors)
  if p is None:
    raise ConversionError(f'{file} has no tensor \'embedding/kernel\': not a '
                          'ViT checkpoint of Google\'s ViT code or big_vision.')
  if f'{p}conv_root/kernel' in tensors:
    raise ConversionError(f'{file} is a hybrid ResNet+ViT '
                          f'({p}conv_root/kernel), which the zoo\'s ViT is '
                          'not.')
  stacked = f'{p}Transformer/encoderblock/LayerNorm_0/scale' in tensors
  if stacked:
    blocks = f'{p}Transformer/encoderblock/'
    depth = int(tensors[f'{blocks}LayerNorm_0/scale'].shape[0])
  else:
    blocks = f'{p}Transformer/encoderblock_{{}}/'
    depth = 0
    while f'{blocks.format(depth)}LayerNorm_0/scale' in tensors:
      depth += 1
  first = blocks.format(0)
  names = next((n for n in _BLOCK_NAMES
                if f'{first}{n[3]}/Dense_0/kernel' in tensors),
               _BLOCK_NAMES[0])
  ln_attention, attention, ln_mlp, mlp = names
  patches = tensors[f'{p}embedding/kernel']
  width, patch = int(patches.shape[-1]), int(patches.shape[0])
  query = tensors.get(f'{first}{attention}/query/kernel')
  num_heads = int(query.shape[-2]) if query is not None else None
  dense = tensors.get(f'{first}{mlp}/Dense_0/kernel')
  mlp_dim = int(dense.shape[-1]) if dense is not None else 0
  class_token = f'{p}cls' in tensors
  pool = ('map' if f'{p}MAPHead_0/probe' in tensors else
          'token' if class_token else 'gap')
  pos_name = next((f'{p}{n}' for n in _POSEMB if f'{p}{n}' in tensors), None)

  if name:
    name, fixed = variants.resolve(name)
    variants.check_vit(file, name)
  else:
    name, fixed = variants.vit(file, width, depth, mlp_dim, num_heads,
                               pool=pool), {}
  file_classes, num_classes = heads.classes(tensors, f'{p}head/bias', file,
                                            num_classes)
  patch = fixed.get('patch_size', patch)
  kwargs = {'num_classes': num_classes, 'patch_size': patch, 'gelu': 'tanh'}
  if pos_name:
    prefix, side = posemb.split(tensors[pos_name], class_token, pos_name)
    kwargs['image_size'] = image_size or side * patch
  else:
    kwargs['posemb'] = 'sincos2d'
    kwargs['image_size'] = image_size or registry.spec(name).defaults[
        'image_size']
  # What the file has of the structure; the model's defaults may differ (a
  # big_vision file has no registers or layer scale).
  kwargs.update(variants.differing(
      name, pool=pool, num_registers=0, layer_scale=0.0,
      **({'class_posemb': True} if class_token else {})))
  variants.check_image_size(kwargs['image_size'], patch)
  if f'{p}pre_logits/kernel' in tensors:
    kwargs['pre_logits'] = int(tensors[f'{p}pre_logits/kernel'].shape[-1])
  t = Transfer(tensors, target_shapes(name, kwargs), file,
               f'{name} with {patch}x{patch} patches')
  d = registry.spec(name).defaults

  taken = {}

  def block(i: int, path: str, target: str):
    """Block i's tensor at `path` to `target`."""
    want = t.targets[target]
    if not stacked:
      t.put(target, t.take(f'{blocks.format(i)}{path}', want))
      return
    if path not in taken:  # One read of the stack serves every block.
      taken[path] = t.take(f'{blocks}{path}', (d['num_layers'], *want))
    t.put(target, taken[path][i])

  t.move(f'{p}embedding/kernel', 'params/embedding/kernel')
  t.move(f'{p}embedding/bias', 'params/embedding/bias')
  if class_token:
    t.move(f'{p}cls', 'params/cls')
  if pos_name:
    model_side = kwargs['image_size'] // patch
    t.move(pos_name, 'params/pos_embedding', shape=tensors[pos_name].shape,
           convert=lambda x: posemb.arrange(x, prefix, class_token,
                                            model_side))
  for i in range(d['num_layers']):
    target = f'params/block{i}'
    for leaf in ('scale', 'bias'):
      block(i, f'{ln_attention}/{leaf}', f'{target}/LayerNorm_0/{leaf}')
      block(i, f'{ln_mlp}/{leaf}', f'{target}/LayerNorm_1/{leaf}')
    for leaf in ('kernel', 'bias'):
      for part in ('query', 'key', 'value', 'out'):
        block(i, f'{attention}/{part}/{leaf}',
              f'{target}/Attention_0/{part}/{leaf}')
      for k in range(2):
        block(i, f'{mlp}/Dense_{k}/{leaf}', f'{target}/Dense_{k}/{leaf}')
  t.move(f'{p}Transformer/encoder_norm/scale', 'params/final_norm/scale')
  t.move(f'{p}Transformer/encoder_norm/bias', 'params/final_norm/bias')
  if pool == 'map':
    head, target = f'{p}MAPHead_0/', 'params/map_head/'
    t.move(f'{head}probe', f'{target}probe')
    for leaf in ('kernel', 'bias'):
      for part in ('query', 'key', 'value', 'out'):
        t.move(f'{head}MultiHeadDotProductAttention_0/{part}/{leaf}',
               f'{target}Attention_0/{part}/{leaf}')
      for k in range(2):
        t.move(f'{head}MlpBlock_0/Dense_{k}/{leaf}',
               f'{target}Dense_{k}/{leaf}')
    for leaf in ('scale', 'bias'):
      t.move(f'{head}LayerNorm_0/{leaf}', f'{target}LayerNorm_0/{leaf}')
  if 'pre_logits' in kwargs:
    t.move(f'{p}pre_logits/kernel', 'params/pre_logits/kernel')
    t.move(f'{p}pre_logits/bias', 'params/pre_logits/bias')
  if p == _TWO_TOWERS:
    for tensor in tensors:
      if not tensor.startswith(p):
        first = tensor.removeprefix('params/').split('/')[0]
        t.ignore(tensor, _NOT_THE_IMAGE_TOWER.get(first,
                                                  'not of the image tower'))
  heads.move(t, f'{p}head/kernel', f'{p}head/bias', 'params/head', (0, 1),
             file_classes, num_classes)
  return t.finish(name, kwargs, SOURCE)

"""Hugging Face transformers' SigLIP (`SiglipModel`, `SiglipTextModel`,
`SiglipVisionModel`; their `model.safetensors`) to the zoo's towers:
siglip_*_text and siglip2_*_text (zoo/siglip_text.py), siglip_b16,
siglip_l16 and siglip_so400m14 (zoo/vit.py), or both at once with the
logits' scale and bias (`convert_model`: zoo/siglip.py's SigLIP).

    converted = zoo.convert.load('model.safetensors')          # the text tower
    converted = zoo.convert.load('model.safetensors', name='siglip_b16')
    model, variables, *_ = transformers_siglip.convert_model(tensors)

transformers' names: a SiglipModel's `text_model.` and `vision_model.`
towers (a tower saved alone has no prefix; files of transformers before v5
prefix them too), `logit_scale` and `logit_bias` (shape (1,)). Text:
`embeddings.token_embedding`, `embeddings.position_embedding`, per layer
`encoder.layers.{i}.layer_norm1`, `self_attn.{q,k,v,out}_proj`,
`layer_norm2`, `mlp.fc1`, `mlp.fc2` (Linear weights (out, in)), then
`final_layer_norm` and `head` (a Linear). Image: `embeddings.
patch_embedding` (a Conv2d), `embeddings.position_embedding` (an Embedding,
one row per patch), the same layers, `post_layernorm`, and the attention-
pooling head `head`: `probe`, `attention` (torch's MultiheadAttention:
`in_proj_weight` with rows [query, key, value][head][head_dim],
`in_proj_bias`, `out_proj`), `layernorm`, `mlp`. Layer norms have epsilon
1e-6 and the MLPs the tanh GELU (`gelu_pytorch_tanh`), as the zoo's. The
file does not say the heads' width: a tower of the registered sizes has the
registered heads; another takes the named model's head width.

The converted towers compute transformers' `pooler_output`s: the text
tower's before normalization, the image tower's likewise;
tests/unit/zoo/convert/test_convert_siglip_text.py compares them and
SiglipModel's logits.
"""

import sys
from typing import Any, Mapping, NamedTuple

import numpy as np

from zoo import registry
from zoo.convert import export, posemb, timm_vit, variants
from zoo.convert.transfer import (ConversionError, Converted, Transfer,
                                  check_family, target_shapes)
from zoo.siglip import SigLIP
from zoo.siglip_text import SiglipText

SOURCE = 'transformers'
_LINEAR = (1, 0)  # torch's Linear weight (out, in) -> kernel (in, out).
_CONV = (2, 3, 1, 0)  # (out, in, h, w) -> (h, w, in, out)
_TOWERS = {'text': 'text_model.', 'image': 'vision_model.'}
# A name of each tower that no other transformers model has (CLIP's towers
# are named alike, without SigLIP's text head or pooling probe).
_MARKS = {'text': ('embeddings.token_embedding.weight', 'head.weight'),
          'image': ('embeddings.patch_embedding.weight', 'head.probe')}
_LOGITS = ('logit_scale', 'logit_bias')


def _prefix(tensors: Mapping[str, Any], tower: str) -> str | None:
  """The prefix of `tower`'s names in `tensors` ('text_model.' or ''), or
  None where the file has no such tower."""
  for prefix in (_TOWERS[tower], ''):
    if all(f'{prefix}{mark}' in tensors for mark in _MARKS[tower]):
      return prefix
  return None


def matches(tensors: Mapping[str, np.ndarray]) -> bool:
  """Whether `tensors` are named as a transformers SigLIP (either tower).

  Args:
    tensors: a checkpoint's tensors by name.

  Returns:
    True if the names are this source's.
  """
  return any(_prefix(tensors, tower) is not None for tower in _TOWERS)


def text_towers() -> list[str]:
  """The registered text towers."""
  return [n for n in registry.list_models()
          if registry.spec(n).cls is SiglipText]


def _tower(name: str) -> str:
  return 'text' if registry.spec(name).cls is SiglipText else 'image'


def template(name: str, kwargs: Mapping[str, Any]) -> dict[str, tuple]:
  """The names and shapes, in transformers' state_dict order, of the
  SiglipTextModel or SiglipVisionModel file (no prefix, as transformers v5
  saves a tower alone) that holds the zoo tower `name` made with `kwargs`.

  Args:
    name: a registered text tower, or a SigLIP image tower (a ViT with
      pool='map', no class token and no classifier).
    kwargs: its `zoo.create` arguments (those not given are its defaults).

  Returns:
    {tensor name: shape}.

  Raises:
    ConversionError: `name` is neither, or has what transformers' SigLIP
      has not.
  """
  k = variants.options(name, kwargs)
  if _tower(name) == 'image':
    variants.check_vit('a transformers SigLIP', name)
    if (k['pool'], k['posemb'], k['gelu'], k['num_classes'],
        k['pre_logits'], k['layer_scale']) != ('map', 'learn', 'tanh', 0, 0,
                                               0.0):
      raise ConversionError(
          f'{name} is not a transformers SigLIP image tower: that has '
          "pool='map', a learned position embedding, the tanh GELU, no "
          'classifier, pre-logits or layer scale.')
  width, mlp_dim = k['hidden_size'], k['mlp_dim']
  shapes = {}

  def add(prefix, shape, bias=True):
    shapes[f'{prefix}.weight'] = shape
    if bias:
      shapes[f'{prefix}.bias'] = (shape[0],)

  def mlp(prefix):
    add(f'{prefix}.fc1', (mlp_dim, width))
    add(f'{prefix}.fc2', (width, mlp_dim))

  if _tower(name) == 'text':
    add('embeddings.token_embedding', (k['vocab_size'], width), False)
    add('embeddings.position_embedding', (k['max_length'], width), False)
  else:
    p = k['patch_size']
    add('embeddings.patch_embedding', (width, 3, p, p))
    add('embeddings.position_embedding',
        ((k['image_size'] // p)**2, width), False)
  for i in range(k['num_layers']):
    layer = f'encoder.layers.{i}'
    add(f'{layer}.layer_norm1', (width,))
    for part in 'kvq':
      add(f'{layer}.self_attn.{part}_proj', (width, width))
    add(f'{layer}.self_attn.out_proj', (width, width))
    add(f'{layer}.layer_norm2', (width,))
    mlp(f'{layer}.mlp')
  if _tower(name) == 'text':
    add('final_layer_norm', (width,))
    add('head', (k['projection_size'] or width, width))
  else:
    add('post_layernorm', (width,))
    shapes['head.probe'] = (1, 1, width)
    shapes['head.attention.in_proj_weight'] = (3 * width, width)
    shapes['head.attention.in_proj_bias'] = (3 * width,)
    add('head.attention.out_proj', (width, width))
    add('head.layernorm', (width,))
    mlp('head.mlp')
  return shapes


def convert(tensors: Mapping[str, np.ndarray], file: str,
            name: str | None = None, num_classes: int | None = None,
            image_size: int | None = None) -> Converted:
  """One tower of the file as the zoo's `name`: a text tower (the default
  where the file has one: the registered one of its sizes) or an image
  tower (a ViT name, or the default of a file with only one). The other
  tower and the logits' scale and bias are set aside (`convert_model`
  takes everything).

  Args:
    tensors: the file's tensors by name.
    file: what to call the file in error messages.
    name: a registered text tower (siglip_b16_text ...) or SigLIP image
      tower (siglip_b16 ...); None: the file's text tower, else its image
      tower, of the registered model of its sizes.
    num_classes: the text tower: must be None; the image tower: None or 0
      (its embedding), or N: a classifier left to initialization.
    image_size: the image tower's input side (its position embedding
      resized); None: the file's. A text tower takes none.

  Returns:
    The Converted tower; its kwargs fix the sizes the file gives where they
    differ from the model's defaults (and an image tower's num_classes,
    patch_size and image_size).

  Raises:
    ConversionError: the file has no such tower, no registered model has
      its sizes, an argument does not apply, or a tensor does not fit.
    ValueError: `name` is not a known model.
  """
  if name:
    registry.spec(name)  # A ValueError with the closest names if unknown.
    tower = _tower(name)
  else:
    tower = 'text' if _prefix(tensors, 'text') is not None else 'image'
  return _convert(tensors, file, tower, name, num_classes, image_size)


def _convert(tensors, file, tower, name, num_classes, image_size):
  """`convert` of `tower` ('text' or 'image')."""
  prefix = _prefix(tensors, tower)
  if prefix is None:
    raise ConversionError(f'{file} has no transformers SigLIP {tower} '
                          'tower' + (f', which {name} is.' if name else '.'))
  if tower == 'text':
    if image_size is not None or num_classes is not None:
      raise ConversionError(f'{file}: a text tower takes no image_size or '
                            'num_classes.')
    t, name, kwargs = _text(tensors, file, name, prefix)
  else:
    t, name, kwargs = _image(tensors, file, name, prefix, num_classes,
                             image_size)
  other = 'image' if tower == 'text' else 'text'
  for key in tensors:
    if key in _LOGITS:
      t.ignore(key, "the logits' scale and bias (convert_model)")
    elif key.startswith(_TOWERS[other]):
      t.ignore(key, f'the {other} tower')
  if t.has(f'{prefix}embeddings.position_ids'):  # Older files' constant.
    t.ignore(f'{prefix}embeddings.position_ids', 'a constant')
  return t.finish(name, kwargs, SOURCE)


def _layers(tensors: Mapping[str, Any], prefix: str) -> int:
  depth = 0
  while f'{prefix}encoder.layers.{depth}.layer_norm1.weight' in tensors:
    depth += 1
  return depth


def _text(tensors, file, name, prefix):
  """The Transfer of the text tower, its zoo name and kwargs."""
  words = tensors[f'{prefix}embeddings.token_embedding.weight']
  width = int(words.shape[1])
  depth = _layers(tensors, prefix)
  head = int(tensors[f'{prefix}head.weight'].shape[0])
  sizes = dict(
      vocab_size=int(words.shape[0]), hidden_size=width, num_layers=depth,
      mlp_dim=int(tensors[f'{prefix}encoder.layers.0.mlp.fc1.weight']
                  .shape[0]) if depth else 0,
      max_length=int(tensors[f'{prefix}embeddings.position_embedding.weight']
                     .shape[0]))
  projection = {'projection_size': None if head == width else head}
  if name:
    check_family(name, SiglipText, 'transformers SigLIP text')
  else:
    name = next((n for n in text_towers() if all(
        variants.options(n)[k] == v
        for k, v in {**sizes, **projection}.items())), None)
    if name is None:
      raise ConversionError(
          f'{file} holds a SigLIP text tower of {width} features, {depth} '
          f'layers and {sizes["vocab_size"]} tokens, which no zoo model '
          f'has; name the one whose heads it has: {", ".join(text_towers())}.')
  sizes.update(_sizes(file, name, width, depth, sizes['mlp_dim']))
  kwargs = variants.differing(name, **sizes, **projection)
  t = Transfer(tensors, target_shapes(name, kwargs), file, name)
  t.move(f'{prefix}embeddings.token_embedding.weight',
         'params/token_embedding')
  t.move(f'{prefix}embeddings.position_embedding.weight',
         'params/position_embedding')
  _encoder(t, prefix, depth)
  timm_vit.move_norm(t, f'{prefix}final_layer_norm', 'params/final_norm')
  t.move(f'{prefix}head.weight', 'params/head/kernel', _LINEAR)
  t.move(f'{prefix}head.bias', 'params/head/bias')
  return t, name, kwargs


def _image(tensors, file, name, prefix, num_classes, image_size):
  """The Transfer of the image tower, its zoo name and kwargs."""
  patches = tensors[f'{prefix}embeddings.patch_embedding.weight']
  width, patch = int(patches.shape[0]), int(patches.shape[-1])
  depth = _layers(tensors, prefix)
  mlp_dim = int(tensors[f'{prefix}head.mlp.fc1.weight'].shape[0])
  position = f'{prefix}embeddings.position_embedding.weight'
  _, side = posemb.split(tensors[position][None], False, position)
  if name:
    variants.check_vit(file, name)
  else:
    name = variants.vit(file, width, depth, mlp_dim, pool='map')
  kwargs = {'num_classes': num_classes or 0, 'patch_size': patch,
            'image_size': image_size or side * patch}
  kwargs.update(variants.differing(name, pool='map', gelu='tanh',
                                   **_sizes(file, name, width, depth,
                                            mlp_dim)))
  variants.check_image_size(kwargs['image_size'], patch)
  t = Transfer(tensors, target_shapes(name, kwargs), file,
               f'{name} with {patch}x{patch} patches')
  t.move(f'{prefix}embeddings.patch_embedding.weight',
         'params/embedding/kernel', _CONV)
  t.move(f'{prefix}embeddings.patch_embedding.bias', 'params/embedding/bias')
  t.move(position, 'params/pos_embedding', shape=tensors[position].shape,
         convert=lambda x: posemb.arrange(
             x[None], 0, False, kwargs['image_size'] // patch))
  _encoder(t, prefix, depth)
  timm_vit.move_norm(t, f'{prefix}post_layernorm', 'params/final_norm')
  head, target = f'{prefix}head', 'params/map_head'
  t.move(f'{head}.probe', f'{target}/probe')
  timm_vit.project_in(t, f'{head}.attention', f'{target}/Attention_0',
                      ('query', 'key', 'value'),
                      (f'{head}.attention.in_proj_weight',
                       f'{head}.attention.in_proj_bias'))
  timm_vit.project_out(t, f'{head}.attention.out_proj',
                       f'{target}/Attention_0')
  timm_vit.move_norm(t, f'{head}.layernorm', f'{target}/LayerNorm_0')
  timm_vit.move_mlp(t, f'{head}.mlp', target)
  if kwargs['num_classes']:  # A new classifier: the file has none.
    t.leave('params/head/kernel')
    t.leave('params/head/bias')
  return t, name, kwargs


def _sizes(file: str, name: str, width: int, depth: int,
           mlp_dim: int) -> dict[str, int]:
  """The tower's sizes as zoo options; its heads are as wide as `name`'s
  (the file does not say how many it has)."""
  d = variants.options(name)
  head_dim = d['hidden_size'] // d['num_heads']
  if width % head_dim:
    raise ConversionError(f'{file} does not fit {name}: its {width} '
                          f'features do not split into heads of {head_dim}, '
                          f"{name}'s.")
  return dict(hidden_size=width, num_layers=depth, mlp_dim=mlp_dim,
              num_heads=width // head_dim)


def _encoder(t: Transfer, prefix: str, depth: int):
  """The blocks, each as zoo/vit.py's EncoderBlock (either tower)."""
  for i in range(depth):
    source, target = f'{prefix}encoder.layers.{i}', f'params/block{i}'
    timm_vit.move_norm(t, f'{source}.layer_norm1', f'{target}/LayerNorm_0')
    for part, ours in (('q', 'query'), ('k', 'key'), ('v', 'value')):
      timm_vit.project_in(t, f'{source}.self_attn.{part}_proj',
                          f'{target}/Attention_0', (ours,))
    timm_vit.project_out(t, f'{source}.self_attn.out_proj',
                         f'{target}/Attention_0')
    timm_vit.move_norm(t, f'{source}.layer_norm2', f'{target}/LayerNorm_1')
    timm_vit.move_mlp(t, f'{source}.mlp', target)


class ConvertedSigLIP(NamedTuple):
  """A SiglipModel file as zoo/siglip.py's SigLIP: the module, its
  variables, and each tower's Converted (its bookkeeping)."""

  model: SigLIP
  variables: dict[str, Any]
  image: Converted
  text: Converted


def convert_model(tensors: Mapping[str, np.ndarray],
                  file: str = 'the checkpoint', image: str | None = None,
                  text: str | None = None) -> ConvertedSigLIP:
  """A transformers SiglipModel file, both towers and the logits' scale
  and bias, as zoo/siglip.py's SigLIP.

  Args:
    tensors: the file's tensors by name.
    file: what to call the file in error messages.
    image: the image tower's zoo name; None: the registered one of the
      file's sizes.
    text: the text tower's; None: likewise.

  Returns:
    The module, its {'params': {'image', 'text', 'logit_scale',
    'logit_bias'}} and the towers' Converted.

  Raises:
    ConversionError: the file lacks a tower or the logits' scale and bias,
      or does not fit (see `convert`).
  """
  missing = [k for k in _LOGITS if k not in tensors]
  if missing:
    raise ConversionError(f'{file} is not a SiglipModel: it has no '
                          f'{", ".join(missing)}.')
  towers = {tower: _convert(tensors, file, tower, name, None, None)
            for tower, name in (('image', image), ('text', text))}
  model = SigLIP(*(registry.create(c.name, **c.kwargs)
                   for c in towers.values()))
  params = {tower: c.variables['params'] for tower, c in towers.items()}
  for key in _LOGITS:
    if np.shape(tensors[key]) != (1,):
      raise ConversionError(f'{file}: {key} has shape '
                            f'{np.shape(tensors[key])}, not (1,).')
    params[key] = np.asarray(tensors[key], np.float32)
  return ConvertedSigLIP(model, {'params': params}, **towers)


def export_model(image: str, image_kwargs: Mapping[str, Any], text: str,
                 text_kwargs: Mapping[str, Any],
                 variables: Mapping[str, Any]) -> dict[str, np.ndarray]:
  """SigLIP's variables as a transformers SiglipModel state dict (what
  `SiglipModel.save_pretrained` writes).

  Args:
    image: the image tower's zoo name.
    image_kwargs: its `zoo.create` arguments.
    text: the text tower's zoo name.
    text_kwargs: its `zoo.create` arguments.
    variables: the SigLIP's {'params': {'image', 'text', 'logit_scale',
      'logit_bias'}}.

  Returns:
    {tensor name: float32 array}: logit_scale, logit_bias, then
    text_model.* and vision_model.*, as transformers orders them.
  """
  this = sys.modules[__name__]  # The converter export.state_dict runs.
  params = variables['params']
  out = {k: np.asarray(params[k], np.float32).reshape(1) for k in _LOGITS}
  for tower, name, kwargs in (('text', text, text_kwargs),
                              ('image', image, image_kwargs)):
    tensors = export.state_dict(this, name, kwargs,
                                {'params': params[tower]})
    out.update({f'{_TOWERS[tower]}{k}': v for k, v in tensors.items()})
  return out

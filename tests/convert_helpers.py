"""Builders for the conversion tests: randomized reference models, Google
ViT .npz fixtures, and the comparisons.

torch, torchvision and timm (the `convert-test` extra) are imported by the
tests that use them (`optional`, `originals`), not here.
"""

import dataclasses
import importlib
import importlib.util
import json
import os
import struct
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from flax import traverse_util

import zoo


def hide_triton():
  """Keeps torch from loading Triton (its GPU kernel compiler, which PyPI's
  torch wheels pull in and CPU runs never use): Triton's library crashes the
  process (segmentation fault) when it loads after TensorFlow's, as it
  would in the test processes. Call before importing torchvision or timm."""
  sys.modules.setdefault('triton', None)


class _ImportedOnFirstUse:
  """A module that is imported when one of its attributes is first read."""

  def __init__(self, name: str):
    self._name = name

  def __getattr__(self, attribute: str):
    if attribute.startswith('_'):  # pytest's look at a module's names.
      raise AttributeError(attribute)
    return getattr(importlib.import_module(self._name), attribute)


def optional(*names: str) -> list:
  """The original libraries a test module checks against (torch,
  torchvision, timm, ...; dotted names too), each None where its package is
  not installed. They are imported when a test first uses them, not when the
  module is collected: importing torch and transformers adds seconds to
  every worker's collection, and the fast tier runs none of the tests that
  use them (`against`)."""
  hide_triton()
  return [_ImportedOnFirstUse(name)
          if importlib.util.find_spec(name.split('.')[0]) else None
          for name in names]


def originals(*names: str) -> list:
  """`optional(*names)` for a module that checks against them throughout:
  without them the module is skipped, naming the extra that installs
  them."""
  libraries = optional(*names)
  for name, library in zip(names, libraries):
    if library is None:
      pytest.skip(f'needs {name.split(".")[0]}: pip install -e '
                  '.[convert-test]', allow_module_level=True)
  return libraries


def against(library, reference: str):
  """Marks a test compared with `library` (None without the convert-test
  extra), `reference` naming what it compares with: skipped without it,
  saying so, and in the slow tier, as every comparison with the originals
  is (docs/testing.md)."""
  skip = pytest.mark.skipif(library is None, reason=f'the reference is '
                            f'{reference}: pip install -e .[convert-test]')
  return lambda test: pytest.mark.slow(skip(test))


# Largest logit difference relative to the largest logit, float32.
RTOL = 1e-5

# The larger variants of a family whose full-size comparison the suite makes
# on one variant: the same code at other widths and depths (together 3.5
# minutes on a busy 2-core CPU). TESTS_ALL_SIZES=1 runs them.
all_sizes_only = pytest.mark.skipif(
    os.environ.get('TESTS_ALL_SIZES') != '1',
    reason='a larger variant of a family compared at full size on another: '
    'TESTS_ALL_SIZES=1 runs it')


def relative_difference(ours, theirs) -> float:
  ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
  return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


def zoo_logits(name: str, kwargs: dict, variables, images_nchw) -> np.ndarray:
  """The zoo model's float32 logits for NCHW images (as torch takes them)."""
  model = zoo.create(name, **kwargs)
  images = jnp.asarray(np.asarray(images_nchw).transpose(0, 2, 3, 1))
  return np.asarray(jax.jit(lambda v, x: model.apply(v, x, train=False))(
      variables, images))


def zoo_on_tokens(name: str, kwargs: dict, variables, tokens,
                  mask=None) -> np.ndarray:
  """The zoo text model's float32 output for token ids, padding masked
  where `mask` (True for real tokens) is given."""
  model = zoo.create(name, **kwargs)
  apply = jax.jit(lambda v, x, m: model.apply(v, x, mask=m))
  return np.asarray(apply(variables, jnp.asarray(tokens, jnp.int32),
                          None if mask is None else jnp.asarray(mask)))

def zoo_variable_names(name: str, kwargs: dict) -> set[str]:
  """'params/...' and 'batch_stats/...' of the zoo model, from its own
  initialization (shapes only)."""
  model = zoo.create(name, **kwargs)
  shape = zoo.input_shape(name, **kwargs)
  variables = jax.eval_shape(lambda: model.init(
      jax.random.PRNGKey(0),
      jnp.zeros((1, *shape), zoo.spec(name).input_dtype), train=False))
  return set(traverse_util.flatten_dict(nn.meta.unbox(variables), sep='/'))


def assert_exactly_once(converted, source_names, name: str, kwargs: dict):
  """Every tensor of the file read once, every variable of the model set
  once (or left to initialization, for a new head)."""
  assert converted.reads == {n: 1 for n in source_names}
  assert converted.writes == {n: 1 for n in zoo_variable_names(name, kwargs)}


def randomize_torch(model, seed: int = 0):
  """Every parameter and buffer of a torch model drawn at random, so that no
  tensor keeps a value (ones, zeros) that a wrong conversion would also
  give: weights N(0, 1/fan_in), biases N(0, 0.2), normalization scales
  U(0.5, 1.5), BatchNorm running means N(0, 0.2) and variances U(0.5, 2),
  class token and position embedding N(0, 0.5)."""
  import torch  # pylint: disable=import-outside-toplevel
  generator = torch.Generator().manual_seed(seed)

  def fill(tensor, kind):
    shape = tensor.shape
    if kind == 'scale':
      value = 0.5 + torch.rand(shape, generator=generator)
    elif kind == 'var':
      value = 0.5 + 1.5 * torch.rand(shape, generator=generator)
    elif kind == 'weight':
      fan_in = int(np.prod(shape[1:]))
      value = torch.randn(shape, generator=generator) / np.sqrt(fan_in)
    elif kind == 'embedding':
      value = 0.5 * torch.randn(shape, generator=generator)
    else:
      value = 0.2 * torch.randn(shape, generator=generator)
    tensor.copy_(value)

  with torch.no_grad():
    for module in model.modules():
      norm = (isinstance(module, (torch.nn.BatchNorm2d, torch.nn.LayerNorm))
              or type(module).__name__.endswith('RMSNorm'))  # transformers'
      for name, param in module.named_parameters(recurse=False):
        if norm and name == 'weight':
          fill(param, 'scale')
        elif param.ndim >= 2 and name not in ('cls_token', 'pos_embed'):
          fill(param, 'weight')
        elif name in ('cls_token', 'pos_embed'):
          fill(param, 'embedding')
        else:
          fill(param, 'bias')
      if isinstance(module, torch.nn.BatchNorm2d):
        fill(module.running_mean, 'bias')
        fill(module.running_var, 'var')
  return model.eval()


def torch_logits(model, images_nchw) -> np.ndarray:
  import torch  # pylint: disable=import-outside-toplevel
  with torch.no_grad():
    return model(torch.as_tensor(np.asarray(images_nchw))).numpy()


def images(n: int, size: int, seed: int = 0) -> np.ndarray:
  """n random NCHW float32 images."""
  return np.random.default_rng(seed).normal(
      size=(n, 3, size, size)).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class GoogleViT:
  """The sizes of a Google ViT .npz fixture (ViT-Ti/16's by default)."""

  width: int = 192
  depth: int = 12
  num_heads: int = 3
  mlp_dim: int = 768
  patch: int = 16
  grid: int = 3
  num_classes: int = 7


def google_vit_npz(sizes: GoogleViT = GoogleViT(), layout: str = 'vit_jax',
                   pool: str = 'token', posemb: str = 'learn',
                   pre_logits: int = 0, seed: int = 0) -> dict[str, np.ndarray]:
  """Random arrays named and shaped as in Google's published ViT
  checkpoints.

  layout 'vit_jax': the ViT paper's and AugReg's .npz files, names as in
  google-research/vision_transformer vit_jax/models_vit.py (pre-Linen
  numbering of a block's children: LayerNorm_0,
  MultiHeadDotProductAttention_1, LayerNorm_2, MlpBlock_3; the position
  embedding in Transformer/posembed_input with the class token's entry;
  saved flat by vit_jax/checkpoint.py, '/'-joined).
  layout 'big_vision' and 'big_vision_scan': big_vision's own checkpoints
  (google-research/big_vision big_vision/models/vit.py at 0127fb6b: a
  'params/' prefix (utils.load_params), Linen numbering LayerNorm_0,
  MultiHeadDotProductAttention_0, LayerNorm_1, MlpBlock_0, `pos_embedding`
  at the top without a class-token entry; with scan, the blocks stacked in
  'Transformer/encoderblock', see its `scan_to_pyloop`). timm's reader of
  these files, `_load_weights` in timm/models/vision_transformer.py, uses
  the same names.
  pool 'gap' has no 'cls'; posemb 'sincos2d' no position embedding;
  pre_logits > 0 adds 'pre_logits' (ImageNet-21k checkpoints of the ViT
  paper).
  """
  s = sizes
  rng = np.random.default_rng(seed)
  head_dim = s.width // s.num_heads

  def normal(*shape, std=None):
    std = std if std is not None else (
        1 / np.sqrt(np.prod(shape[:-1])) if len(shape) > 1 else 0.2)
    return (std * rng.normal(size=shape)).astype(np.float32)

  def scale(n):
    return (0.5 + rng.random(n)).astype(np.float32)

  old = layout == 'vit_jax'
  prefix = '' if old else 'params/'
  ln0, attention, ln1, mlp = (
      ('LayerNorm_0', 'MultiHeadDotProductAttention_1', 'LayerNorm_2',
       'MlpBlock_3') if old else
      ('LayerNorm_0', 'MultiHeadDotProductAttention_0', 'LayerNorm_1',
       'MlpBlock_0'))
  t = {f'{prefix}embedding/kernel': normal(s.patch, s.patch, 3, s.width),
       f'{prefix}embedding/bias': normal(s.width)}
  if pool == 'token':
    t[f'{prefix}cls'] = normal(1, 1, s.width, std=0.5)
  if posemb == 'learn':
    tokens = s.grid**2 + (1 if old and pool == 'token' else 0)
    key = ('Transformer/posembed_input/pos_embedding' if old else
           'pos_embedding')
    t[f'{prefix}{key}'] = normal(1, tokens, s.width, std=0.5)
  blocks = []
  for _ in range(s.depth):
    blocks.append({
        f'{ln0}/scale': scale(s.width), f'{ln0}/bias': normal(s.width),
        **{f'{attention}/{part}/kernel': normal(s.width, s.num_heads,
                                                 head_dim)
           for part in ('query', 'key', 'value')},
        **{f'{attention}/{part}/bias': normal(s.num_heads, head_dim)
           for part in ('query', 'key', 'value')},
        f'{attention}/out/kernel': normal(s.num_heads, head_dim, s.width,
                                          std=1 / np.sqrt(s.width)),
        f'{attention}/out/bias': normal(s.width),
        f'{ln1}/scale': scale(s.width), f'{ln1}/bias': normal(s.width),
        f'{mlp}/Dense_0/kernel': normal(s.width, s.mlp_dim),
        f'{mlp}/Dense_0/bias': normal(s.mlp_dim),
        f'{mlp}/Dense_1/kernel': normal(s.mlp_dim, s.width),
        f'{mlp}/Dense_1/bias': normal(s.width),
    })
  if layout == 'big_vision_scan':
    for key in blocks[0]:
      t[f'{prefix}Transformer/encoderblock/{key}'] = np.stack(
          [b[key] for b in blocks])
  else:
    for i, block in enumerate(blocks):
      for key, value in block.items():
        t[f'{prefix}Transformer/encoderblock_{i}/{key}'] = value
  t[f'{prefix}Transformer/encoder_norm/scale'] = scale(s.width)
  t[f'{prefix}Transformer/encoder_norm/bias'] = normal(s.width)
  features = s.width
  if pre_logits:
    t[f'{prefix}pre_logits/kernel'] = normal(s.width, pre_logits)
    t[f'{prefix}pre_logits/bias'] = normal(pre_logits)
    features = pre_logits
  t[f'{prefix}head/kernel'] = normal(features, s.num_classes)
  t[f'{prefix}head/bias'] = normal(s.num_classes)
  return t


def torchvision_resnet18_state_dict(num_classes: int = 1000,
                                    seed: int = 0) -> dict[str, np.ndarray]:
  """Random arrays named and shaped as torchvision's resnet18().state_dict()
  (torchvision/models/resnet.py), for tests that run without torch."""
  rng = np.random.default_rng(seed)
  state = {}

  def conv(name, out, inp, k):
    state[f'{name}.weight'] = (rng.normal(size=(out, inp, k, k)) /
                               np.sqrt(inp * k * k)).astype(np.float32)

  def bn(name, n):
    state[f'{name}.weight'] = (0.5 + rng.random(n)).astype(np.float32)
    state[f'{name}.bias'] = (0.2 * rng.normal(size=n)).astype(np.float32)
    state[f'{name}.running_mean'] = (0.2 * rng.normal(size=n)).astype(
        np.float32)
    state[f'{name}.running_var'] = (0.5 + rng.random(n)).astype(np.float32)
    state[f'{name}.num_batches_tracked'] = np.array(7, np.int64)

  conv('conv1', 64, 3, 7)
  bn('bn1', 64)
  inp = 64
  for i, width in enumerate((64, 128, 256, 512), 1):
    for j in range(2):
      conv(f'layer{i}.{j}.conv1', width, inp, 3)
      bn(f'layer{i}.{j}.bn1', width)
      conv(f'layer{i}.{j}.conv2', width, width, 3)
      bn(f'layer{i}.{j}.bn2', width)
      if j == 0 and i > 1:
        conv(f'layer{i}.{j}.downsample.0', width, inp, 1)
        bn(f'layer{i}.{j}.downsample.1', width)
      inp = width
  state['fc.weight'] = (rng.normal(size=(num_classes, 512)) /
                        np.sqrt(512)).astype(np.float32)
  state['fc.bias'] = (0.2 * rng.normal(size=num_classes)).astype(np.float32)
  return state


def write_safetensors(path, tensors: dict, metadata=None):
  """A .safetensors file written byte by byte as the format's spec says
  (huggingface/safetensors README): u64 little-endian header length, the
  JSON header, the data; so the reader is checked against the spec, not
  against itself."""
  codes = {np.dtype(np.float32): 'F32', np.dtype(np.int64): 'I64',
           np.dtype(np.float16): 'F16', np.dtype(ml_dtypes.bfloat16): 'BF16'}
  header, blobs, offset = {}, [], 0
  if metadata:
    header['__metadata__'] = metadata
  for name, array in tensors.items():
    data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder('<'))
    data = data.tobytes()
    header[name] = {'dtype': codes[array.dtype], 'shape': list(array.shape),
                    'data_offsets': [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
  text = json.dumps(header).encode()
  text += b' ' * (-len(text) % 8)
  with open(path, 'wb') as f:
    f.write(struct.pack('<Q', len(text)) + text + b''.join(blobs))

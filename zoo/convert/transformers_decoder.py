"""Hugging Face transformers' decoder-only language models (their
`model.safetensors`) to the zoo's `Decoder`: GPT-2 (`GPT2LMHeadModel`) as
gpt2 and gpt2_medium, and the Llama shape (`LlamaForCausalLM`,
`Qwen2ForCausalLM`) as smollm2_*, llama3_2_1b and qwen2_5_0_5b.

transformers' names, with or without the prefix of the model with a head
('transformer.' for GPT-2, 'model.' for the Llama shape): GPT-2's `wte`,
`wpe` (token and position embeddings), `h.{i}.ln_1`, `attn.c_attn` (query,
key and value fused in a `Conv1D`, whose weight is (in, out): columns
[part][head][head_dim]), `attn.c_proj`, `ln_2`, `mlp.c_fc`, `mlp.c_proj`,
`ln_f`, and the causal-mask buffers `attn.bias` and `attn.masked_bias` of
older files (constants, set aside); the Llama shape's `embed_tokens`,
`layers.{i}.input_layernorm`, `self_attn.{q,k,v,o}_proj` (Linear, (out,
in); q, k and v with biases in Qwen2), `post_attention_layernorm`,
`mlp.{gate,up,down}_proj`, `norm`. `lm_head.weight` is the head where the
file has one that is not the token embedding; a tied file has none (or the
same values, set aside).

The weights do not say how many heads share the width, nor RoPE's base
and scaling or the norms' epsilon: those come from the model's config.json,
which transformers writes beside the weights (`read_config`; `zoo.convert.
load` and the recipes read it): `n_head` or `num_attention_heads`,
`num_key_value_heads`, `head_dim`, `rope_theta`, Llama 3's RoPE scaling
(`rope_parameters`, transformers 4's `rope_scaling`; another rope_type is
an error), `layer_norm_epsilon` or `rms_norm_eps`. Those that differ from
the zoo model's are its kwargs. Without a config.json (or where it lacks a
key) they are the zoo model's, and the heads are counted in its head width
(64 in every registered variant): a model with heads of another width,
e.g. GPT-2 with n_embd=64 and n_head=4, converts wrongly without its
config.json. Without `name`, the registered variant of the file's sizes is
chosen.
"""

import json
import os
from typing import Any, Mapping

import numpy as np
from etils import epath

from zoo import registry
from zoo.convert import variants
from zoo.convert.transfer import (ConversionError, Converted, Transfer,
                                  check_family, target_shapes)
from zoo.decoder import Decoder

SOURCE = 'transformers'
_LINEAR = (1, 0)  # torch's Linear weight (out, in) -> kernel (in, out).
_TIED = 'the head, tied to the token embedding'
_MASK = 'the causal mask (a constant)'


def _layout(tensors: Mapping[str, Any]) -> tuple[str, str] | None:
  """('gpt2' or 'llama', the names' prefix) of a transformers file."""
  for prefix in ('transformer.', ''):
    if (f'{prefix}wte.weight' in tensors and
        f'{prefix}h.0.attn.c_attn.weight' in tensors):
      return 'gpt2', prefix
  for prefix in ('model.', ''):
    if (f'{prefix}embed_tokens.weight' in tensors and
        f'{prefix}layers.0.self_attn.q_proj.weight' in tensors):
      return 'llama', prefix
  return None


def matches(tensors: Mapping[str, np.ndarray]) -> bool:
  """Whether `tensors` are named as a transformers GPT-2 or Llama-shaped
  state dict.

  Args:
    tensors: a checkpoint's tensors by name.

  Returns:
    True if the names are this source's.
  """
  return _layout(tensors) is not None


def read_config(file: str | os.PathLike) -> dict[str, Any] | None:
  """The config.json beside `file` (local, or a URL such as gs://...),
  which transformers' `save_pretrained` and Hub repositories keep with the
  weights.

  Args:
    file: the weights file.

  Returns:
    Its settings, or None where there is no config.json.

  Raises:
    ConversionError: the config.json is not a JSON object.
  """
  path = epath.Path(os.fspath(file)).parent / 'config.json'
  if not path.is_file():
    return None
  try:
    config = json.loads(path.read_text())
  except ValueError as e:
    raise ConversionError(f'{path} is not JSON ({e}).') from None
  if not isinstance(config, dict):
    raise ConversionError(f'{path} holds a JSON {type(config).__name__}, '
                          'not a model\'s settings.')
  return config


def _config_options(config: Mapping[str, Any], file: str,
                    gpt2: bool) -> dict[str, Any]:
  """The Decoder options that transformers' `config` sets: the heads
  (num_heads, num_kv_heads, head_dim) where it names them, norm_epsilon,
  and for the Llama shape rope_theta and rope_scaling."""

  def get(*keys):
    return next((config[k] for k in keys if config.get(k) is not None), None)

  found = dict(num_heads=get('n_head', 'num_attention_heads'),
               num_kv_heads=get('num_key_value_heads'),
               head_dim=get('head_dim'),
               norm_epsilon=get('layer_norm_epsilon', 'rms_norm_eps'))
  found = {k: int(v) if k != 'norm_epsilon' else float(v)
           for k, v in found.items() if v is not None}
  if gpt2:
    return found
  # transformers 5 keeps RoPE's base and scaling in rope_parameters; 4 the
  # base in rope_theta and the scaling (or null) in rope_scaling.
  rope = get('rope_parameters', 'rope_scaling') or {}
  theta = rope.get('rope_theta', config.get('rope_theta'))
  if theta is not None:
    found['rope_theta'] = float(theta)
  kind = rope.get('rope_type', rope.get('type', 'default'))
  if kind == 'llama3':
    try:
      found['rope_scaling'] = (
          float(rope['factor']), float(rope['low_freq_factor']),
          float(rope['high_freq_factor']),
          int(rope['original_max_position_embeddings']))
    except KeyError as e:
      raise ConversionError(f'{file}: the llama3 RoPE scaling of its '
                            f'config.json has no {e}.') from None
  elif kind == 'default':
    found['rope_scaling'] = None  # Also where the zoo model has a scaling.
  else:
    raise ConversionError(f'{file}: its config.json\'s RoPE scaling '
                          f'{kind!r} is not supported; the zoo\'s Decoder '
                          'has Llama 3\'s (llama3) or none (default).')
  return found


def decoders(positions: str) -> list[str]:
  """The registered decoders with `positions` ('learned': GPT-2's;
  'rope': the Llama shape's)."""
  return [n for n in registry.list_models()
          if registry.spec(n).cls is Decoder
          and variants.options(n)['positions'] == positions]


def _check(file: str, name: str, positions: str):
  check_family(name, Decoder, 'transformers decoder')
  if variants.options(name)['positions'] != positions:
    raise ConversionError(
        f'{file} holds a {"GPT-2" if positions == "learned" else "Llama"}-'
        f'shaped model; it converts to one of '
        f'{", ".join(decoders(positions))}, not {name!r}.')


def template(name: str, kwargs: Mapping[str, Any]) -> dict[str, tuple]:
  """The names and shapes, in transformers' state_dict order, of the file
  `save_pretrained` writes for the zoo decoder `name` made with `kwargs`
  (GPT2LMHeadModel's or LlamaForCausalLM's; a tied head is not written).

  Args:
    name: a registered decoder.
    kwargs: its `zoo.create` arguments (those not given are its defaults).

  Returns:
    {tensor name: shape}.

  Raises:
    ConversionError: `name` is not a decoder, or has what transformers'
      GPT-2 or Llama has not.
  """
  check_family(name, Decoder, 'transformers decoder')
  k = variants.options(name, kwargs)
  width, vocab, mlp_dim = k['hidden_size'], k['vocab_size'], k['mlp_dim']
  heads, kv_heads = k['num_heads'], k['num_kv_heads'] or k['num_heads']
  head_dim = k['head_dim'] or width // heads
  gpt2 = (k['positions'] == 'learned' and k['norm'] == 'layer'
          and k['mlp'] == 'gelu' and k['bias'] and kv_heads == heads
          and heads * head_dim == width)
  llama = (k['positions'] == 'rope' and k['norm'] == 'rms'
           and k['mlp'] == 'swiglu' and not k['bias'])
  if not (gpt2 or llama):
    raise ConversionError(
        f'{name} with positions={k["positions"]!r}, norm={k["norm"]!r}, '
        f'mlp={k["mlp"]!r}, bias={k["bias"]} is neither transformers\' '
        'GPT-2 (learned, layer, gelu, biases, multi-head) nor its Llama '
        '(rope, rms, swiglu, no biases but Qwen2\'s qkv_bias).')
  shapes = {}

  def add(prefix, shape, bias=False):
    shapes[f'{prefix}.weight'] = shape
    if bias:
      shapes[f'{prefix}.bias'] = (shape[-1] if gpt2 else shape[0],)

  if gpt2:
    add('transformer.wte', (vocab, width))
    add('transformer.wpe', (k['max_length'], width))
    for i in range(k['num_layers']):
      block = f'transformer.h.{i}'
      add(f'{block}.ln_1', (width,), True)
      add(f'{block}.attn.c_attn', (width, 3 * width), True)  # Conv1D.
      add(f'{block}.attn.c_proj', (width, width), True)
      add(f'{block}.ln_2', (width,), True)
      add(f'{block}.mlp.c_fc', (width, mlp_dim), True)
      add(f'{block}.mlp.c_proj', (mlp_dim, width), True)
    add('transformer.ln_f', (width,), True)
  else:
    add('model.embed_tokens', (vocab, width))
    for i in range(k['num_layers']):
      block = f'model.layers.{i}'
      add(f'{block}.self_attn.q_proj', (heads * head_dim, width),
          k['qkv_bias'])
      for part in 'kv':
        add(f'{block}.self_attn.{part}_proj', (kv_heads * head_dim, width),
            k['qkv_bias'])
      add(f'{block}.self_attn.o_proj', (width, heads * head_dim))
      add(f'{block}.mlp.gate_proj', (mlp_dim, width))
      add(f'{block}.mlp.up_proj', (mlp_dim, width))
      add(f'{block}.mlp.down_proj', (width, mlp_dim))
      add(f'{block}.input_layernorm', (width,))
      add(f'{block}.post_attention_layernorm', (width,))
    add('model.norm', (width,))
  if not k['tie_embeddings']:
    add('lm_head', (vocab, width))
  return shapes


def convert(tensors: Mapping[str, np.ndarray], file: str,
            name: str | None = None, num_classes: int | None = None,
            image_size: int | None = None,
            config: Mapping[str, Any] | None = None) -> Converted:
  """The zoo decoder `name` (default: the registered one of the file's
  sizes) with the file's weights.

  Args:
    tensors: the file's tensors by name.
    file: what to call the file in error messages.
    name: a registered decoder of the file's kind (GPT-2 or Llama shape).
    num_classes: must be None: a language model's outputs are its
      vocabulary.
    image_size: must be None.
    config: the model's config.json (`read_config`), which gives its heads,
      RoPE base and scaling, and norm epsilon; None: those of `name`, the
      heads counted in its head width.

  Returns:
    The Converted decoder; its kwargs fix the sizes the file gives
    (vocab_size, hidden_size, num_layers, mlp_dim, num_heads, num_kv_heads,
    head_dim, max_length of GPT-2's positions, qkv_bias, tie_embeddings)
    and `config` gives (rope_theta, rope_scaling, norm_epsilon) where they
    differ from the model's defaults.

  Raises:
    ConversionError: `num_classes` or `image_size` given, no decoder has
      the file's sizes, `name` is not a decoder of the file's kind, the
      heads do not divide or are not those of `config`, `config` has a RoPE
      scaling other than Llama 3's, or a tensor does not fit.
    ValueError: `name` is not a known model.
  """
  if num_classes is not None or image_size is not None:
    raise ConversionError(f'{file} is a language model: it takes neither '
                          'num_classes nor image_size (its outputs are its '
                          'vocabulary).')
  kind, prefix = _layout(tensors)
  gpt2 = kind == 'gpt2'
  positions = 'learned' if gpt2 else 'rope'
  layer = f'{prefix}h' if gpt2 else f'{prefix}layers'
  norm = 'ln_1' if gpt2 else 'input_layernorm'
  depth = 0
  while f'{layer}.{depth}.{norm}.weight' in tensors:
    depth += 1
  embedding = tensors[f'{prefix}{"wte" if gpt2 else "embed_tokens"}.weight']
  vocab, width = (int(n) for n in embedding.shape)
  if gpt2:
    q_rows = kv_rows = width
    mlp_dim = int(tensors[f'{layer}.0.mlp.c_fc.weight'].shape[1])
  else:
    attention = f'{layer}.0.self_attn'
    q_rows = int(tensors[f'{attention}.q_proj.weight'].shape[0])
    kv_rows = int(tensors[f'{attention}.k_proj.weight'].shape[0])
    mlp_dim = int(tensors[f'{layer}.0.mlp.gate_proj.weight'].shape[0])
  # A head of its own where the file has one with other values.
  tied = 'lm_head.weight' not in tensors or np.array_equal(
      tensors['lm_head.weight'], embedding)
  sizes = dict(vocab_size=vocab, hidden_size=width, num_layers=depth,
               mlp_dim=mlp_dim)
  if name:
    _check(file, name, positions)
  else:
    name = next((n for n in decoders(positions) if all(
        variants.options(n)[k] == v for k, v in sizes.items())), None)
    if name is None:
      raise ConversionError(
          f'{file} holds a {"GPT-2" if gpt2 else "Llama"}-shaped model of '
          f'{width} features, {depth} layers and {vocab} tokens, which no '
          f'zoo model has; name the one whose heads and positions it has: '
          f'{", ".join(decoders(positions))}.')
  given = _config_options(config, file, gpt2) if config else {}
  heads, kv_heads, head_dim = (given.pop(k, None) for k in (
      'num_heads', 'num_kv_heads', 'head_dim'))
  if heads:  # As transformers splits the rows.
    head_dim = head_dim or width // heads
    kv_heads = kv_heads or heads
    if (heads * head_dim, kv_heads * head_dim) != (q_rows, kv_rows):
      raise ConversionError(
          f'{file} does not fit its config.json: {heads} query and '
          f'{kv_heads} key heads of {head_dim} features are '
          f'{heads * head_dim} and {kv_heads * head_dim} features, but its '
          f'tensors have {q_rows} and {kv_rows}.')
  else:  # No heads in a config.json: counted in the zoo model's width.
    d = variants.options(name)
    head_dim = d['head_dim'] or d['hidden_size'] // d['num_heads']
    if q_rows % head_dim or kv_rows % head_dim:
      raise ConversionError(f'{file} does not fit {name}: its {q_rows} '
                            f'query and {kv_rows} key features do not split '
                            f'into heads of {head_dim}, {name}\'s.')
    heads, kv_heads = q_rows // head_dim, kv_rows // head_dim
  file_options = dict(sizes, num_heads=heads, tie_embeddings=tied, **given)
  if gpt2:
    file_options['max_length'] = int(tensors[f'{prefix}wpe.weight'].shape[0])
  else:
    file_options['num_kv_heads'] = kv_heads
    file_options['qkv_bias'] = f'{attention}.q_proj.bias' in tensors
  kwargs = variants.differing(name, **file_options)
  if width // heads != head_dim:
    kwargs['head_dim'] = head_dim
  t = Transfer(tensors, target_shapes(name, kwargs), file, name)
  (_gpt2 if gpt2 else _llama)(t, prefix, depth)
  if t.has('lm_head.weight'):
    if tied:
      t.ignore('lm_head.weight', _TIED)
    else:
      t.move('lm_head.weight', 'params/head/kernel', _LINEAR)
  return t.finish(name, kwargs, SOURCE)


def _gpt2(t: Transfer, prefix: str, depth: int):
  t.move(f'{prefix}wte.weight', 'params/token_embedding')
  t.move(f'{prefix}wpe.weight', 'params/position_embedding')
  for i in range(depth):
    source, target = f'{prefix}h.{i}', f'params/block{i}'
    attention = f'{target}/attention'
    width, heads, head_dim = t.targets[f'{attention}/query/kernel']
    _norm(t, f'{source}.ln_1', f'{target}/attention_norm', bias=True)
    weight = t.take(f'{source}.attn.c_attn.weight', (width, 3 * width))
    weight = weight.reshape(width, 3, heads, head_dim)
    bias = t.take(f'{source}.attn.c_attn.bias', (3 * width,))
    bias = bias.reshape(3, heads, head_dim)
    for k, part in enumerate(('query', 'key', 'value')):
      t.put(f'{attention}/{part}/kernel', weight[:, k])
      t.put(f'{attention}/{part}/bias', bias[k])
    t.move(f'{source}.attn.c_proj.weight', f'{attention}/out/kernel',
           shape=(width, width),
           convert=lambda w, h=heads, d=head_dim: w.reshape(h, d, -1))
    t.move(f'{source}.attn.c_proj.bias', f'{attention}/out/bias')
    _norm(t, f'{source}.ln_2', f'{target}/mlp_norm', bias=True)
    # Conv1D weights are (in, out) already.
    for theirs, ours in (('c_fc', 'up'), ('c_proj', 'down')):
      t.move(f'{source}.mlp.{theirs}.weight', f'{target}/{ours}/kernel')
      t.move(f'{source}.mlp.{theirs}.bias', f'{target}/{ours}/bias')
    for buffer in ('attn.bias', 'attn.masked_bias'):
      if t.has(f'{source}.{buffer}'):
        t.ignore(f'{source}.{buffer}', _MASK)
  _norm(t, f'{prefix}ln_f', 'params/final_norm', bias=True)


def _llama(t: Transfer, prefix: str, depth: int):
  t.move(f'{prefix}embed_tokens.weight', 'params/token_embedding')
  for i in range(depth):
    source, target = f'{prefix}layers.{i}', f'params/block{i}'
    attention = f'{target}/attention'
    _norm(t, f'{source}.input_layernorm', f'{target}/attention_norm')
    for theirs, ours in (('q', 'query'), ('k', 'key'), ('v', 'value')):
      # (heads * head_dim, width) -> (width, heads, head_dim).
      width, heads, head_dim = t.targets[f'{attention}/{ours}/kernel']
      t.move(f'{source}.self_attn.{theirs}_proj.weight',
             f'{attention}/{ours}/kernel', shape=(heads * head_dim, width),
             convert=lambda w, s=(heads, head_dim, width): (
                 w.reshape(s).transpose(2, 0, 1)))
      if t.has(f'{source}.self_attn.{theirs}_proj.bias'):
        t.move(f'{source}.self_attn.{theirs}_proj.bias',
               f'{attention}/{ours}/bias', shape=(heads * head_dim,),
               convert=lambda b, s=(heads, head_dim): b.reshape(s))
    heads, head_dim, width = t.targets[f'{attention}/out/kernel']
    t.move(f'{source}.self_attn.o_proj.weight', f'{attention}/out/kernel',
           shape=(width, heads * head_dim),
           convert=lambda w, s=(heads, head_dim, width): w.T.reshape(s))
    _norm(t, f'{source}.post_attention_layernorm', f'{target}/mlp_norm')
    for part in ('gate', 'up', 'down'):
      t.move(f'{source}.mlp.{part}_proj.weight', f'{target}/{part}/kernel',
             _LINEAR)
  _norm(t, f'{prefix}norm', 'params/final_norm')


def _norm(t: Transfer, source: str, target: str, bias: bool = False):
  t.move(f'{source}.weight', f'{target}/scale')
  if bias:
    t.move(f'{source}.bias', f'{target}/bias')

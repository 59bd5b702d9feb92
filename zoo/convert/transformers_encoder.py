"""Hugging Face transformers' BERT and RoBERTa (their `model.safetensors`) to
the zoo's `Encoder`: bert_base, bert_large, roberta_base, roberta_large.

transformers' names, after the prefix of the model with a head ('bert.' or
'roberta.'; none for a bare BertModel): `embeddings.word_embeddings`,
`position_embeddings`, `token_type_embeddings`, `LayerNorm`; per layer
`encoder.layer.{i}.attention.self.{query,key,value}`,
`attention.output.dense`, `attention.output.LayerNorm`,
`intermediate.dense`, `output.dense`, `output.LayerNorm` (Linear weights
(out, in)); `pooler.dense`. Heads: BERT's masked-LM `cls.predictions`
(`transform.dense`, `transform.LayerNorm`, `bias`; the decoder is the word
embedding), its next-sentence `cls.seq_relationship` (pretraining only: set
aside), its classifier `classifier`; RoBERTa's `lm_head` (`dense`,
`layer_norm`, `bias`) and classification head `classifier.dense` (the
zoo's pooler) and `classifier.out_proj`. Files saved before transformers
renamed them name layer norms `gamma` and `beta`, and hold the constant
`embeddings.position_ids`.

With num_classes=0 the model has the masked-LM head (left to initialization
where the file has none); with N, the pooler and a classifier of N classes
(the file's where it has N). The weights do not say RoBERTa's position
numbering nor the norms' epsilon: those are the zoo model's.
"""

from typing import Any, Mapping

import numpy as np

from zoo import registry
from zoo.convert import heads, variants
from zoo.convert.transfer import (ConversionError, Converted, Transfer,
                                  check_family, target_shapes)
from zoo.encoder import Encoder

SOURCE = 'transformers'
_LINEAR = (1, 0)  # torch's Linear weight (out, in) -> kernel (in, out).
_TIED = 'the masked-LM decoder, tied to the word embedding'
_OLD_NAMES = {'.gamma': '.weight', '.beta': '.bias'}


def _prefix(tensors: Mapping[str, Any]) -> str | None:
  for prefix in ('bert.', 'roberta.', ''):
    if (f'{prefix}embeddings.word_embeddings.weight' in tensors and
        f'{prefix}encoder.layer.0.attention.self.query.weight' in tensors):
      return prefix
  return None


def matches(tensors: Mapping[str, np.ndarray]) -> bool:
  """Whether `tensors` are named as a transformers BERT or RoBERTa.

  Args:
    tensors: a checkpoint's tensors by name.

  Returns:
    True if the names are this source's.
  """
  return _prefix(tensors) is not None


def _roberta(kwargs: Mapping[str, Any]) -> bool:
  return kwargs['pad_token_id'] is not None


def _heads(kwargs: Mapping[str, Any]) -> dict[str, str]:
  """transformers' names of the heads of the model `kwargs` describe."""
  if _roberta(kwargs):
    return dict(model='roberta.', mlm='lm_head.', mlm_norm='layer_norm',
                pooler='classifier.dense', classifier='classifier.out_proj')
  return dict(model='bert.', mlm='cls.predictions.',
              mlm_norm='transform.LayerNorm', pooler='bert.pooler.dense',
              classifier='classifier')


def template(name: str, kwargs: Mapping[str, Any]) -> dict[str, tuple]:
  """The names and shapes, in transformers' state_dict order, of the file
  `save_pretrained` writes for the zoo encoder `name` made with `kwargs`:
  BertForMaskedLM's or RobertaForMaskedLM's with num_classes=0, else
  BertForSequenceClassification's or RobertaForSequenceClassification's
  (the masked-LM decoder, tied to the word embedding, is not written).

  Args:
    name: a registered encoder.
    kwargs: its `zoo.create` arguments (those not given are its defaults).

  Returns:
    {tensor name: shape}.

  Raises:
    ConversionError: `name` is not an encoder.
  """
  check_family(name, Encoder, 'transformers encoder')
  k = variants.options(name, kwargs)
  width, mlp_dim = k['hidden_size'], k['mlp_dim']
  n = _heads(k)
  shapes = {}

  def add(prefix, shape, bias=True):
    shapes[f'{prefix}.weight'] = shape
    if bias:
      shapes[f'{prefix}.bias'] = (shape[0],)

  base = f'{n["model"]}embeddings'
  add(f'{base}.word_embeddings', (k['vocab_size'], width), False)
  add(f'{base}.position_embeddings', (k['max_length'], width), False)
  add(f'{base}.token_type_embeddings', (k['type_vocab_size'], width), False)
  add(f'{base}.LayerNorm', (width,))
  for i in range(k['num_layers']):
    block = f'{n["model"]}encoder.layer.{i}'
    for part in ('query', 'key', 'value'):
      add(f'{block}.attention.self.{part}', (width, width))
    add(f'{block}.attention.output.dense', (width, width))
    add(f'{block}.attention.output.LayerNorm', (width,))
    add(f'{block}.intermediate.dense', (mlp_dim, width))
    add(f'{block}.output.dense', (width, mlp_dim))
    add(f'{block}.output.LayerNorm', (width,))
  if k['num_classes']:
    add(n['pooler'], (width, width))
    add(n['classifier'], (k['num_classes'], width))
  else:
    shapes[f'{n["mlm"]}bias'] = (k['vocab_size'],)
    dense = 'dense' if _roberta(k) else 'transform.dense'
    add(f'{n["mlm"]}{dense}', (width, width))
    add(f'{n["mlm"]}{n["mlm_norm"]}', (width,))
  return shapes


def encoders() -> list[str]:
  """The registered encoders."""
  return [n for n in registry.list_models()
          if registry.spec(n).cls is Encoder]


def convert(tensors: Mapping[str, np.ndarray], file: str,
            name: str | None = None, num_classes: int | None = None,
            image_size: int | None = None) -> Converted:
  """The zoo encoder `name` (default: the registered one of the file's
  sizes) with the file's weights.

  Args:
    tensors: the file's tensors by name.
    file: what to call the file in error messages.
    name: a registered encoder; its heads, position numbering and norm
      epsilon are kept.
    num_classes: 0: the masked-LM head; N: a classifier of N classes (the
      file's where it has N, else initialized); None: the file's
      classifier's classes if it has one, else 0.
    image_size: must be None.

  Returns:
    The Converted encoder; its kwargs fix the sizes the file gives where
    they differ from the model's defaults.

  Raises:
    ConversionError: `image_size` given, no encoder has the file's sizes,
      `name` is not an encoder, or a tensor does not fit.
    ValueError: `name` is not a known model.
  """
  if image_size is not None:
    raise ConversionError(f'{file} is a text encoder: it takes no '
                          'image_size.')
  tensors = {_renamed(k): v for k, v in tensors.items()}
  prefix = _prefix(tensors)
  embeddings = f'{prefix}embeddings'
  words = tensors[f'{embeddings}.word_embeddings.weight']
  depth = 0
  while f'{prefix}encoder.layer.{depth}.attention.self.query.weight' in (
      tensors):
    depth += 1
  sizes = dict(
      vocab_size=int(words.shape[0]), hidden_size=int(words.shape[1]),
      num_layers=depth,
      mlp_dim=int(tensors[f'{prefix}encoder.layer.0.intermediate.dense.'
                          'weight'].shape[0]),
      max_length=int(tensors[f'{embeddings}.position_embeddings.weight']
                     .shape[0]),
      type_vocab_size=int(tensors[f'{embeddings}.token_type_embeddings.'
                                  'weight'].shape[0]))
  if name:
    check_family(name, Encoder, 'transformers encoder')
  else:
    name = next((n for n in encoders() if all(
        variants.options(n)[k] == v for k, v in sizes.items())), None)
    if name is None:
      raise ConversionError(
          f'{file} holds an encoder of {sizes["hidden_size"]} features, '
          f'{depth} layers and {sizes["vocab_size"]} tokens, which no zoo '
          f'model has; name the one whose heads and positions it has: '
          f'{", ".join(encoders())}.')
  # The heads are not in the file: counted in the model's head width.
  d = variants.options(name)
  head_dim = d['hidden_size'] // d['num_heads']
  if sizes['hidden_size'] % head_dim:
    raise ConversionError(f'{file} does not fit {name}: its '
                          f'{sizes["hidden_size"]} features do not split '
                          f'into heads of {head_dim}, {name}\'s.')
  sizes['num_heads'] = sizes['hidden_size'] // head_dim
  file_classes, num_classes = heads.classes(
      tensors, f'{_classifier(tensors.__contains__)}.bias', file, num_classes)
  kwargs = variants.differing(name, **sizes, num_classes=num_classes)
  t = Transfer(tensors, target_shapes(name, kwargs), file, name)
  _body(t, prefix, depth)
  _heads_of(t, prefix, file_classes, num_classes)
  return t.finish(name, kwargs, SOURCE)


def _renamed(name: str) -> str:
  for old, new in _OLD_NAMES.items():
    if name.endswith(old) and 'LayerNorm' in name:
      return name[:-len(old)] + new
  return name


def _body(t: Transfer, prefix: str, depth: int):
  embeddings = f'{prefix}embeddings'
  for theirs, ours in (('word', 'token'), ('position', 'position'),
                       ('token_type', 'segment')):
    t.move(f'{embeddings}.{theirs}_embeddings.weight',
           f'params/{ours}_embedding')
  _norm(t, f'{embeddings}.LayerNorm', 'params/embedding_norm')
  for buffer in ('position_ids', 'token_type_ids'):
    if t.has(f'{embeddings}.{buffer}'):
      t.ignore(f'{embeddings}.{buffer}', 'a constant of the embeddings')
  for i in range(depth):
    source, target = f'{prefix}encoder.layer.{i}', f'params/block{i}'
    attention = f'{target}/attention'
    width, heads_, head_dim = t.targets[f'{attention}/query/kernel']
    for part in ('query', 'key', 'value'):
      # (heads * head_dim, width) -> (width, heads, head_dim).
      t.move(f'{source}.attention.self.{part}.weight',
             f'{attention}/{part}/kernel', shape=(width, width),
             convert=lambda w, s=(heads_, head_dim, width): (
                 w.reshape(s).transpose(2, 0, 1)))
      t.move(f'{source}.attention.self.{part}.bias',
             f'{attention}/{part}/bias', shape=(width,),
             convert=lambda b, s=(heads_, head_dim): b.reshape(s))
    t.move(f'{source}.attention.output.dense.weight',
           f'{attention}/out/kernel', shape=(width, width),
           convert=lambda w, s=(heads_, head_dim, width): w.T.reshape(s))
    t.move(f'{source}.attention.output.dense.bias', f'{attention}/out/bias')
    _norm(t, f'{source}.attention.output.LayerNorm',
          f'{target}/attention_norm')
    _dense(t, f'{source}.intermediate.dense', f'{target}/up')
    _dense(t, f'{source}.output.dense', f'{target}/down')
    _norm(t, f'{source}.output.LayerNorm', f'{target}/mlp_norm')


def _heads_of(t: Transfer, prefix: str, file_classes: int | None,
              num_classes: int):
  """The pooler and classifier, or the masked-LM head; the file's others
  set aside."""
  pooler = next((p for p in ('classifier.dense', f'{prefix}pooler.dense')
                 if t.has(f'{p}.weight')), None)
  classifier = _classifier(t.has)
  mlm = next((h for h in ('cls.predictions.', 'lm_head.')
              if t.has(f'{h}bias')), None)
  unused = [] if mlm is None else [
      (k, 'the masked-LM head (the model classifies)')
      for k in t.reads if k.startswith(mlm)]
  if num_classes:
    if pooler:
      _dense(t, pooler, 'params/pooler')
    else:
      t.leave('params/pooler/kernel')
      t.leave('params/pooler/bias')
    heads.move(t, f'{classifier}.weight', f'{classifier}.bias',
               'params/classifier', _LINEAR, file_classes, num_classes)
  else:
    unused = [(f'{p}.{part}', 'the pooler or a classifier (the model '
               'predicts masked tokens)')
              for p in (pooler, classifier) for part in ('weight', 'bias')
              if p and t.has(f'{p}.{part}')]
    if mlm is None:
      for target in ('mlm_dense/kernel', 'mlm_dense/bias', 'mlm_norm/scale',
                     'mlm_norm/bias', 'mlm_bias'):
        t.leave(f'params/{target}')
    else:
      roberta = mlm == 'lm_head.'
      _dense(t, f'{mlm}{"dense" if roberta else "transform.dense"}',
             'params/mlm_dense')
      _norm(t, f'{mlm}{"layer_norm" if roberta else "transform.LayerNorm"}',
            'params/mlm_norm')
      t.move(f'{mlm}bias', 'params/mlm_bias')
      unused += [(f'{mlm}decoder.weight', _TIED),
                 (f'{mlm}decoder.bias', 'the masked-LM bias again (tied)')]
  bert_pooler = f'{prefix}pooler.dense'
  if num_classes and pooler != bert_pooler:
    unused += [(f'{bert_pooler}.{part}', 'BERT\'s pooler, which RoBERTa\'s '
                'classification head does not use') for part in ('weight',
                                                                  'bias')]
  unused += [(f'cls.seq_relationship.{part}', 'the next-sentence head of '
              'pretraining') for part in ('weight', 'bias')]
  for name, why in unused:
    if t.has(name):
      t.ignore(name, why)


def _classifier(has) -> str:
  """The name of the file's classifier: RoBERTa's `out_proj` or BERT's."""
  return ('classifier.out_proj' if has('classifier.out_proj.bias')
          else 'classifier')


def _dense(t: Transfer, source: str, target: str):
  t.move(f'{source}.weight', f'{target}/kernel', _LINEAR)
  t.move(f'{source}.bias', f'{target}/bias')


def _norm(t: Transfer, source: str, target: str):
  t.move(f'{source}.weight', f'{target}/scale')
  t.move(f'{source}.bias', f'{target}/bias')

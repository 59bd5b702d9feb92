"""transformers' BERT and RoBERTa converted to the zoo's Encoder, verified
against transformers.

Each original is built at a tiny size with random weights (norm scales and
biases too), written with `save_pretrained`, converted and compared in
float32: the largest logit difference relative to the largest logit is at
most 1e-5, with and without padding. The masked-LM heads and the
classification heads (BERT's pooler and classifier, RoBERTa's head) are
each compared, and each export goes back into a fresh transformers model.
The registered parameter counts are transformers' own at full size. Needs
torch and transformers (the convert-test extra); skipped without them.
"""

import numpy as np
import pytest

from tests.convert_helpers import originals

torch, transformers, safetensors_numpy = originals(
    'torch', 'transformers', 'safetensors.numpy')
# Compared with the originals: the whole suite's tier, not the fast one.
pytestmark = pytest.mark.slow

# pylint: disable=wrong-import-position
import zoo
from tests.convert_helpers import (RTOL, assert_exactly_once,
                                   randomize_torch, relative_difference,
                                   zoo_on_tokens)
from tests.helpers import slow_after
from zoo import convert
from zoo.convert import export, transformers_encoder

LENGTH = 20
# The originals' config.json values (Hugging Face repositories
# google-bert/bert-base-uncased and bert-large-uncased,
# FacebookAI/roberta-base and roberta-large).
_BERT = dict(vocab_size=30522, max_position_embeddings=512, type_vocab_size=2,
             layer_norm_eps=1e-12, pad_token_id=0)
_ROBERTA = dict(vocab_size=50265, max_position_embeddings=514,
                type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1,
                bos_token_id=0, eos_token_id=2)
_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
             intermediate_size=3072)
_LARGE = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
              intermediate_size=4096)
ORIGINALS = {
    'bert_base': ('Bert', dict(_BERT, **_BASE)),
    'bert_large': ('Bert', dict(_BERT, **_LARGE)),
    'roberta_base': ('Roberta', dict(_ROBERTA, **_BASE)),
    'roberta_large': ('Roberta', dict(_ROBERTA, **_LARGE)),
}
# Tiny models of the same structure: heads of 64 features, as the
# originals'.
TINY = dict(vocab_size=101, hidden_size=128, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=192,
            max_position_embeddings=40)


def _original(name: str, head: str = 'ForMaskedLM', **changes):
  """transformers' `name` with `head` (tiny, with `changes`), random
  weights."""
  kind, config = ORIGINALS[name]
  if kind == 'Roberta':
    changes = {'max_position_embeddings': 42, **changes}
  config = getattr(transformers, f'{kind}Config')(
      **{**config, **TINY, **changes})
  model = getattr(transformers, f'{kind}{head}')(config)
  return randomize_torch(model).float().eval()


def _tokens(seed: int = 0) -> np.ndarray:
  # Ids from 3: RoBERTa's 0-2 are <s>, <pad> and </s>.
  return np.random.default_rng(seed).integers(3, 101, (2, LENGTH),
                                              dtype=np.int64)


def _theirs(model, tokens, mask=None) -> np.ndarray:
  with torch.no_grad():
    return model(torch.as_tensor(tokens),
                 attention_mask=None if mask is None else torch.as_tensor(
                     mask)).logits.numpy()


def _ours(converted, tokens, mask=None) -> np.ndarray:
  return zoo_on_tokens(converted.name, converted.kwargs, converted.variables,
                       tokens, mask)


def _convert(model, tmp_path, name, num_classes=None):
  model.save_pretrained(tmp_path, safe_serialization=True)
  path = tmp_path / 'model.safetensors'
  converted = convert.load(path, 'transformers', name, num_classes)
  assert converted.name == name
  assert_exactly_once(converted, safetensors_numpy.load_file(str(path)),
                      name, converted.kwargs)
  return converted


def _export_round_trip(model, converted):
  """The export loads into a fresh transformers model of the same config
  (the tied decoder is the word embedding, not written) and gives its
  logits."""
  tensors = export.state_dict(transformers_encoder, converted.name,
                              converted.kwargs, converted.variables)
  fresh = type(model)(model.config).float().eval()
  theirs = {k: tuple(v.shape) for k, v in fresh.state_dict().items()
            if not k.endswith('decoder.weight') and
            not k.endswith('decoder.bias')}
  assert {k: v.shape for k, v in tensors.items()} == theirs
  fresh.load_state_dict({k: torch.as_tensor(v) for k, v in tensors.items()},
                        strict=False)
  fresh.tie_weights()
  tokens = _tokens(seed=1)
  difference = relative_difference(_theirs(fresh, tokens),
                                   _theirs(model, tokens))
  assert difference <= RTOL, difference


@pytest.mark.parametrize('name', slow_after(1, ['bert_base', 'roberta_base']))
def test_masked_lm_gives_transformers_logits_with_padding(name, tmp_path):
  model = _original(name)
  converted = _convert(model, tmp_path, name)
  assert converted.kwargs == {
      'vocab_size': 101, 'hidden_size': 128, 'num_layers': 2,
      'mlp_dim': 192, 'num_heads': 2,
      'max_length': 42 if 'roberta' in name else 40}
  tokens = _tokens()
  assert relative_difference(_ours(converted, tokens),
                             _theirs(model, tokens)) <= RTOL
  # The second sequence padded at its end, as tokenizers pad: RoBERTa's
  # positions skip its padding id.
  mask = np.ones_like(tokens)
  mask[1, -6:] = 0
  tokens[1, -6:] = model.config.pad_token_id
  real = mask.astype(bool)
  difference = relative_difference(_ours(converted, tokens, mask)[real],
                                   _theirs(model, tokens, mask)[real])
  assert difference <= RTOL, difference
  _export_round_trip(model, converted)


# RoBERTa here and BERT above in the fast tier: each family once.
@pytest.mark.parametrize('name', slow_after(1, ['roberta_base', 'bert_base']))
def test_a_sequence_classifier_gives_transformers_logits(name, tmp_path):
  model = _original(name, 'ForSequenceClassification', num_labels=3)
  converted = _convert(model, tmp_path, name)
  assert converted.kwargs['num_classes'] == 3
  assert not converted.initialized
  tokens = _tokens()
  difference = relative_difference(_ours(converted, tokens),
                                   _theirs(model, tokens))
  assert difference <= RTOL, difference
  _export_round_trip(model, converted)


def test_pretrained_weights_start_a_classifier(tmp_path):
  """BERT's pretraining file (masked LM, next sentence, pooler) fine-tuned
  on 5 classes: the body and pooler carried, the classifier initialized,
  the pretraining heads set aside."""
  model = _original('bert_base', 'ForPreTraining')
  converted = _convert(model, tmp_path, 'bert_base', num_classes=5)
  assert converted.initialized == ['params/classifier/kernel',
                                   'params/classifier/bias']
  assert 'cls.seq_relationship.weight' in converted.ignored
  assert 'cls.predictions.transform.dense.weight' in converted.ignored
  with torch.no_grad():
    pooled = model.bert(torch.as_tensor(_tokens())).pooler_output.numpy()
  np.testing.assert_allclose(
      converted.variables['params']['pooler']['bias'],
      model.bert.pooler.dense.bias.detach().numpy())
  assert pooled.shape == (2, 128)


def test_files_saved_before_the_renaming_convert_alike(tmp_path):
  """Layer norms named gamma and beta, and the position ids buffer, as
  older BERT files hold them."""
  model = _original('bert_base')
  tensors = {k.replace('LayerNorm.weight', 'LayerNorm.gamma')
             .replace('LayerNorm.bias', 'LayerNorm.beta'): v.numpy()
             for k, v in model.state_dict().items()}
  tensors['bert.embeddings.position_ids'] = np.arange(40)[None]
  converted = convert.convert(tensors, name='bert_base')
  assert converted.source == 'transformers'  # Detected from the names.
  tokens = _tokens()
  assert relative_difference(_ours(converted, tokens),
                             _theirs(model, tokens)) <= RTOL


def test_a_file_of_another_size_is_one_error(tmp_path):
  model = _original('bert_base')
  model.save_pretrained(tmp_path)
  tensors = safetensors_numpy.load_file(str(tmp_path / 'model.safetensors'))
  with pytest.raises(ValueError, match='no image_size'):
    convert.convert(tensors, image_size=224)
  with pytest.raises(ValueError, match='128 features, 2 layers and 101 '
                     'tokens, which no zoo model has'):
    convert.convert(tensors)


@pytest.mark.parametrize('name', slow_after(1, list(ORIGINALS)))
def test_registered_counts_are_the_originals(name):
  kind, config = ORIGINALS[name]
  config = getattr(transformers, f'{kind}Config')(**config)
  with torch.device('meta'):  # Shapes only: nothing is allocated.
    model = getattr(transformers, f'{kind}ForMaskedLM')(config)
  count = sum(p.numel() for p in model.parameters())  # Tied: counted once.
  assert count == zoo.spec(name).reference_params == zoo.num_params(name)

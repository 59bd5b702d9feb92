"""Fine-tuning converted BERT weights as a text classifier: a tiny random
transformers BERT written with `save_pretrained` beside its tokenizer.json,
converted by `python -m recipes.convert --source=transformers`, then
`recipes.train` with `--config.init_from` and `--config.tokenizer` of that
folder on labelled text. The encoder starts from the converted weights (at
a learning rate of 0 it keeps them) and the pooler and classifier are new.
Needs torch and transformers (the convert-test extra); skipped without
them."""

import json

import jax
import numpy as np
import pytest

from tests.convert_helpers import originals

torch, transformers = originals('torch', 'transformers')

# pylint: disable=wrong-import-position
from recipes import convert, train
from zoo import convert as zoo_convert
from tests.helpers import (CLASS_WORDS, saved_params, tiny_config,
                           write_labelled_text, write_word_tokenizer)

# A run with a tokenizer's preparation and torch: the slow tier.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('fast_compiles')]

# Heads of 64 features, as the originals' (the converter counts on them).
SIZE = dict(hidden_size=128, num_layers=2, num_heads=2, mlp_dim=192,
            max_length=24)


def test_converted_bert_fine_tunes_as_a_classifier(tmp_path, monkeypatch):
  folder = tmp_path / 'bert'
  tokenizer = write_word_tokenizer(
      folder, [w for ws in CLASS_WORDS.values() for w in ws])
  vocab = len(json.load(open(tokenizer))['model']['vocab'])
  config = transformers.BertConfig(
      vocab_size=vocab, hidden_size=128, num_hidden_layers=2,
      num_attention_heads=2, intermediate_size=192, max_position_embeddings=24)
  torch.manual_seed(0)
  transformers.BertForMaskedLM(config).save_pretrained(folder)
  converted = tmp_path / 'converted'
  assert convert.main(['--source=transformers', '--model=bert_base',
                       str(folder / 'model.safetensors'),
                       str(converted)]) == 0
  text = write_labelled_text(tmp_path / 'text')
  run = tiny_config(
      model='bert_base', dataset=f'jsonl:{text}', tokenizer=str(folder),
      label_column='label', seq_len=16, train_split='train',
      eval_split='validation', strategy='sharded',
      data_dir=str(tmp_path / 'data'), init_from=str(converted),
      model_kwargs=dict(SIZE, vocab_size=vocab), optimizer='adamw',
      learning_rate=0.0, lr_schedule='constant', warmup_epochs=0.0,
      num_train_steps=2, eval_every_steps=2, checkpoint_every_steps=2)
  summary = train.run(run, str(tmp_path / 'work'))
  assert 0 <= summary['accuracy'] <= 1
  _, params = saved_params(tmp_path / 'work')
  weights = zoo_convert.load(str(folder / 'model.safetensors'),
                             'transformers', 'bert_base').variables['params']
  assert {'pooler', 'classifier'} <= set(params)
  assert params['classifier']['kernel'].shape == (128, 3)
  kept = {k: v for k, v in params.items() if k in weights}
  assert set(kept) == set(weights) - {'mlm_dense', 'mlm_norm', 'mlm_bias'}
  for key in kept:
    jax.tree.map(np.testing.assert_array_equal, kept[key], weights[key])

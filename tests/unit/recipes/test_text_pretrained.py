"""--config.pretrained=TAG for a language model: the publisher's
model.safetensors and tokenizer.json from the Hub (a local stand-in here,
serving a small GPT-2-shaped file under GPT-2's repository), converted
and cached as image weights are; the run tokenizes its text with the
weights' own tokenizer and starts from them."""

import json
import os

import flax.linen as nn
import jax
import numpy as np
import pytest
import safetensors.numpy

import zoo
from recipes import train
from recipes.config import defaults
from tests.helpers import read_scalars, write_token_dir
from tests.hub_server import HubServer
from zoo import convert, weights
from zoo.convert import export, transformers_decoder

pytestmark = pytest.mark.usefixtures('fast_compiles')

REPOSITORY = 'openai-community/gpt2'
# One head of 64 features, as GPT-2's are; 29 ids: write_token_dir's words.
SMALL = dict(vocab_size=29, hidden_size=64, num_layers=2, num_heads=1,
             mlp_dim=128, max_length=16)


@pytest.fixture(name='hub')
def _hub(tmp_path, monkeypatch):
  """The Hub with a small GPT-2 and a word-level tokenizer under GPT-2's
  repository; empty caches; the text as JSONL."""
  (tmp_path / 'text').mkdir()
  write_token_dir(tmp_path / 'text')
  module = zoo.create('gpt2', **SMALL)
  variables = nn.unbox(module.init(jax.random.key(3),
                                   np.zeros((1, 4), np.int32)))
  tensors = export.state_dict(transformers_decoder, 'gpt2', SMALL, variables)
  with open(tmp_path / 'text' / 'tokenizer.json', 'rb') as f:
    tokenizer = f.read()
  server = HubServer({f'{REPOSITORY}/model.safetensors':
                          safetensors.numpy.save(tensors),
                      f'{REPOSITORY}/tokenizer.json': tokenizer})
  monkeypatch.setenv('HF_ENDPOINT', server.url)
  monkeypatch.setenv('HF_HUB_CACHE', str(tmp_path / 'hf'))
  monkeypatch.setenv('JAX_MODEL_ZOO_WEIGHTS', str(tmp_path / 'zoo'))
  server.tensors, server.tokenizer = tensors, tokenizer
  server.corpus = str(tmp_path / 'text' / 'corpus')
  yield server
  server.stop()


def test_the_text_tags_name_their_repositories_and_tokenizers():
  entry = weights.find('smollm2_135m', True)
  assert entry.url == 'hf://HuggingFaceTB/SmolLM2-135M/model.safetensors'
  assert entry.tokenizer_url == (
      'hf://HuggingFaceTB/SmolLM2-135M/tokenizer.json')
  assert weights.find('resnet50', True).tokenizer_url is None
  assert set(zoo.list_models(pretrained=True)) >= {
      'gpt2', 'gpt2_medium', 'smollm2_135m', 'smollm2_360m', 'qwen2_5_0_5b'}


def test_a_tag_is_the_converted_file(hub):
  model = zoo.create('gpt2', pretrained='openai')
  module, variables = model.unbind()
  assert module == zoo.create('gpt2', **SMALL)
  expected = convert.convert(hub.tensors, 'transformers',
                             name='gpt2').variables
  jax.tree.map(np.testing.assert_array_equal, variables, expected)


def _config(hub, **overrides):
  config = defaults.get_config()
  config.update({**dict(
      model='gpt2', pretrained='openai', dataset=f'jsonl:{hub.corpus}',
      seq_len=16, data_dir=os.path.dirname(hub.corpus), train_split='train',
      eval_split='validation', batch_size=8, num_train_steps=2,
      warmup_steps=0, eval_every_steps=2, log_every_steps=1), **overrides})
  return config


@pytest.mark.slow  # Three runs: about 10 s.
def test_a_run_tokenizes_with_the_weights_tokenizer_and_starts_from_them(
    hub, tmp_path):
  train.run(_config(hub), str(tmp_path / 'run'))
  record = json.loads((tmp_path / 'run' / 'config.json').read_text())
  with open(record['tokenizer'], 'rb') as f:  # Downloaded beside them.
    assert f.read() == hub.tokenizer
  assert {k: record['model_kwargs'][k] for k in SMALL} == SMALL
  assert {r.rsplit('/', 1)[1] for r in hub.requests if r.startswith('GET')
          } >= {'model.safetensors', 'tokenizer.json'}

  # The same run from a random start, on the same tokens: its first loss
  # (of the parameters it starts from) is another.
  train.run(_config(hub, pretrained='', tokenizer=record['tokenizer'],
                    model_kwargs=SMALL), str(tmp_path / 'random'))
  first = [read_scalars(tmp_path / run)['train/loss'][1]
           for run in ('run', 'random')]
  assert np.isfinite(first).all() and first[0] != first[1], first
  # Evaluated without training: the tag's weights at step 0.
  summary = train.run(_config(hub, mode='eval'), str(tmp_path / 'eval'))
  assert np.isfinite(summary['loss'])

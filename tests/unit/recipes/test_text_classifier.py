"""An encoder (BERT's shape) trained by the recipes to classify labelled
text: the shared step on a text batch, a run with its evaluation, and
mistakes of model against data as one line."""

import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoo
from recipes import train
from recipes.checkpoint import store
from recipes.core import state_spec, steps
from tests.helpers import (CLASS_WORDS, read_scalars, tiny_config,
                           train_error, write_labelled_text,
                           write_labelled_token_dir, write_word_tokenizer)

# Tiny models for a few steps: compiling dominates (tests/conftest.py).
pytestmark = pytest.mark.usefixtures('fast_compiles')

MODEL = 'bert_base'  # At its test size: 2 blocks of 32 features, 97 ids.


@pytest.fixture(scope='module', name='tokens')
def _tokens(tmp_path_factory):
  """Prepared labelled text of 3 classes, documents of 16 tokens."""
  return write_labelled_token_dir(tmp_path_factory.mktemp('text'), 16)


def _config(dataset, **overrides):
  """A 6-step run of the test-size encoder on `dataset`, sharded over a
  2x2x2 (data, fsdp, tensor) mesh."""
  config = tiny_config(
      model=MODEL, dataset=dataset, train_split='train',
      eval_split='validation', strategy='sharded',
      model_kwargs=dict(zoo.spec(MODEL).test_kwargs), optimizer='adamw',
      learning_rate=3e-3, lr_schedule='constant', warmup_epochs=0.0,
      num_train_steps=6, log_every_steps=3, eval_every_steps=3,
      checkpoint_every_steps=3)
  config.mesh.update(data=2, fsdp=2, tensor=2)
  config.update(overrides)
  return config


def _text_batch(n: int = 24, length: int = 10, seed: int = 0) -> dict:
  """Texts whose class (of 3) is the range their ids come from, of random
  lengths, padded."""
  rng = np.random.default_rng(seed)
  labels = np.arange(n, dtype=np.int32) % 3
  tokens = (3 + 30 * labels[:, None] + rng.integers(0, 30, (n, length))
            ).astype(np.int32)
  lengths = rng.integers(2, length + 1, n)
  mask = np.arange(length) < lengths[:, None]
  tokens[:, 0] = 1  # The start token.
  return {'tokens': np.where(mask, tokens, 0), 'mask': mask, 'label': labels}


def test_the_step_learns_a_fixed_text_batch_and_evaluation_skips_padding():
  model = zoo.create(MODEL, num_classes=3, **zoo.spec(MODEL).test_kwargs)
  spec = state_spec.make(model, optax.adam(1e-2), (10,),
                         input_dtype=jnp.int32)
  state = spec.create_state()
  batch = _text_batch()
  step = jax.jit(functools.partial(steps.train_step, axis_name=None))
  losses, accuracies = [], []
  for _ in range(12):
    state, metrics = step(state, batch)
    summary = metrics.compute()
    losses.append(float(summary['loss']))
    accuracies.append(float(summary['accuracy']))
  assert losses[-1] < 0.5 * losses[0], losses
  assert accuracies[-1] > 0.6 > accuracies[0], accuracies
  # Padding rows (mask all false) are not counted: 5 real rows padded to 8
  # with other rows give the metrics of the same 5 padded with others.
  evaluate = jax.jit(functools.partial(steps.eval_step, axis_name=None))
  keep = (np.arange(8) < 5)[:, None]
  padded = [dict(jax.tree.map(lambda x, s=s: x[s:s + 8], batch),
                 mask=batch['mask'][s:s + 8] & keep) for s in (0, 16)]
  for key, value in jax.tree.map(lambda x: x[:5], batch).items():
    padded[1][key][:5] = value
  metrics = [evaluate(state, b) for b in padded]
  assert [int(m.accuracy.count) for m in metrics] == [5, 5]
  first, second = (m.compute() for m in metrics)
  for key in ('loss', 'accuracy'):
    assert float(first[key]) == pytest.approx(float(second[key]), rel=1e-5)


def test_the_model_sees_the_mask():
  """Tokens under a false mask do not change the logits."""
  model = zoo.create(MODEL, num_classes=3, **zoo.spec(MODEL).test_kwargs)
  spec = state_spec.make(model, optax.sgd(0.1), (10,), input_dtype=jnp.int32)
  state = spec.create_state()
  batch = _text_batch(n=4)
  other = dict(batch, tokens=np.where(batch['mask'], batch['tokens'], 7))
  apply = jax.jit(lambda b: steps._apply(state, {'params': state.params}, b))  # pylint: disable=protected-access
  np.testing.assert_allclose(apply(batch), apply(other), rtol=1e-5,
                             atol=1e-6)


# Runs of the recipe: the slow tier (tests/integration/
# test_text_fortune_classes.py runs the config at real size).
@pytest.fixture(scope='module', name='straight')
def _straight(tokens, tmp_path_factory):
  """(workdir, final summary) of a 6-step sharded run."""
  workdir = tmp_path_factory.mktemp('straight')
  return workdir, train.run(_config(f'tokens:{tokens}'), str(workdir))


@pytest.mark.slow
def test_a_run_reports_accuracy_and_keeps_the_class_names(straight, tokens):
  workdir, summary = straight
  assert 'perplexity' not in summary and 0 <= summary['accuracy'] <= 1
  assert json.loads((workdir / 'class_names.json').read_text()) == sorted(
      CLASS_WORDS)
  scalars = read_scalars(workdir)
  assert sorted(scalars['eval/accuracy']) == [3, 6]
  assert sorted(scalars['train/loss']) == [3, 6]
  # Evaluating the workdir gives the run's last accuracy.
  evaluated = train.run(_config(f'tokens:{tokens}', mode='eval'),
                        str(workdir))
  assert evaluated['accuracy'] == summary['accuracy']


@pytest.fixture(scope='module', name='text')
def _text(tmp_path_factory):
  """(a folder of labelled JSONL text, its word tokenizer)."""
  root = tmp_path_factory.mktemp('raw')
  return (write_labelled_text(root / 'text'), write_word_tokenizer(
      root / 'tok', [w for ws in CLASS_WORDS.values() for w in ws]))


def _error(config, workdir) -> str:
  """The one line, and nothing written in `workdir`."""
  line = train_error(config, workdir)
  assert not {'checkpoints', 'config.json', 'summaries'} & set(
      os.listdir(workdir) if os.path.exists(workdir) else ())
  return line


def _on_text(text, tmp_path, **overrides):
  folder, tokenizer = text
  return _config(f'jsonl:{folder}', **{
      'tokenizer': tokenizer, 'seq_len': 16, 'label_column': 'label',
      'data_dir': str(tmp_path / 'data'), **overrides})


@pytest.mark.slow
def test_text_with_a_tokenizer_is_prepared_with_its_labels(text, tmp_path):
  summary = train.run(_on_text(text, tmp_path, num_train_steps=1,
                               eval_every_steps=1), str(tmp_path / 'w'))
  assert 0 <= summary['accuracy'] <= 1
  assert json.loads((tmp_path / 'w' / 'class_names.json').read_text()) == [
      'cat', 'dog', 'eel']


@pytest.mark.parametrize('change, error', [
    (dict(label_column='nope'), "has no label column 'nope' (it has text, "
     'label); name the label column with --label_column.'),
    (dict(classes='cat'), "label 'label' of jsonl:"),
    (dict(classes='cat,fox'), "has no class 'fox' (it has 'cat', 'dog', "
     "'eel')"),
])
def test_bad_labels_are_one_line(text, tmp_path, change, error):
  line = _error(_on_text(text, tmp_path, **change), tmp_path / 'w')
  assert error in line
  if change.get('classes') == 'cat':
    assert line.endswith("has one class ('cat'); a classifier needs two or "
                         'more: name another label column or give more '
                         'data.')


def test_empty_text_is_one_line(tmp_path, text):
  folder = tmp_path / 'empty'
  folder.mkdir()
  (folder / 'train.jsonl').write_text('{"text": "", "label": "a"}\n' * 3)
  line = _error(_on_text((str(folder), text[1]), tmp_path), tmp_path / 'w')
  assert "column 'text' of split 'train'" in line and 'has no text' in line


def test_a_vocabulary_too_small_for_the_tokenizer_is_one_line(text,
                                                              tmp_path):
  config = _on_text(text, tmp_path)
  config.model_kwargs.vocab_size = 10
  line = _error(config, tmp_path / 'w')
  assert line.startswith(f'error: the tokenizer of jsonl:{text[0]} has 19 '
                         "ids, more than the 10 of bert_base's vocabulary")
  assert not os.path.exists(tmp_path / 'data')  # Nothing prepared.


def test_sequences_longer_than_the_positions_are_one_line(text, tmp_path):
  line = _error(_on_text(text, tmp_path, seq_len=32), tmp_path / 'w')
  assert line.startswith(f'error: jsonl:{text[0]} holds sequences of 32 '
                         'tokens, more than the 18 positions of bert_base; '
                         'prepare it with --seq_len=18 or less')


def test_model_and_data_of_other_kinds_are_one_line(text, tokens, tmp_path):
  decoder = _on_text(text, tmp_path, model='smollm2_135m')
  decoder.model_kwargs = dict(zoo.spec('smollm2_135m').test_kwargs)
  assert 'an encoder classifies, and ' in _error(decoder, tmp_path / 'a')
  unlabelled = _on_text(text, tmp_path, label_column='')
  assert _error(unlabelled, tmp_path / 'b').startswith(
      "error: 'bert_base' is an encoder, which classifies labelled text, "
      f"and dataset 'jsonl:{text[0]}' has no labels")
  assert _error(_config(f'tokens:{tokens}', mixup_alpha=0.2),
                tmp_path / 'c') == (
                    "error: mixup_alpha mixes images, and 'bert_base' "
                    'classifies text; set --config.mixup_alpha=0.')
  assert "classes='cat' picks classes of labelled text" in _error(
      _config(f'tokens:{tokens}', classes='cat'), tmp_path / 'd')


def test_an_image_models_checkpoint_given_is_one_line(tokens, tmp_path):
  images = tmp_path / 'images'
  mlp = zoo.create('mlp', num_classes=10)
  params = mlp.init(jax.random.PRNGKey(0), jnp.zeros((1, 28, 28, 1)))
  with store.opened(images) as mngr:
    store.save(mngr, 2, {'params': params['params']})
  line = train_error(_config(f'tokens:{tokens}', init_from=str(images)),
                     tmp_path / 'w')
  assert 'error: no parameter of this model has the same name and shape ' in (
      line) and str(images) in line, line

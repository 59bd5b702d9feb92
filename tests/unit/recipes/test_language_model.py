"""A decoder language model trained by the recipes on `tokens:` data: the
loss over real target tokens, perplexity over a whole evaluation, the same
steps under every strategy and with accumulation, exact resume, eval-only
mode, and mistakes of model against data as one line."""

import functools
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoo
from recipes import experiment, train
from recipes.core import state_spec, steps
from recipes.data import datasets
from tests.helpers import (read_scalars, saved_params, tiny_config,
                           train_error, write_token_dir)

# Tiny models for a few steps: compiling dominates (tests/conftest.py).
pytestmark = pytest.mark.usefixtures('fast_compiles')

MODEL = 'smollm2_135m'  # At its test size: 2 blocks of 32 features.


@pytest.fixture(scope='module', name='tokens')
def _tokens(tmp_path_factory):
  """A prepared directory of sequences of 16 tokens (29 ids)."""
  return write_token_dir(tmp_path_factory.mktemp('text'), seq_len=16)


def _config(tokens, **overrides):
  """A 6-step run of the test-size model on `tokens`, sharded over a
  2x2x2 (data, fsdp, tensor) mesh unless `overrides` say otherwise."""
  config = tiny_config(
      model=MODEL, dataset=f'tokens:{tokens}', train_split='train',
      eval_split='validation', strategy='sharded',
      model_kwargs=dict(zoo.spec(MODEL).test_kwargs), optimizer='adamw',
      learning_rate=3e-3, lr_schedule='constant', warmup_epochs=0.0,
      num_train_steps=6, log_every_steps=3, eval_every_steps=3,
      checkpoint_every_steps=3)
  config.mesh.update(data=2, fsdp=2, tensor=2)
  config.update(overrides)
  return config


def test_the_loss_averages_real_target_tokens_and_perplexity_the_whole_split():
  """The eval step's loss is the float32 cross-entropy averaged over the
  tokens whose mask is true; merged over batches, perplexity is exp of the
  token-averaged loss, not the mean of each batch's."""
  model = zoo.create(MODEL, **zoo.spec(MODEL).test_kwargs)
  spec = state_spec.make(model, optax.sgd(0.1), (8,), input_dtype=jnp.int32)
  state = spec.create_state()
  rng = np.random.default_rng(0)

  def batch(real):  # Two rows of one document; `real` targets count.
    mask = np.zeros((2, 8), bool)
    mask.flat[:real] = True
    return {'inputs': rng.integers(0, 97, (2, 8)).astype(np.int32),
            'targets': rng.integers(0, 97, (2, 8)).astype(np.int32),
            'segment_ids': np.ones((2, 8), np.int32),
            'positions': np.tile(np.arange(8, dtype=np.int32), (2, 1)),
            'mask': mask}

  evaluate = jax.jit(functools.partial(steps.eval_step, axis_name=None))
  batches = [batch(3), batch(13)]
  metrics = [jax.device_get(evaluate(state, b)) for b in batches]
  losses = []
  apply = jax.jit(model.apply)
  for b in batches:
    logits = apply({'params': state.params}, b['inputs'],
                   segment_ids=b['segment_ids'], positions=b['positions'])
    every = optax.softmax_cross_entropy_with_integer_labels(
        np.asarray(logits, np.float64), b['targets'])
    losses.append(np.asarray(every)[b['mask']])
  for m, expected in zip(metrics, losses):
    np.testing.assert_allclose(m.compute()['loss'], expected.mean(),
                               rtol=1e-5)
  merged = metrics[0].merge(metrics[1]).compute()
  whole = np.concatenate(losses)
  np.testing.assert_allclose(merged['perplexity'], np.exp(whole.mean()),
                             rtol=1e-5)
  per_batch = np.mean([np.exp(loss.mean()) for loss in losses])
  assert not np.isclose(merged['perplexity'], per_batch, rtol=1e-3)
  assert int(metrics[1].accuracy.count) == 13


def _steps_of(config, batch, count: int = 2):
  """The losses and parameters after `count` updates of `config`'s state
  on `batch`, through its strategy."""
  parts = experiment.training(config, 0, (16,), 10, 10)
  placed = next(parts.strategy.place_batches([batch]))
  state = parts.strategy.create_state(jax.random.PRNGKey(0))
  losses = []
  for _ in range(count):
    state, metrics = parts.strategy.train_step(state, placed)
    losses.append(float(parts.strategy.to_host(metrics).compute()['loss']))
  return losses, parts.strategy.to_host(state.params)


# (strategy, mesh, grad_accum_steps) against pmap.
VARIANTS = [
    pytest.param('sharded', dict(data=2, fsdp=2, tensor=2), 2,
                 id='sharded-2x2x2-accumulate2'),
    pytest.param('sharded', dict(data=2, fsdp=2, tensor=2), 1,
                 id='sharded-2x2x2'),
    pytest.param('shard_map', dict(data=-1, fsdp=1, tensor=1), 1,
                 id='shard_map'),
    pytest.param('pmap', dict(data=-1, fsdp=1, tensor=1), 2,
                 id='pmap-accumulate2')]


@pytest.fixture(scope='module', name='pmap_steps')
def _pmap_steps(tokens):
  """(a global batch whose devices' shares hold unequal numbers of real
  tokens, pmap's losses and parameters after two steps on it): the
  reference of every variant below, computed once."""
  data = datasets.load(f'tokens:{tokens}', None, 'train', ['validation'])
  batch = next(data.train_batches(batch_size=16, seed=0, start_step=0,
                                  num_steps=1))
  counts = batch['mask'].reshape(8, -1).sum(1)
  assert len(set(counts)) > 1  # Unequal shares: a mean of means differs.
  return batch, _steps_of(_config(tokens, strategy='pmap',
                                  mesh=dict(data=-1, fsdp=1, tensor=1)), batch)


# All slow: the fast tier trains under sharded fsdp x tensor (the runs
# below); this compares it, accumulation and the replicated strategies.
@pytest.mark.slow
@pytest.mark.parametrize('strategy, mesh, accumulate', VARIANTS)
def test_every_strategy_and_accumulation_take_the_steps_of_pmap(
    tokens, pmap_steps, strategy, mesh, accumulate):
  """The global batch's token mean is the loss whatever splits the batch:
  devices whose shares hold different numbers of real tokens, and
  micro-batches."""
  batch, reference = pmap_steps
  losses, params = _steps_of(_config(tokens, strategy=strategy, mesh=mesh,
                                     grad_accum_steps=accumulate), batch)
  np.testing.assert_allclose(losses, reference[0], rtol=1e-5)
  assert losses[1] < losses[0]
  jax.tree.map(functools.partial(np.testing.assert_allclose, rtol=1e-4,
                                 atol=1e-6), params, reference[1])


@pytest.fixture(scope='module', name='straight')
def _straight(tokens, tmp_path_factory):
  """(workdir, final summary) of an uninterrupted 6-step sharded run."""
  workdir = tmp_path_factory.mktemp('straight')
  return workdir, train.run(_config(tokens), str(workdir))


def test_a_run_reports_perplexity_and_tokens_per_second_and_eval_agrees(
    tokens, straight):
  """Also: evaluating its workdir gives the run's perplexity on the held-out
  split (here rather than in a test of its own: each test of `straight` is
  one more that pytest-xdist may send to the other worker, which then trains
  it again)."""
  workdir, summary = straight
  assert summary['perplexity'] == pytest.approx(np.exp(summary['loss']),
                                                rel=1e-5)
  scalars = read_scalars(workdir)
  for tag in ('train/loss', 'train/perplexity', 'train/accuracy',
              'train/tokens_per_sec', 'eval/loss', 'eval/perplexity',
              'eval/accuracy'):
    assert sorted(scalars[tag]) == [3, 6], tag
  assert scalars['train/loss'][6] < scalars['train/loss'][3]
  assert scalars['eval/perplexity'][6] < scalars['eval/perplexity'][3]
  np.testing.assert_allclose(scalars['train/tokens_per_sec'][6],
                             scalars['train/steps_per_sec'][6] * 16 * 16,
                             rtol=1e-5)
  assert scalars['eval/perplexity'][6] == pytest.approx(
      np.exp(scalars['eval/loss'][6]), rel=1e-5)
  evaluated = train.run(_config(tokens, mode='eval'), str(workdir))
  assert evaluated['perplexity'] == pytest.approx(summary['perplexity'],
                                                  rel=1e-6)


def test_a_stopped_run_resumes_to_the_same_parameters_bitwise(
    tokens, straight, tmp_path):
  """The straight run as if stopped after its save at step 3, resumed."""
  workdir = tmp_path / 'resumed'
  shutil.copytree(straight[0], workdir)
  shutil.rmtree(workdir / 'checkpoints' / '6')
  assert saved_params(workdir)[0] == 3
  train.run(_config(tokens), str(workdir))
  step, resumed = saved_params(workdir)
  assert step == 6
  _, uninterrupted = saved_params(straight[0])
  jax.tree.map(np.testing.assert_array_equal, resumed, uninterrupted)


def _error(config, workdir) -> str:
  """The one line, and nothing written in `workdir`."""
  line = train_error(config, workdir)
  assert not {'checkpoints', 'config.json', 'summaries'} & set(
      os.listdir(workdir) if os.path.exists(workdir) else ())
  return line


def test_a_vocabulary_larger_than_the_models_is_one_line(tokens, tmp_path):
  config = _config(tokens)
  config.model_kwargs.vocab_size = 20
  line = _error(config, tmp_path / 'work')
  assert line == (f'error: the tokenizer of tokens:{tokens} has 29 ids, more '
                  "than the 20 of smollm2_135m's vocabulary; prepare the text "
                  "with the model's own tokenizer, or set "
                  '--config.model_kwargs.vocab_size.')


def test_sequences_longer_than_the_models_positions_are_one_line(
    tokens, tmp_path):
  config = _config(tokens)
  config.model_kwargs.max_length = 8
  line = _error(config, tmp_path / 'work')
  assert line == (f'error: tokens:{tokens} holds sequences of 16 tokens, more '
                  'than the 8 positions of smollm2_135m; prepare it with '
                  '--seq_len=8 or less (--config.seq_len for text the run '
                  'prepares), or set --config.model_kwargs.max_length.')


def test_an_image_model_on_tokens_and_a_language_model_on_images(
    tokens, data_dir, tmp_path):
  config = _config(tokens, model='cnn')
  config.model_kwargs = {}
  line = _error(config, tmp_path / 'a')
  assert line.startswith(f"error: dataset 'tokens:{tokens}' holds token "
                         "sequences, and 'cnn' is not a language model")
  line = _error(_config(tokens, dataset='fashion_mnist_idx',
                        data_dir=data_dir), tmp_path / 'b')
  assert line.startswith("error: 'smollm2_135m' is a language model, and "
                         "dataset 'fashion_mnist_idx' holds images; give it "
                         'token sequences: --config.dataset=tokens:DIR')


@pytest.mark.slow  # A trained image workdir first.
def test_an_image_runs_checkpoint_given_to_a_language_model(
    tokens, data_dir, tmp_path):
  images = tiny_config(model='mlp', dataset='fashion_mnist_idx',
                       data_dir=data_dir, num_train_steps=2)
  train.run(images, str(tmp_path / 'images'))
  for how, workdir in (('init_from', tmp_path / 'lm'),
                       ('the same workdir', tmp_path / 'images')):
    config = _config(tokens)
    if how == 'init_from':
      config.init_from = str(tmp_path / 'images')
    with pytest.raises(SystemExit) as exit_:
      train.run(config, str(workdir))
    line = exit_.value.code
    assert isinstance(line, str) and '\n' not in line, (how, line)
    assert 'another model' in line, (how, line)


def test_image_label_options_on_a_language_model_are_one_line(tokens,
                                                              tmp_path):
  line = _error(_config(tokens, label_smoothing=0.1), tmp_path / 'work')
  assert line == ("error: label_smoothing is for image classes, and "
                  "'smollm2_135m' learns next tokens; set "
                  '--config.label_smoothing=0.')

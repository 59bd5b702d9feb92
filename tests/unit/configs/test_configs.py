"""Every config file: complete, documented, and trains a step on mock data."""

import contextlib
import functools
import glob
import importlib
import os

import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds

import zoo
from recipes import evaluation, experiment
from recipes.config import defaults as default
from recipes.data import datasets
from recipes.data.sources import tfds_source
from tests.helpers import ROOT, write_labelled_token_dir, write_token_dir
from tests.idx_files import write_fashion_mnist

CONFIGS = sorted(
    os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, 'configs',
                                                             '*.py'))
    if not p.endswith(('__init__.py', 'default.py')))


def _config(name):
  return importlib.import_module(f'configs.{name}').get_config()


@pytest.mark.parametrize('name', CONFIGS)
def test_config_is_documented_and_has_every_field(name):
  module = importlib.import_module(f'configs.{name}')
  assert f'--config=configs/{name}.py' in ' '.join(module.__doc__.split())
  assert 'Expected' in module.__doc__
  assert set(_config(name).keys()) == set(default.get_config().keys())


def _shrink(config):
  """The model at its registry test size (test_zoo.py tests it in full); a
  ViT's test kwargs take 32x32 images, the crops this test makes."""
  with config.unlocked():
    config.model_kwargs = {**config.model_kwargs.to_dict(),
                           **zoo.spec(config.model).test_kwargs}


def _first_batch(exp, config) -> dict:
  """The first training batch of the experiment's data, on the host."""
  return next(exp.data.train_batches(batch_size=config.batch_size, seed=0,
                                     start_step=0, num_steps=1))


def _updates(strategy, spec, batch, num_steps: int):
  """`num_steps` updates of the initial state on `batch`: the state after
  them and the loss of each."""
  placed = next(strategy.place_batches([batch]))
  state = strategy.create_state(jax.random.PRNGKey(spec.seed))
  losses = []
  for _ in range(num_steps):
    state, metrics = strategy.train_step(state, placed)
    losses.append(float(strategy.to_host(metrics).compute()['loss']))
  return state, losses


# Updates on the fixed batch: enough for the loss to fall, and for the pmap
# comparison to see each update take the previous one's state.
NUM_STEPS = 3


def _at_test_size(config):
  """The config at its model's test size, one batch of 16 (2 per device),
  32x32 crops for ImageNet configs, the configured rate from the first
  step."""
  config.update(batch_size=16, eval_batch_size=16, image_size=32,
                lr_schedule='constant', warmup_epochs=0.0)
  _shrink(config)


def _test_data(config, data_dir):
  """Fashion-MNIST files in `data_dir` for the offline datasets; token
  sequences of the test-size models' length for a language model's."""
  if datasets.is_tokens(config.dataset) or config.tokenizer:
    # Text that the run would tokenize is read as tokenized already: the
    # real corpus is tests/integration/test_text_fortunes.py's.
    write = (write_labelled_token_dir if config.label_column
             else write_token_dir)  # Labelled text for an encoder.
    config.dataset = f'tokens:{write(data_dir, seq_len=16)}'
    config.seq_len = 16 if config.seq_len else 0
    config.update(tokenizer='', label_column='', classes='')
  if config.dataset in datasets.OFFLINE_DATASETS:
    write_fashion_mnist(str(data_dir), num_train=32, num_test=20)
    config.data_dir = str(data_dir)


# The configs on the strategies JAX recommends (jax.jit over a mesh, or
# jax.shard_map), the reference recipes among them.
RECOMMENDED_API = [name for name in CONFIGS
                   if _config(name).strategy != 'pmap']
# Those whose mesh is data parallel only, as pmap is, so the step's sums are
# those of pmap's. (cifar10_vit_sharded and imagenet_vit_b16_pod split
# matrices over tensor or fsdp, which rounds their sums differently;
# tests/integration/test_sharded_equality.py compares such runs.)
DATA_PARALLEL = [name for name in RECOMMENDED_API
                 if _config(name).mesh.fsdp == _config(name).mesh.tensor == 1]


def _comparable(name: str, strategy: str):
  """The config at test size under `strategy` as the pmap comparison runs
  it: float32, no mixup, dropout or drop path (see the test)."""
  config = _config(name)
  _at_test_size(config)
  config.update(strategy=strategy, mixup_alpha=0.0, cutmix_alpha=0.0,
                half_precision=False)
  options = zoo.spec(config.model).cls.__dataclass_fields__
  with config.model_kwargs.unlocked():
    config.model_kwargs.update({k: 0.0 for k in ('dropout_rate',
                                                 'drop_path_rate')
                                if k in options})
  return config


def _learned(name: str):
  """The config at test size as the learning test runs it."""
  config = _config(name)
  _at_test_size(config)
  return config


def _run(config, but=()) -> tuple:
  """What decides a test-size run of `config`, but the fields `but`: its
  other fields, with the model as the module it makes (resnet20 and
  resnet56 are one model at test size) and its family (the strategy's
  partition rules)."""
  fields = config.to_dict()
  for field in ('model', 'model_kwargs', *but):
    fields.pop(field)
  module = zoo.create(config.model, **config.model_kwargs.to_dict())
  return sorted(fields.items()), zoo.spec(config.model).family, module


def _groups(names: list[str], run) -> list[list[str]]:
  """`names` grouped by equal `run(name)`, in order."""
  groups = []
  for name in names:
    key = run(name)
    for group_key, group in groups:
      if group_key == key:
        group.append(name)
        break
    else:
      groups.append((key, [name]))
  return [group for _, group in groups]


# The pmap comparison's runs, once for configs whose runs differ at most in
# the learning rate, a number on the same path ('a=b': the first one runs):
# at test size, float32, imagenet_resnet50_gpu is imagenet_resnet50_tpu at
# half its rate.
PMAP_GROUPS = _groups(
    DATA_PARALLEL,
    lambda n: _run(_comparable(n, _config(n).strategy), but=['learning_rate']))
# A config whose learning run is its pmap comparison's run (float32 already,
# no mixup, dropout or drop path): the learning test compares it with pmap,
# for its whole group.
COMPARED_WHILE_LEARNING = {
    name: group for group in PMAP_GROUPS for name in group
    if _run(_learned(name)) == _run(_comparable(name,
                                                _config(name).strategy))}
# The learning test's runs, once for configs that make the same run at test
# size ('a=b': the first one runs).
LEARNING_GROUPS = _groups(CONFIGS, lambda n: _run(_learned(n)))


def test_only_the_classic_recipes_run_on_pmap():
  assert {n for n in CONFIGS if n not in RECOMMENDED_API} == {
      n for n in CONFIGS if n.endswith('_pmap')}
  assert default.get_config().strategy == 'sharded'


def test_the_shared_runs_cover_every_config():
  assert sorted(sum(LEARNING_GROUPS, [])) == CONFIGS
  assert ['cifar10_resnet20_pmap', 'cifar10_resnet56_pmap'] in LEARNING_GROUPS
  assert sorted(sum(PMAP_GROUPS, [])) == sorted(DATA_PARALLEL)
  assert ['imagenet_resnet50_gpu', 'imagenet_resnet50_tpu'] in PMAP_GROUPS
  # imagenet_vit_s16 learns with mixup: its comparison is a run of its own.
  assert 'imagenet_vit_s16' not in COMPARED_WHILE_LEARNING
  assert {'fashion_mnist_sharded', 'imagenet_resnet50_gpu'} <= set(
      COMPARED_WHILE_LEARNING)


def _own_run(strategy, spec, batch) -> tuple:
  """`NUM_STEPS` updates on `batch`: the losses, and the parameters and batch
  statistics after them on the host; and the state."""
  state, losses = _updates(strategy, spec, batch, NUM_STEPS)
  return (losses, strategy.to_host(state.params),
          strategy.to_host(state.batch_stats)), state


def _assert_pmap_takes_the_same_steps(name: str, config, exp, batch, run):
  """`run`, `_own_run`'s updates of `config` (config `name` as `_comparable`
  makes it under its own strategy; `exp` its experiment, `batch` its batch),
  against the same updates under pmap: the same losses and parameters, to
  float32 rounding."""
  on_pmap = _comparable(name, 'pmap')
  on_pmap.data_dir = config.data_dir
  parts = experiment.training(on_pmap, exp.data.num_classes,
                              exp.data.image_shape, exp.steps_per_epoch,
                              exp.num_steps)
  losses, params, stats = run
  (pmap_losses, pmap_params, pmap_stats), _ = _own_run(parts.strategy,
                                                       parts.spec, batch)
  np.testing.assert_allclose(losses, pmap_losses, rtol=1e-5)
  assert losses[-1] != losses[0]  # The steps changed the parameters.
  close = functools.partial(np.testing.assert_allclose, rtol=1e-4, atol=1e-6)
  jax.tree.map(close, params, pmap_params)
  jax.tree.map(close, stats, pmap_stats)


@pytest.mark.slow  # A few seconds a config.
@pytest.mark.parametrize('names', ['='.join(g) for g in LEARNING_GROUPS])
@pytest.mark.usefixtures('fast_compiles')  # Tiny models: compiling dominates.
def test_config_learns_a_fixed_batch_and_evaluates(names, tmp_path,
                                                   monkeypatch):
  """`NUM_STEPS` updates on one batch of the config's training data, through
  its own model, optimizer and strategy, then the whole evaluation. A config
  in COMPARED_WHILE_LEARNING is also compared with pmap on these updates
  (see test_config_takes_the_first_steps_it_took_under_pmap)."""
  name = names.split('=')[0]
  config = _learned(name)
  _test_data(config, tmp_path)
  monkeypatch.setattr(tfds_source, 'first_unreachable_url', lambda b: None)
  with (contextlib.nullcontext()
        if config.dataset in datasets.OFFLINE_DATASETS
        else tfds.testing.mock_data(num_examples=20)):
    exp = experiment.build(config)
    batch = _first_batch(exp, config)
    run, state = _own_run(exp.strategy, exp.spec, batch)
    evaluated = evaluation.evaluate(exp.strategy, state, exp.data,
                                    exp.eval_batch_size)
  losses = run[0]
  assert all(np.isfinite(losses)), losses
  assert losses[-1] < losses[0], losses
  summary = evaluated.compute()
  if exp.data.num_classes and datasets.is_tokens(config.dataset):
    assert int(evaluated.accuracy.count) == 21  # Every labelled text, once.
  elif datasets.is_tokens(config.dataset):  # Every target token, once.
    assert int(evaluated.accuracy.count) == sum(
        int(b['mask'].sum()) for b in exp.data.eval_batches(
            batch_size=exp.eval_batch_size)) > 0
    assert np.isclose(summary['perplexity'], np.exp(summary['loss']))
  else:
    assert int(evaluated.accuracy.count) == 20  # Every example, once.
  assert np.isfinite(summary['loss']) and 0 <= summary['accuracy'] <= 1
  if name in COMPARED_WHILE_LEARNING:
    _assert_pmap_takes_the_same_steps(name, config, exp, batch, run)


@pytest.mark.slow  # A few seconds a config.
@pytest.mark.parametrize('names', [
    '='.join(g) for g in PMAP_GROUPS if g[0] not in COMPARED_WHILE_LEARNING])
@pytest.mark.usefixtures('fast_compiles')
def test_config_takes_the_first_steps_it_took_under_pmap(names, tmp_path,
                                                         monkeypatch):
  """`NUM_STEPS` updates under the config's strategy and under pmap, on the
  same batch: the same losses and parameters, to float32 rounding. In
  float32: in bfloat16 the strategies' different reduction orders round
  differently, and Adam turns a near-zero gradient's flipped sign into a
  whole step. Mixup, dropout and drop path are off: by design their random
  draws are per device shard under pmap and per global batch under sharded
  (big_vision's, for mixup). Configs whose learning run is this run are
  compared in test_config_learns_a_fixed_batch_and_evaluates."""
  name = names.split('=')[0]
  monkeypatch.setattr(tfds_source, 'first_unreachable_url', lambda b: None)
  config = _comparable(name, _config(name).strategy)
  _test_data(config, tmp_path)
  with tfds.testing.mock_data(num_examples=20):
    exp = experiment.build(config)
    batch = _first_batch(exp, config)
  run, _ = _own_run(exp.strategy, exp.spec, batch)
  _assert_pmap_takes_the_same_steps(name, config, exp, batch, run)

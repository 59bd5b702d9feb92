"""Every config file: complete, documented, and trains a step on mock data."""

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
from tests.helpers import ROOT, write_fashion_mnist

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


def _fixed_batch_steps(config, num_steps: int):
  """`num_steps` updates on one batch of the config's training data, through
  its own model, optimizer and strategy: the experiment, the state after them
  and the loss of each."""
  exp = experiment.build(config)
  state, losses = _updates(exp.strategy, exp.spec, _first_batch(exp, config),
                           num_steps)
  return exp, state, losses


def _fixed_batch_losses(config, num_steps: int):
  """The losses of `_fixed_batch_steps`, and the whole evaluation after."""
  exp, state, losses = _fixed_batch_steps(config, num_steps)
  evaluated = evaluation.evaluate(exp.strategy, state, exp.data,
                                  exp.eval_batch_size)
  return losses, evaluated


def _at_test_size(config):
  config.update(batch_size=16, eval_batch_size=16, image_size=32,
                lr_schedule='constant', warmup_epochs=0.0)
  _shrink(config)


def _test_size(config, data_dir):
  """The config at its model's test size, one batch of 16 (2 per device),
  32x32 crops for ImageNet configs, the configured rate from the first step;
  Fashion-MNIST files in `data_dir` for the offline datasets."""
  _at_test_size(config)
  _test_data(config, data_dir)


def _test_data(config, data_dir):
  if config.dataset in datasets.OFFLINE_DATASETS:
    write_fashion_mnist(str(data_dir), num_train=32, num_test=20)
    config.data_dir = str(data_dir)


@pytest.mark.slow  # A few seconds a config.
@pytest.mark.parametrize('name', CONFIGS)
@pytest.mark.usefixtures('fast_compiles')  # Tiny models: compiling dominates.
def test_config_learns_a_fixed_batch_and_evaluates(name, tmp_path,
                                                   monkeypatch):
  config = _config(name)
  _test_size(config, tmp_path)
  if config.dataset in datasets.OFFLINE_DATASETS:
    losses, evaluated = _fixed_batch_losses(config, 5)
  else:
    monkeypatch.setattr(tfds_source, 'first_unreachable_url', lambda b: None)
    with tfds.testing.mock_data(num_examples=20):
      losses, evaluated = _fixed_batch_losses(config, 5)
  assert all(np.isfinite(losses)), losses
  assert losses[-1] < losses[0], losses
  summary = evaluated.compute()
  assert int(evaluated.accuracy.count) == 20  # Every example, once.
  assert np.isfinite(summary['loss']) and 0 <= summary['accuracy'] <= 1


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


def _same_steps(names: list[str]) -> list[str]:
  """Each group of `names` whose comparison runs differ at most in the
  learning rate, a number on the same path, as 'a=b' (the first one runs):
  at test size, float32, imagenet_resnet50_gpu is imagenet_resnet50_tpu at
  half its rate."""
  groups = {}
  for name in names:
    config = _comparable(name, _config(name).strategy).to_dict()
    config.pop('learning_rate')
    groups.setdefault(repr(sorted(config.items())), []).append(name)
  return ['='.join(group) for group in groups.values()]


def test_only_the_classic_recipes_run_on_pmap():
  assert {n for n in CONFIGS if n not in RECOMMENDED_API} == {
      n for n in CONFIGS if n.endswith('_pmap')}
  assert default.get_config().strategy == 'sharded'


@pytest.mark.slow  # A few seconds a config.
@pytest.mark.parametrize('names', _same_steps(DATA_PARALLEL))
@pytest.mark.usefixtures('fast_compiles')
def test_config_takes_the_first_steps_it_took_under_pmap(names, tmp_path,
                                                         monkeypatch):
  """Three updates under the config's strategy and under pmap, on the same
  batch: the same losses and parameters, to float32 rounding. In float32:
  in bfloat16 the strategies' different reduction orders round differently,
  and Adam turns a near-zero gradient's flipped sign into a whole step.
  Mixup, dropout and drop path are off: by design their random draws are
  per device shard under pmap and per global batch under sharded
  (big_vision's, for mixup)."""
  name = names.split('=')[0]
  monkeypatch.setattr(tfds_source, 'first_unreachable_url', lambda b: None)
  config = _comparable(name, _config(name).strategy)
  _test_data(config, tmp_path)
  with tfds.testing.mock_data(num_examples=20):
    exp = experiment.build(config)
    batch = _first_batch(exp, config)
  runs = {}
  for strategy in (config.strategy, 'pmap'):
    if strategy == config.strategy:
      parts = exp
    else:
      on_pmap = _comparable(name, strategy)
      on_pmap.data_dir = config.data_dir
      parts = experiment.training(on_pmap, exp.data.num_classes,
                                  exp.data.image_shape, exp.steps_per_epoch,
                                  exp.num_steps)
    state, losses = _updates(parts.strategy, parts.spec, batch, 3)
    runs[strategy] = (losses, parts.strategy.to_host(state.params),
                      parts.strategy.to_host(state.batch_stats))
  (losses, params, stats), (pmap_losses, pmap_params, pmap_stats) = (
      runs.values())
  np.testing.assert_allclose(losses, pmap_losses, rtol=1e-5)
  assert losses[-1] != losses[0]  # The steps changed the parameters.
  close = functools.partial(np.testing.assert_allclose, rtol=1e-4, atol=1e-6)
  jax.tree.map(close, params, pmap_params)
  jax.tree.map(close, stats, pmap_stats)

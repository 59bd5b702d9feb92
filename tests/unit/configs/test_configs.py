"""Every config file: complete, documented, and trains a step on mock data."""

import glob
import importlib
import os

import numpy as np
import pytest
import tensorflow_datasets as tfds

import zoo
from recipes import evaluation, experiment
from recipes.config import defaults as default
from recipes.data import datasets, tfds_source
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


def _fixed_batch_losses(config, num_steps: int):
  """Losses of `num_steps` updates on one batch of the config's training data,
  through its own model, optimizer and strategy; and its whole evaluation."""
  exp = experiment.build(config)
  batch = next(exp.data.train_batches(batch_size=config.batch_size, seed=0,
                                      start_step=0, num_steps=1))
  placed = next(exp.strategy.place_batches([batch]))
  state = exp.create_state()
  losses = []
  for _ in range(num_steps):
    state, metrics = exp.strategy.train_step(state, placed)
    losses.append(float(exp.strategy.to_host(metrics).compute()['loss']))
  evaluated = evaluation.evaluate(exp.strategy, state, exp.data,
                                  exp.eval_batch_size)
  return losses, evaluated


@pytest.mark.slow  # A few seconds a config.
@pytest.mark.parametrize('name', CONFIGS)
@pytest.mark.usefixtures('fast_compiles')  # Tiny models: compiling dominates.
def test_config_learns_a_fixed_batch_and_evaluates(name, tmp_path,
                                                   monkeypatch):
  config = _config(name)
  # The model at its test size, one batch of 16 (2 per device), 32x32 crops
  # for ImageNet configs, and the configured rate from the first step.
  config.update(batch_size=16, eval_batch_size=16, image_size=32,
                lr_schedule='constant', warmup_epochs=0.0)
  _shrink(config)
  if config.dataset in datasets.OFFLINE_DATASETS:
    write_fashion_mnist(str(tmp_path), num_train=32, num_test=20)
    config.data_dir = str(tmp_path)
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

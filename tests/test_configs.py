"""Every config file: complete, documented, and trains a step on mock data."""

import glob
import importlib
import os

import numpy as np
import pytest
import tensorflow_datasets as tfds

from recipes import defaults as default
from recipes import loop
from recipes.data import datasets
from tests.helpers import write_fashion_mnist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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


# The models are tested in full in test_zoo.py; here each family's big
# members are shrunk so that one step of every config stays cheap.
_SMALL = {'resnet': {'num_filters': 8, 'stage_sizes': (1, 1, 1, 1)},
          'wrn': {'depth': 10, 'widen_factor': 1},
          'vit': {'hidden_size': 32, 'num_layers': 2, 'num_heads': 4,
                  'mlp_dim': 64}}
_KEEP = ('resnet20', 'resnet56', 'cnn', 'mlp')


def _shrink(config):
  if config.model in _KEEP:
    return
  family = next(f for f in _SMALL if config.model.startswith(f))
  kwargs = {**config.model_kwargs.to_dict(), **_SMALL[family]}
  if family == 'vit':  # 32x32 inputs in 8x8 patches.
    kwargs.update(image_size=32, patch_size=8)
  with config.unlocked():
    config.model_kwargs = kwargs


@pytest.mark.slow  # About 8 s a config.
@pytest.mark.parametrize('name', CONFIGS)
def test_config_trains_a_step_on_mock_data(name, tmp_path, monkeypatch):
  config = _config(name)
  # Tiny shapes: one example per device, 32x32 crops for ImageNet configs.
  config.update(batch_size=8, eval_batch_size=8, num_train_steps=1,
                log_every_steps=1, eval_every_steps=1, image_size=32)
  _shrink(config)
  if config.dataset in datasets.OFFLINE_DATASETS:
    write_fashion_mnist(str(tmp_path), num_train=16, num_test=8)
    config.data_dir = str(tmp_path)
    summary = loop.train_and_evaluate(config, str(tmp_path / 'work'))
  else:
    monkeypatch.setattr(datasets, '_first_unreachable_url', lambda b: None)
    with tfds.testing.mock_data(num_examples=12):
      summary = loop.train_and_evaluate(config, str(tmp_path / 'work'))
  assert np.isfinite(summary['loss']) and 0 <= summary['accuracy'] <= 1

"""Each bad input ends the real command with one clear line and no traceback."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _train(tmp_path, *overrides, env=None):
  command = [sys.executable, '-m', 'recipes.train',
             '--config=configs/fashion_mnist_pmap.py',
             f'--workdir={tmp_path / "work"}', '--config.num_train_steps=2',
             *overrides]
  result = subprocess.run(
      command, cwd=ROOT, capture_output=True, text=True, timeout=300,
      env={**os.environ, 'JAX_PLATFORMS': 'cpu', 'JAX_NUM_CPU_DEVICES': '8',
           **(env or {})})
  assert result.returncode != 0, result.stderr[-2000:]
  assert 'Traceback' not in result.stderr, result.stderr[-3000:]
  return result.stderr.strip().splitlines()[-1]


@pytest.fixture
def empty_dir(tmp_path):
  path = tmp_path / 'empty'
  path.mkdir()
  return path


def test_batch_size_not_divisible_by_devices(tmp_path):
  line = _train(tmp_path, '--config.batch_size=100')
  assert line == ('error: batch_size 100 is not divisible by the 8 devices; '
                  'use a multiple of 8, e.g. 96 or 104.')


def test_unknown_model(tmp_path):
  line = _train(tmp_path, '--config.model=cnnn')
  assert line.startswith("error: unknown model 'cnnn'") and "'cnn'" in line


def test_unknown_dataset(tmp_path):
  line = _train(tmp_path, '--config.dataset=fashon_mnist')
  assert line.startswith("error: unknown dataset 'fashon_mnist'")
  assert "'fashion_mnist'" in line


def test_fashion_mnist_files_missing(tmp_path, empty_dir):
  line = _train(tmp_path, f'--config.data_dir={empty_dir}')
  assert line.startswith('error: Fashion-MNIST files not found')
  assert 'apt-get install -y dataset-fashion-mnist' in line


def test_mnist_not_downloadable(tmp_path, empty_dir):
  # A proxy on a closed local port makes every download fail at once, here
  # and on machines with internet alike.
  proxy = 'http://127.0.0.1:9'
  line = _train(tmp_path, '--config.dataset=mnist',
                f'--config.data_dir={empty_dir}',
                env={'HTTPS_PROXY': proxy, 'HTTP_PROXY': proxy,
                     'https_proxy': proxy, 'http_proxy': proxy})
  assert line.startswith("error: dataset 'mnist' is not prepared")
  assert 'machine with internet' in line and 'data_dir' in line
  assert 'configs/fashion_mnist_pmap.py' in line
  assert os.listdir(empty_dir) == [] or 'downloads' in os.listdir(empty_dir)


def test_unknown_config_field_is_rejected(tmp_path):
  line = _train(tmp_path, '--config.batchsize=64')
  assert line.startswith("error: unknown config field 'batchsize'")
  assert '"batch_size"' in line

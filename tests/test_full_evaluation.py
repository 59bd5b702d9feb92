"""The whole Fashion-MNIST test split (10,000 images, 79 batches) evaluated by
every layout whose eval step has collectives in it: several processes, tensor
parallelism, both strategies. Each must finish (a hard timeout turns a hang
into a failure within minutes) and give the single-device evaluation of the
same parameters."""

import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import optax
import pytest

import zoo
from recipes import loop
from recipes.data import idx
from tests.helpers import (LOCAL_LAUNCHER, ROOT, command_env, read_scalars,
                           saved_params, tiny_config)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.isdir(idx.FASHION_MNIST_DIR),
                       reason='needs Debian\'s dataset-fashion-mnist'),
]

STEPS = 30
TENSOR_PARALLEL = [
    '--config.strategy=sharded', '--config.mesh.data=2',
    '--config.mesh.tensor=2',
    # The CNN's rules use no 'tensor' axis: split its hidden layer over it.
    "--config.path_rules=(('Dense_0/kernel$', (None, 'tensor')),)"]


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """A workdir with a checkpoint of step 30 of the Fashion-MNIST recipe, and
  the single-device evaluation of its parameters on the whole test split."""
  workdir = tmp_path_factory.mktemp('trained')
  config = tiny_config(dataset='fashion_mnist_idx', batch_size=128,
                       num_train_steps=STEPS, eval_every_steps=STEPS,
                       log_every_steps=10)
  # Training evaluates the whole split too: 8 devices in this process.
  summary = loop.train_and_evaluate(config, str(workdir))

  _, params = saved_params(workdir)
  model = zoo.create('cnn', num_classes=10)
  apply = jax.jit(lambda images: model.apply({'params': params}, images))
  split = idx.load_split(None, 'test')
  images = split['image'].astype(np.float32) / 255
  logits = np.concatenate([apply(images[i:i + 1000])
                           for i in range(0, len(images), 1000)])
  labels = split['label']
  reference = {
      'loss': float(optax.softmax_cross_entropy_with_integer_labels(
          logits, labels).mean()),
      'accuracy': float(np.mean(logits.argmax(-1) == labels))}
  assert len(labels) == 10_000
  np.testing.assert_allclose(summary['loss'], reference['loss'], rtol=1e-5)
  np.testing.assert_allclose(summary['accuracy'], reference['accuracy'],
                             rtol=1e-5)
  return workdir, reference


@pytest.mark.parametrize('processes, devices, flags', [
    (2, 2, []),
    (2, 2, ['--config.strategy=shard_map']),
    (2, 2, TENSOR_PARALLEL),
    (1, 4, TENSOR_PARALLEL),
    (4, 2, ['--config.strategy=sharded', '--config.mesh.data=2',
            '--config.mesh.fsdp=2', '--config.mesh.tensor=2']),
], ids=['pmap-2x2', 'shard_map-2x2', 'sharded-tensor-2x2', 'sharded-tensor-1x4',
        'sharded-fsdp-tensor-4x2'])
def test_the_whole_split_gives_the_single_device_result(
    trained, tmp_path, processes, devices, flags):
  source, reference = trained
  workdir = tmp_path / 'work'
  shutil.copytree(source / 'checkpoints', workdir / 'checkpoints')
  command = [sys.executable, '-m', 'recipes.train',
             '--config=configs/fashion_mnist_pmap.py', f'--workdir={workdir}',
             '--config.mode=eval', f'--config.num_train_steps={STEPS}',
             '--config.stall_timeout_seconds=120', *flags]
  env = command_env(JAX_NUM_CPU_DEVICES=str(devices))
  if processes > 1:
    command = [LOCAL_LAUNCHER, f'--num_processes={processes}',
               f'--devices_per_process={devices}', '--', *command]
  result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
  output = result.stdout + result.stderr
  assert result.returncode == 0, output[-3000:]
  assert output.count('over 10000 examples') == 1  # From process 0.
  scalars = read_scalars(str(workdir))
  for name in ('loss', 'accuracy'):
    np.testing.assert_allclose(scalars[f'eval/{name}'][STEPS],
                               reference[name], rtol=1e-5)

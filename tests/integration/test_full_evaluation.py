"""The whole Fashion-MNIST test split (10,000 images, 79 batches) evaluated by
every layout whose eval step has collectives in it: several processes, tensor
parallelism, both strategies. Each must finish (a hard timeout turns a hang
into a failure within minutes) and give the single-device evaluation of the
same parameters, of their moving average, and of a second split."""

import json
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
from recipes.data.sources import idx
from tests.helpers import (LOCAL_LAUNCHER, ROOT, RUN_EACH, command_env,
                           logs_of_each_run, read_scalars, saved_params,
                           tiny_config)

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


# The toolkit's evaluations ride along: the parameters' moving average, and
# a held-out slice of train, each under its own prefix.
TOOLKIT = ['--config.ema_decay=0.9', '--config.train_split=train[:99%]',
           "--config.extra_eval_splits={'minival': 'train[99%:]'}"]


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """A workdir with a checkpoint of step 30 of the Fashion-MNIST recipe, and
  the single-device evaluations of its parameters and their average, on the
  whole test split and on the last 600 training images: {prefix: {loss,
  accuracy}}."""
  workdir = tmp_path_factory.mktemp('trained')
  config = tiny_config(dataset='fashion_mnist_idx', batch_size=128,
                       num_train_steps=STEPS, eval_every_steps=STEPS,
                       log_every_steps=10, ema_decay=0.9,
                       train_split='train[:99%]')
  config.extra_eval_splits = {'minival': 'train[99%:]'}
  # Training evaluates the whole splits too: 8 devices in this process.
  summary = loop.train_and_evaluate(config, str(workdir))

  model = zoo.create('cnn', num_classes=10)
  apply = jax.jit(model.apply)
  reference = {}
  for prefix, split in (('eval', 'test'), ('eval_minival', 'train[99%:]')):
    data = idx.load_split(None, split)
    images = data['image'].astype(np.float32) / 255
    labels = data['label']
    for suffix, item in (('', 'params'), ('_ema', 'ema_params')):
      _, params = saved_params(workdir, item=item)
      logits = np.concatenate([apply({'params': params}, images[i:i + 1000])
                               for i in range(0, len(images), 1000)])
      reference[prefix + suffix] = {
          'loss': float(optax.softmax_cross_entropy_with_integer_labels(
              logits, labels).mean()),
          'accuracy': float(np.mean(logits.argmax(-1) == labels))}
  assert len(labels) == 600 and len(reference) == 4
  for name in ('loss', 'accuracy'):
    np.testing.assert_allclose(summary[name], reference['eval'][name],
                               rtol=1e-5)
  assert reference['eval']['loss'] != reference['eval_ema']['loss']
  return workdir, reference


def _copy_of(source, workdir):
  """A new workdir with the checkpoints of `source`."""
  shutil.copytree(source / 'checkpoints', workdir / 'checkpoints')
  return workdir


def _check(output: str, workdir, reference: dict):
  """The log of one evaluation (process 0's) and the scalars it wrote."""
  # The parameters and their average.
  assert output.count('over 10000 examples') == 2, output[-3000:]
  assert output.count('over 600 examples') == 2, output[-3000:]
  scalars = read_scalars(str(workdir))
  for prefix, expected in reference.items():
    for name in ('loss', 'accuracy'):
      np.testing.assert_allclose(scalars[f'{prefix}/{name}'][STEPS],
                                 expected[name], rtol=1e-5,
                                 err_msg=f'{prefix}/{name}')


def _run(command: list[str], processes: int, devices: int,
         timeout: float = 300) -> str:
  """`command` as `processes` processes of `devices` devices each; its
  output."""
  if processes > 1:
    command = [LOCAL_LAUNCHER, f'--num_processes={processes}',
               f'--devices_per_process={devices}', '--', *command]
  result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          env=command_env(JAX_NUM_CPU_DEVICES=str(devices)),
                          timeout=timeout)
  output = result.stdout + result.stderr
  assert result.returncode == 0, output[-3000:]
  return output


FLAGS = ['--config=configs/fashion_mnist_pmap.py',
         f'--config.num_train_steps={STEPS}',
         '--config.stall_timeout_seconds=120', *TOOLKIT]


@pytest.mark.parametrize('processes, devices, flags', [
    (1, 4, TENSOR_PARALLEL),
    (4, 2, ['--config.strategy=sharded', '--config.mesh.data=2',
            '--config.mesh.fsdp=2', '--config.mesh.tensor=2']),
], ids=['sharded-tensor-1x4', 'sharded-fsdp-tensor-4x2'])
def test_the_whole_split_gives_the_single_device_result(
    trained, tmp_path, processes, devices, flags):
  source, reference = trained
  workdir = _copy_of(source, tmp_path / 'work')
  # Both commands that evaluate: the evaluate command, and the train command
  # with mode=eval.
  evaluate = (['recipes.evaluate'] if processes > 1 else
              ['recipes.train', '--config.mode=eval'])
  output = _run([sys.executable, '-m', evaluate[0], *FLAGS,
                 f'--workdir={workdir}', *evaluate[1:], *flags], processes,
                devices)
  _check(output, workdir, reference)


def test_each_strategy_on_two_processes_gives_the_single_device_result(
    trained, tmp_path):
  """pmap, shard_map and tensor parallelism, each on 2 processes x 2 devices,
  one after another in one job (the processes start once); only process 0
  logs the evaluations."""
  source, reference = trained
  strategies = {
      'pmap': [],
      'shard_map': ['--config.strategy=shard_map'],
      'sharded-tensor': TENSOR_PARALLEL,
  }
  runs = [(str(_copy_of(source, tmp_path / name)),
           [*FLAGS, '--config.mode=eval', *flags])
          for name, flags in strategies.items()]
  output = _run([sys.executable, '-c', RUN_EACH, json.dumps(runs)],
                processes=2, devices=2, timeout=600)
  assert output.count('over 10000 examples') == 2 * len(runs), output[-3000:]
  logs = logs_of_each_run(output)
  assert list(logs) == [workdir for workdir, _ in runs], output[-3000:]
  for workdir, log in logs.items():
    _check(log, workdir, reference)

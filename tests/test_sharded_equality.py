"""Every strategy computes the numbers of the pmap recipe through the real loop.

Same data, seed and config; only `config.strategy`, the mesh and the number
of processes differ. The TensorBoard scalars the runs write must agree at
every logged step: float32 on CPU, relative difference below 1e-4.
"""

import subprocess
import sys

import pytest

from recipes import train
from tests.helpers import (LOCAL_LAUNCHER, ROOT, command_env, read_scalars,
                           tiny_config, write_fashion_mnist)

TAGS = {'train/loss', 'train/accuracy', 'train/learning_rate',
        'train/steps_per_sec', 'eval/loss', 'eval/accuracy'}
TWO_PROCESSES = {
    'sharded_two_processes': ['--config.strategy=sharded',
                              '--config.mesh.data=2', '--config.mesh.fsdp=2',
                              '--config.mesh.tensor=2'],
    'shard_map_two_processes': ['--config.strategy=shard_map'],
}
SETTINGS = dict(dataset='fashion_mnist_idx', batch_size=16,
                num_train_steps=8, log_every_steps=2, eval_every_steps=4,
                eval_batch_size=32, lr_schedule='warmup_cosine',
                warmup_epochs=0.25)


def _two_processes(data_dir: str, workdir: str, *strategy_flags: str):
  """The recipe as 2 processes x 4 devices."""
  flags = [f'--config.{k}={v}' for k, v in SETTINGS.items()]
  result = subprocess.run(
      [LOCAL_LAUNCHER, '--num_processes=2',
       '--devices_per_process=4', '--', sys.executable, '-m', 'recipes.train',
       '--config=configs/fashion_mnist_sharded.py', f'--workdir={workdir}',
       f'--config.data_dir={data_dir}', *flags, *strategy_flags],
      cwd=ROOT, capture_output=True, text=True, timeout=300,
      env=command_env())
  assert result.returncode == 0, result.stdout[-3000:]
  assert result.stdout.count('over 100 examples') == 2  # Logged by [0].


def _max_rel_diff(a: dict, b: dict) -> float:
  assert sorted(a) == sorted(b)
  return max(abs(a[s] - b[s]) / abs(b[s]) for s in a)


@pytest.mark.slow
def test_every_strategy_matches_pmap_at_every_logged_step(tmp_path):
  write_fashion_mnist(str(tmp_path), num_train=128, num_test=100)
  runs = {}
  # Sharded: mesh.data = -1, all 8 devices.
  for strategy in ('pmap', 'sharded', 'shard_map'):
    config = tiny_config(strategy=strategy, data_dir=str(tmp_path),
                         **SETTINGS)
    train.run(config, str(tmp_path / strategy))
    runs[strategy] = read_scalars(str(tmp_path / strategy))
  for name, flags in TWO_PROCESSES.items():
    _two_processes(str(tmp_path), str(tmp_path / name), *flags)
    runs[name] = read_scalars(str(tmp_path / name))

  pmap = runs['pmap']
  assert sorted(pmap['train/loss']) == [2, 4, 6, 8]
  assert pmap['train/loss'][8] != pmap['train/loss'][2]  # It trained.
  for name in ('sharded', 'shard_map', *TWO_PROCESSES):
    assert TAGS <= set(runs[name])
    for tag in ('train/loss', 'train/accuracy', 'train/learning_rate',
                'eval/loss'):
      diff = _max_rel_diff(runs[name][tag], pmap[tag])
      print(f'{name} vs pmap, {tag}: max relative difference {diff:.1e}')
      assert diff < 1e-4, (name, tag)
    # Evaluation counts the same 100 test examples right.
    assert runs[name]['eval/accuracy'] == pmap['eval/accuracy']

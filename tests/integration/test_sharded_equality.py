"""Every strategy computes the numbers of the pmap recipe through the real loop.

Same data, seed and config; only `config.strategy`, the mesh, the number
of processes and of micro-batches (`grad_accum_steps`) differ. The
TensorBoard scalars the runs write must agree at every logged step: float32
on CPU, relative difference below 1e-4.
"""

import json
import subprocess
import sys

import pytest

from recipes import train
from tests.helpers import (LOCAL_LAUNCHER, ROOT, RUN_EACH, command_env,
                           logs_of_each_run, read_scalars, tiny_config)
from tests.idx_files import write_fashion_mnist

pytestmark = pytest.mark.slow

TAGS = {'train/loss', 'train/accuracy', 'train/learning_rate',
        'train/steps_per_sec', 'eval/loss', 'eval/accuracy'}
SETTINGS = dict(dataset='fashion_mnist_idx', batch_size=16,
                num_train_steps=8, log_every_steps=2, eval_every_steps=4,
                eval_batch_size=32, lr_schedule='warmup_cosine',
                warmup_epochs=0.25)
# (processes, config fields); one process has all 8 devices, two have 4.
RUNS = {
    'sharded': (1, {'strategy': 'sharded'}),  # mesh.data = -1: all 8.
    'shard_map': (1, {'strategy': 'shard_map'}),
    # Two micro-batches per step give the update of the whole batch (the CNN
    # has no batch norm).
    'pmap_accumulating': (1, {'grad_accum_steps': 2}),
    'sharded_accumulating': (1, {'strategy': 'sharded',
                                 'grad_accum_steps': 2}),
    'sharded_two_processes': (2, {'strategy': 'sharded', 'mesh.data': 2,
                                  'mesh.fsdp': 2, 'mesh.tensor': 2}),
    'shard_map_two_processes': (2, {'strategy': 'shard_map'}),
}


def _runs_on(processes: int) -> list[str]:
  """The names of RUNS of `processes` processes."""
  return [name for name, (count, _) in RUNS.items() if count == processes]


def _in_process(data_dir, workdir, fields: dict):
  config = tiny_config(data_dir=data_dir, **SETTINGS)
  config.update_from_flattened_dict(fields)
  train.run(config, workdir)
  return read_scalars(workdir)


def _two_process_runs(data_dir, tmp_path) -> dict:
  """The scalars of each run of RUNS on 2 processes x 4 devices: {name:
  scalars}, all of them run one after another in one job (the processes
  start once)."""
  names = _runs_on(2)
  runs = [(str(tmp_path / name),
           ['--config=configs/fashion_mnist_pmap.py',
            f'--config.data_dir={data_dir}',
            *[f'--config.{k}={v}'
              for k, v in {**SETTINGS, **RUNS[name][1]}.items()]])
          for name in names]
  result = subprocess.run(
      [LOCAL_LAUNCHER, '--num_processes=2', '--devices_per_process=4', '--',
       sys.executable, '-c', RUN_EACH, json.dumps(runs)],
      cwd=ROOT, capture_output=True, text=True, timeout=600,
      env=command_env())
  assert result.returncode == 0, result.stdout[-3000:]
  logs = logs_of_each_run(result.stdout)
  assert list(logs) == [workdir for workdir, _ in runs], result.stdout[-3000:]
  for log in logs.values():
    assert log.count('over 100 examples') == 2  # Logged by [0].
  return {name: read_scalars(workdir)
          for name, (workdir, _) in zip(names, runs)}


def _max_rel_diff(a: dict, b: dict) -> float:
  assert sorted(a) == sorted(b)
  return max(abs(a[s] - b[s]) / abs(b[s]) for s in a)


@pytest.fixture(scope='module')
def pmap_run(tmp_path_factory):
  """The data and the scalars of the pmap recipe on it, in this process."""
  data_dir = str(tmp_path_factory.mktemp('data'))
  write_fashion_mnist(data_dir, num_train=128, num_test=100)
  scalars = _in_process(data_dir, str(tmp_path_factory.mktemp('pmap')), {})
  assert sorted(scalars['train/loss']) == [2, 4, 6, 8]
  assert scalars['train/loss'][8] != scalars['train/loss'][2]  # It trained.
  return data_dir, scalars


def _assert_matches_pmap(name: str, scalars: dict, pmap: dict):
  assert TAGS <= set(scalars)
  for tag in ('train/loss', 'train/accuracy', 'train/learning_rate',
              'eval/loss'):
    diff = _max_rel_diff(scalars[tag], pmap[tag])
    print(f'{name} vs pmap, {tag}: max relative difference {diff:.1e}')
    assert diff < 1e-4, (name, tag)
  # Evaluation counts the same 100 test examples right.
  assert scalars['eval/accuracy'] == pmap['eval/accuracy']


@pytest.mark.parametrize('name', _runs_on(1))
def test_every_strategy_matches_pmap_at_every_logged_step(pmap_run, tmp_path,
                                                          name, caplog):
  data_dir, pmap = pmap_run
  fields = RUNS[name][1]
  with caplog.at_level('INFO'):
    scalars = _in_process(data_dir, str(tmp_path), fields)
  if 'grad_accum_steps' in fields:  # It did accumulate.
    assert 'global batch 16 on 8 devices, in 2 micro-batches of 8.' in \
        caplog.text
  _assert_matches_pmap(name, scalars, pmap)


def test_two_processes_match_pmap_at_every_logged_step(pmap_run, tmp_path):
  """Both two-process runs in one test: their job starts the processes once
  (in a test each, two test workers could each start it)."""
  data_dir, pmap = pmap_run
  runs = _two_process_runs(data_dir, tmp_path)
  assert sorted(runs) == ['shard_map_two_processes', 'sharded_two_processes']
  for name, scalars in runs.items():
    _assert_matches_pmap(name, scalars, pmap)

"""TensorBoard reads what the recipe writes: the event files themselves, and
the README's `tensorboard --logdir=WORKDIR` on a real server, read through
its HTTP API."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import requests
import tensorflow as tf

from recipes import train
from recipes.runtime import summaries
from tests.helpers import read_scalars, tiny_config
from tests.idx_files import write_fashion_mnist


def _events(path) -> list:
  return list(tf.compat.v1.train.summary_iterator(str(path)))


def test_each_flush_writes_one_complete_event_file(tmp_path):
  directory = summaries.directory(tmp_path)
  writer = summaries.EventFileWriter(directory)
  writer.write_hparams({'model': 'cnn', 'learning_rate': 0.1})
  writer.write_scalars(1, {'train/loss': 2.5})
  writer.flush()
  writer.write_scalars(2, {'train/loss': np.float32(1.5),
                           'eval/accuracy': 0.25})
  writer.flush()
  writer.flush()  # Nothing new: no file.
  first, second = sorted(directory.iterdir())
  assert [e.file_version for e in _events(first)][0] == 'brain.Event:2'
  assert [v.tag for e in _events(first) for v in e.summary.value] == [
      '_hparams_/session_start_info', 'train/loss']
  assert read_scalars(tmp_path) == {'train/loss': {1: 2.5, 2: 1.5},
                                    'eval/accuracy': {2: 0.25}}


def test_files_written_sooner_sort_first(tmp_path):
  directory = summaries.directory(tmp_path)
  writer = summaries.EventFileWriter(directory, flush_secs=0)  # Each write.
  for step in range(1, 13):
    writer.write_scalars(step, {'train/loss': step})
  files = sorted(directory.iterdir())
  assert len(files) == 12
  assert [e.step for f in files for e in _events(f)[1:]] == list(range(1, 13))


@contextlib.contextmanager
def _tensorboard(logdir, log_path):
  """The README's command on 127.0.0.1; yields its URL."""
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  command = [os.path.join(os.path.dirname(sys.executable), 'tensorboard'),
             f'--logdir={logdir}', '--host=127.0.0.1', f'--port={port}']
  with open(log_path, 'wb') as log:
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
  try:
    yield f'http://127.0.0.1:{port}'
  finally:
    os.killpg(process.pid, signal.SIGTERM)
    try:
      process.wait(20)
    except subprocess.TimeoutExpired:
      os.killpg(process.pid, signal.SIGKILL)
      process.wait()


def _poll(read, done, seconds: float = 120):
  """`read()` once `done(read())` holds; fails after `seconds`."""
  deadline = time.monotonic() + seconds
  while True:
    try:
      value = read()
      if done(value):
        return value
    except requests.ConnectionError:
      value = 'not serving yet'
    if time.monotonic() > deadline:
      pytest.fail(f'TensorBoard did not show it in {seconds} s; last: '
                  f'{str(value)[:2000]}')
    time.sleep(1)


@pytest.mark.slow
def test_tensorboard_shows_the_scalars_the_hparams_metrics_and_the_profile(
    tmp_path):
  """One run, traced for two of its steps, on one server: its scalars, the
  hparams dashboard and the profile tab."""
  data, workdir = tmp_path / 'data', tmp_path / 'run'
  data.mkdir()
  write_fashion_mnist(str(data), num_train=64, num_test=20)
  train.run(tiny_config(dataset='fashion_mnist_idx', data_dir=str(data),
                        num_train_steps=6, profile_steps=2,
                        profile_start_step=2), str(workdir))
  written = read_scalars(workdir)
  run = summaries.DIRECTORY

  with _tensorboard(workdir, tmp_path / 'tensorboard.log') as url:
    get = lambda path, **params: requests.get(
        f'{url}{path}', params=params, timeout=30).json()
    tags = _poll(lambda: get('/data/plugin/scalars/tags'),
                 lambda tags: set(tags.get(run, ())) == set(written))
    assert list(tags) == [run]  # No run named '.', nor any other.
    for tag, values in written.items():
      shown = get('/data/plugin/scalars/scalars', run=run, tag=tag)
      assert {step: value for _, step, value in shown} == pytest.approx(
          values), tag

    # The hparams dashboard: the config's values and, for each metric, the
    # value of its last step (blank if TensorBoard cannot find them).
    groups = _poll(
        lambda: requests.post(f'{url}/data/plugin/hparams/session_groups',
                              json=_ALL_SESSIONS, timeout=30).json(),
        lambda reply: reply.get('sessionGroups') and reply['sessionGroups'][
            0]['sessions'][0].get('metricValues'))
    [group] = groups['sessionGroups']
    assert group['hparams']['model'] == 'cnn'
    assert group['hparams']['num_train_steps'] == 6
    [session] = group['sessions']
    assert session['name'] == run
    shown = {m['name']['tag']: (m['trainingStep'], m['value'])
             for m in session['metricValues']}
    assert set(shown) == set(written)
    for tag, values in written.items():
      last = max(values)
      assert shown[tag] == (last, pytest.approx(values[last])), tag

    plugins = _poll(lambda: get('/data/plugins_listing'),
                    lambda listing: 'profile' in listing)
    assert plugins['profile']['enabled']
    # One traced session, in the same run as the scalars.
    [session] = _poll(lambda: get('/data/plugin/profile/runs'), bool)
    assert session.startswith(run)
    tools = get('/data/plugin/profile/run_tools', run=session)
    assert 'trace_viewer@' in tools or 'trace_viewer' in tools


_ALL_SESSIONS = {
    'experimentName': '', 'startIndex': 0, 'sliceSize': 100, 'colParams': [],
    'allowedStatuses': ['STATUS_UNKNOWN', 'STATUS_SUCCESS', 'STATUS_FAILURE',
                        'STATUS_RUNNING'],
}

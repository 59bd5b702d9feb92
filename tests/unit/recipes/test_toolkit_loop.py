"""The toolkit through the real loop: several eval splits, each under its own
prefix, the moving average evaluated next to the parameters, top-5, and a
profile trace for TensorBoard."""

import glob
import os

import numpy as np
import pytest

from recipes import loop
from tests.helpers import read_scalars, tiny_config
from tests.idx_files import write_fashion_mnist

# The whole loop, a few times: the slow tier.
pytestmark = pytest.mark.slow


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  data_dir = str(tmp_path_factory.mktemp('data'))
  write_fashion_mnist(data_dir, num_train=200, num_test=40)
  workdir = str(tmp_path_factory.mktemp('run'))
  config = tiny_config(
      dataset='fashion_mnist_idx', data_dir=data_dir,
      train_split='train[:90%]', num_train_steps=6, eval_every_steps=6,
      # More steps to trace than the run has left: it traces until the end.
      ema_decay=0.5, profile_steps=100, profile_start_step=2)
  config.extra_eval_splits = {'minival': 'train[90%:]'}
  summary = loop.train_and_evaluate(config, workdir)
  return workdir, summary


def test_every_split_and_the_average_are_evaluated(run):
  workdir, summary = run
  scalars = read_scalars(workdir)
  for prefix in ('eval', 'eval_ema', 'eval_minival', 'eval_minival_ema'):
    for name in ('loss', 'accuracy', 'top5_accuracy'):
      assert list(scalars[f'{prefix}/{name}']) == [6], (prefix, name)
  # The run's result is the main split's, with the parameters themselves.
  np.testing.assert_allclose(summary['loss'], scalars['eval/loss'][6],
                             rtol=1e-6)
  assert scalars['eval/loss'][6] != scalars['eval_ema/loss'][6]
  assert scalars['eval/loss'][6] != scalars['eval_minival/loss'][6]
  for prefix in ('eval', 'eval_minival'):
    assert scalars[f'{prefix}/top5_accuracy'][6] >= scalars[
        f'{prefix}/accuracy'][6]


def test_the_profile_is_where_tensorboard_looks(run):
  workdir, _ = run
  traces = glob.glob(os.path.join(workdir, 'summaries', 'plugins',
                                  'profile', '*', '*.xplane.pb'))
  assert traces and os.path.getsize(traces[0]) > 0


def test_no_trace_when_its_step_is_not_reached_or_already_passed(
    tmp_path, caplog):
  config = tiny_config(profile_steps=2, profile_start_step=6)
  with caplog.at_level('WARNING'):
    assert loop._profiler(config, str(tmp_path), 0, 6) is None
  assert 'No trace: profile_start_step 6 is not before the last step (6)' \
      in caplog.text
  config.profile_start_step = 2
  assert loop._profiler(config, str(tmp_path), 2, 6) is None  # Resumed.
  assert loop._profiler(config, str(tmp_path), 1, 6) is not None

"""`python -m recipes.data.prepare` as a user runs it: killed mid-run and run
again it gives the files of a run never stopped; --verify finds damage; every
mistake is one line."""

import os
import signal
import subprocess
import sys
import time

import pytest

from recipes.data import prepare
from tests.helpers import ROOT, command_env, write_fashion_mnist

# Each test starts the command: the slow tier.
pytestmark = pytest.mark.slow

TIMEOUT = 120  # Seconds; a run here takes a few.
PER_SHARD = 10


@pytest.fixture(scope='module')
def idx_dir(tmp_path_factory):
  path = tmp_path_factory.mktemp('idx')
  write_fashion_mnist(str(path), num_train=3000, num_test=100)
  return str(path)


def _command(*args):
  return [sys.executable, '-m', 'recipes.data.prepare', *map(str, args)]


def _run(*args):
  return subprocess.run(_command(*args), cwd=ROOT, capture_output=True,
                        text=True, timeout=TIMEOUT, env=command_env())


def _prepare(idx_dir, dst, *flags):
  return _run('fashion_mnist_idx', dst, f'--data_dir={idx_dir}',
              f'--examples_per_shard={PER_SHARD}', *flags)


def _files(path):
  return {name: (path / name).read_bytes() for name in os.listdir(path)}


def _one_line_error(result) -> str:
  assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
  assert result.stdout == ''
  lines = result.stderr.splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: '), result.stderr
  return lines[0]


@pytest.fixture(scope='module')
def whole(idx_dir, tmp_path_factory):
  """A run never stopped."""
  dst = tmp_path_factory.mktemp('whole') / 'prepared'
  result = _prepare(idx_dir, dst)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stderr == ''  # No library noise.
  assert result.stdout.startswith(
      f'Prepared fashion_mnist_idx in {dst}: train 3,000 examples in 300 '
      'shards, test 100 examples in 10 shards'), result.stdout
  return dst


def test_killed_run_continues_to_the_same_files(idx_dir, whole, tmp_path):
  dst = tmp_path / 'prepared'
  process = subprocess.Popen(_command(
      'fashion_mnist_idx', dst, f'--data_dir={idx_dir}',
      f'--examples_per_shard={PER_SHARD}'), cwd=ROOT, env=command_env(),
                             stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
  deadline = time.monotonic() + TIMEOUT
  try:
    # A shard is done once the progress file lists it (after its rename).
    progress = dst / prepare.PROGRESS
    while not (progress.exists()
               and len(progress.read_text().splitlines()) >= 2):
      assert process.poll() is None, 'it ended before writing a shard'
      assert time.monotonic() < deadline, 'no shard written in time'
      time.sleep(0.002)
    process.send_signal(signal.SIGKILL)
  finally:
    process.kill()
    process.wait(TIMEOUT)
  # Stopped mid-run: some shards written, no manifest.
  shards = [n for n in os.listdir(dst) if n.endswith('.array_record')]
  assert 1 <= len(shards) < 310
  assert 'manifest.json' not in os.listdir(dst)

  result = _prepare(idx_dir, dst)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'the others were there' in result.stdout, result.stdout
  assert _files(dst) == _files(whole)


def test_verify_says_ok_or_names_the_damaged_shard(whole, tmp_path):
  result = _run('--verify', whole)
  assert result.returncode == 0, result.stderr
  assert result.stdout.startswith(f'{whole}: OK, 310 shards'), result.stdout
  copy = tmp_path / 'copy'
  copy.mkdir()
  for name, data in _files(whole).items():
    (copy / name).write_bytes(data)
  shard = copy / 'train-00123-of-00300.array_record'
  data = bytearray(shard.read_bytes())
  data[100] ^= 0xff
  shard.write_bytes(bytes(data))
  line = _one_line_error(_run('--verify', copy))
  assert 'damaged' in line and 'train-00123-of-00300.array_record' in line


def test_help_answers():
  result = _run('--help')
  assert result.returncode == 0
  assert 'usage: python -m recipes.data.prepare SRC DST' in result.stdout
  assert '--examples_per_shard' in result.stdout


@pytest.mark.parametrize('case', [
    'unknown source', 'cloud destination', 'occupied destination',
    'other settings', 'empty split', 'verify a folder', 'missing idx files'])
def test_mistakes_are_one_line(case, idx_dir, whole, tmp_path):
  dst = tmp_path / 'new'
  if case == 'unknown source':
    line = _one_line_error(_run('no_such_dataset_anywhere', dst))
    assert "unknown SRC 'no_such_dataset_anywhere'" in line
  elif case == 'cloud destination':
    line = _one_line_error(_prepare(idx_dir, 'gs://bucket/prepared'))
    assert 'Prepare into a local directory, then copy it' in line
  elif case == 'occupied destination':
    line = _one_line_error(_prepare(idx_dir, idx_dir))
    assert 'holds other files' in line and 'nothing was deleted' in line
    assert len(os.listdir(idx_dir)) == 4
  elif case == 'other settings':
    before = _files(whole)
    line = _one_line_error(_prepare(idx_dir, whole, '--splits=train'))
    assert 'differs from this one' in line
    assert _files(whole) == before
  elif case == 'empty split':
    write_fashion_mnist(str(tmp_path), num_train=20, num_test=0)
    line = _one_line_error(_prepare(tmp_path, dst))
    assert "split 'test' of fashion_mnist_idx has no examples" in line
  elif case == 'verify a folder':
    line = _one_line_error(_run('--verify', idx_dir))
    assert 'is not a prepared directory' in line
  elif case == 'missing idx files':
    line = _one_line_error(_prepare(tmp_path / 'nothing', dst))
    assert 'Fashion-MNIST files not found' in line
  assert not dst.exists()

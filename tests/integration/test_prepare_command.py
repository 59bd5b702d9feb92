"""`python -m recipes.data.prepare` as a user runs it: killed mid-run and run
again it gives the files of a run never stopped; --verify finds damage; every
mistake is one line. The command's processes where a process matters (a
kill, what it writes to stderr, its exit status); the rest through its
`main`, in process."""

import os
import subprocess
import sys

import pytest

from tests.helpers import (ROOT, command_env, prepare_in_process,
                           sigkill_prepare_after)
from tests.idx_files import write_fashion_mnist

# A 3,000-example prepare and the command's processes: the slow tier.
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


def _prepare_here(idx_dir, dst, *flags):
  return prepare_in_process('fashion_mnist_idx', dst,
                            f'--data_dir={idx_dir}',
                            f'--examples_per_shard={PER_SHARD}', *flags)


def _files(path):
  return {name: (path / name).read_bytes() for name in os.listdir(path)}


def _one_line_error(result) -> str:
  """The line of a mistake: a process's result or (status, out, err)."""
  if isinstance(result, subprocess.CompletedProcess):
    result = (result.returncode, result.stdout, result.stderr)
  code, out, err = result
  assert code == 1, (code, err[-2000:])
  assert out == ''
  lines = err.splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: '), err
  return lines[0]


@pytest.fixture(scope='module')
def whole(idx_dir, tmp_path_factory):
  """A run never stopped (in process; the command's own run, and its quiet
  stderr, are checked by test_killed_run_continues_to_the_same_files)."""
  dst = tmp_path_factory.mktemp('whole') / 'prepared'
  code, out, err = _prepare_here(idx_dir, dst)
  assert code == 0, err[-3000:]
  assert out.startswith(
      f'Prepared fashion_mnist_idx in {dst}: train 3,000 examples in 300 '
      'shards, test 100 examples in 10 shards'), out
  return dst


def test_killed_run_continues_to_the_same_files(idx_dir, whole, tmp_path):
  dst = tmp_path / 'prepared'
  sigkill_prepare_after(_command(
      'fashion_mnist_idx', dst, f'--data_dir={idx_dir}',
      f'--examples_per_shard={PER_SHARD}'), dst, 1, TIMEOUT)
  # Stopped mid-run: some shards written, no manifest.
  shards = [n for n in os.listdir(dst) if n.endswith('.array_record')]
  assert 1 <= len(shards) < 310
  assert 'manifest.json' not in os.listdir(dst)

  result = _prepare(idx_dir, dst)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stderr == ''  # No library noise.
  assert 'the others were there' in result.stdout, result.stdout
  assert _files(dst) == _files(whole)


def test_verify_says_ok_or_names_the_damaged_shard(whole, tmp_path):
  code, out, err = prepare_in_process('--verify', whole)
  assert code == 0, err
  assert out.startswith(f'{whole}: OK, 310 shards'), out
  copy = tmp_path / 'copy'
  copy.mkdir()
  for name, data in _files(whole).items():
    (copy / name).write_bytes(data)
  shard = copy / 'train-00123-of-00300.array_record'
  data = bytearray(shard.read_bytes())
  data[100] ^= 0xff
  shard.write_bytes(bytes(data))
  line = _one_line_error(prepare_in_process('--verify', copy))
  assert 'damaged' in line and 'train-00123-of-00300.array_record' in line


def test_help_answers():
  code, out, _ = prepare_in_process('--help')
  assert code == 0
  assert 'usage: python -m recipes.data.prepare SRC DST' in out
  assert '--examples_per_shard' in out


def test_a_mistake_ends_the_command_with_one_line_and_status_1(tmp_path):
  """The process: nothing but the line on stderr (TFDS, asked for an
  unknown name, loads first), nothing on stdout (the other mistakes, in
  process, below)."""
  line = _one_line_error(_run('no_such_dataset_anywhere', tmp_path / 'new'))
  assert "unknown SRC 'no_such_dataset_anywhere'" in line
  assert not (tmp_path / 'new').exists()


@pytest.mark.parametrize('case', [
    'cloud destination', 'occupied destination',
    'other settings', 'empty split', 'verify a folder', 'missing idx files'])
def test_mistakes_are_one_line(case, idx_dir, whole, tmp_path):
  """In process (an unknown SRC: the command, above)."""
  dst = tmp_path / 'new'
  if case == 'cloud destination':
    line = _one_line_error(_prepare_here(idx_dir, 'gs://bucket/prepared'))
    assert 'Prepare into a local directory, then copy it' in line
  elif case == 'occupied destination':
    line = _one_line_error(_prepare_here(idx_dir, idx_dir))
    assert 'holds other files' in line and 'nothing was deleted' in line
    assert len(os.listdir(idx_dir)) == 4
  elif case == 'other settings':
    before = _files(whole)
    line = _one_line_error(_prepare_here(idx_dir, whole, '--splits=train'))
    assert 'differs from this one' in line
    assert _files(whole) == before
  elif case == 'empty split':
    write_fashion_mnist(str(tmp_path), num_train=20, num_test=0)
    line = _one_line_error(_prepare_here(tmp_path, dst))
    assert "split 'test' of fashion_mnist_idx has no examples" in line
  elif case == 'verify a folder':
    line = _one_line_error(prepare_in_process('--verify', idx_dir))
    assert 'is not a prepared directory' in line
  elif case == 'missing idx files':
    line = _one_line_error(_prepare_here(tmp_path / 'nothing', dst))
    assert 'Fashion-MNIST files not found' in line
  assert not dst.exists()

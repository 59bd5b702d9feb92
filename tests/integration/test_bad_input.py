"""Each bad input ends the real command with one clear line and no traceback."""

import hashlib
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, command_env, write_fashion_mnist

# Each test runs the command (or real processes): the slow tier.
pytestmark = pytest.mark.slow



def _run(workdir, *flags, config='configs/fashion_mnist_pmap.py', env=None):
  command = [sys.executable, '-m', 'recipes.train', f'--config={config}',
             f'--workdir={workdir}', '--config.num_train_steps=2', *flags]
  return subprocess.run(
      command, cwd=ROOT, capture_output=True, text=True, timeout=300,
      env=command_env(JAX_NUM_CPU_DEVICES='8', **(env or {})))


def _train(tmp_path, *flags, workdir=None, **kwargs):
  """The last line of a run that must fail cleanly."""
  result = _run(workdir or tmp_path / 'work', *flags, **kwargs)
  assert result.returncode != 0, result.stderr[-2000:]
  assert 'Traceback' not in result.stderr, result.stderr[-3000:]
  return result.stderr.strip().splitlines()[-1]


def _hashes(directory):
  """{relative path: sha256} of every file under `directory`."""
  found = {}
  for parent, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(parent, name)
      with open(path, 'rb') as f:
        found[os.path.relpath(path, directory)] = hashlib.sha256(
            f.read()).hexdigest()
  return found


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """(workdir, data flags) of a 2-step mlp run that saved a checkpoint."""
  data = tmp_path_factory.mktemp('data')
  write_fashion_mnist(str(data), num_train=128, num_test=16)
  flags = (f'--config.data_dir={data}', '--config.batch_size=64')
  workdir = tmp_path_factory.mktemp('trained')
  result = _run(workdir, *flags, '--config.model=mlp')
  assert result.returncode == 0, result.stderr[-3000:]
  assert os.listdir(workdir / 'checkpoints') == ['2']
  return workdir, flags


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
  assert line == ("error: unknown config field 'batchsize'; did you mean "
                  "'batch_size' or 'eval_batch_size'? --help lists all "
                  'fields.')


def test_config_file_missing(tmp_path):
  line = _train(tmp_path, config='configs/no_such_config.py')
  assert line == ("error: config file 'configs/no_such_config.py' not found; "
                  'give the path of a config, e.g. '
                  '--config=configs/fashion_mnist_pmap.py.')


def test_config_file_with_a_syntax_error(tmp_path):
  config = tmp_path / 'broken.py'
  config.write_text('def get_config():\n  return dict(model=\n')
  line = _train(tmp_path, config=str(config))
  assert line.startswith(f"error: config file '{config}' has a syntax error "
                         'in line 2: ')
  assert line.endswith('; fix the file.')


@pytest.mark.parametrize('flag, expected', [
    ('--config.batch_size=abc', "config field batch_size must be an int, not "
     "'abc'; e.g. --config.batch_size=128."),
    ('--config.learning_rate=fast', "config field learning_rate must be a "
     "float, not 'fast'; e.g. --config.learning_rate=0.1."),
    ('--config.seed=1180591620717411303424', 'config field seed is '
     '1180591620717411303424; it must be an int from 0 to 2147483647.'),
    ('--config.learning_rate=nan', 'config field learning_rate is nan; it '
     'must be a finite number >= 0.'),
])
def test_config_value_of_the_wrong_type_or_out_of_range(tmp_path, flag,
                                                        expected):
  assert _train(tmp_path, flag) == f'error: {expected}'
  assert not (tmp_path / 'work').exists()  # Checked before anything else.


def test_config_in_a_directory_with_a_colon_in_its_name(tmp_path):
  config = tmp_path / 'runs:2026' / 'fashion_mnist.py'
  config.parent.mkdir()
  config.write_text(open(os.path.join(ROOT, 'configs',
                                      'fashion_mnist_pmap.py')).read())
  # The file loads (and its field is then checked).
  assert _train(tmp_path, '--config.log_every_steps=0', config=str(
      config)) == ('error: config field log_every_steps is 0; it must be an '
                   'int >= 1.')


def test_config_file_returning_a_dict(tmp_path):
  config = tmp_path / 'plain.py'
  config.write_text('def get_config():\n  return dict(batch_size=8)\n')
  assert _train(tmp_path, config=str(config)) == (
      f"error: get_config() in '{config}' returned a dict, not an "
      'ml_collections.ConfigDict; start from recipes/config/defaults.py '
      'get_config() and return that.')


def test_workdir_not_writable(tmp_path):
  # A directory under a regular file cannot be made, even by root.
  (tmp_path / 'file').write_text('')
  workdir = tmp_path / 'file' / 'work'
  line = _train(tmp_path, workdir=workdir)
  assert line == (f"error: cannot write to workdir '{workdir}' (Not a "
                  'directory); choose a writable --workdir.')


def test_mesh_does_not_match_the_devices(tmp_path):
  line = _train(tmp_path, '--config.strategy=sharded', '--config.mesh.data=3')
  assert line == ('error: mesh --config.mesh.data=3 --config.mesh.fsdp=1 '
                  '--config.mesh.tensor=1 has 3 devices but there are 8; make '
                  'the sizes multiply to 8, or set one of them to -1.')


def test_nothing_to_train(tmp_path):
  line = _train(tmp_path, '--config.num_train_steps=0',
                '--config.num_epochs=0')
  assert line == ('error: nothing to train: set --config.num_epochs or '
                  '--config.num_train_steps to a positive value.')


def test_checkpoint_of_another_model(tmp_path, trained):
  workdir, data = trained
  before = _hashes(workdir)  # Checkpoints, config.json, summaries.
  line = _train(tmp_path, *data, '--config.model=cnn', workdir=workdir)
  assert line.startswith(f"error: the checkpoint {workdir}/checkpoints/2 does "
                         'not fit this run: params/Conv_0/bias is missing '
                         'there and shape (32,) here')
  assert 'another model' in line and 'another --workdir' in line
  assert _hashes(workdir) == before


@pytest.mark.parametrize('flag, error', [
    ('--config.batch_size=100', 'error: batch_size 100 is not divisible'),
    ('--config.model=cnnn', "error: unknown model 'cnnn'"),
])
def test_bad_input_keeps_the_checkpoint(tmp_path, trained, flag, error):
  workdir, data = trained
  before = _hashes(workdir)
  assert 'config.json' in before and 'checkpoints/2/_CHECKPOINT_METADATA' in (
      before)
  assert _train(tmp_path, *data, flag, workdir=workdir).startswith(error)
  assert _hashes(workdir) == before


@pytest.mark.parametrize('flag', ['--workdir={}', '--config.data_dir={}',
                                  '--config.init_from={}'])
def test_a_url_with_a_slash_missing_is_one_line_before_anything_runs(
    tmp_path, flag, monkeypatch):
  """gs:/bucket/run would be a local directory 'gs:' in the working one."""
  monkeypatch.chdir(tmp_path)
  command = [sys.executable, '-m', 'recipes.train',
             f'--config={ROOT}/configs/fashion_mnist_pmap.py',
             f'--workdir={tmp_path / "work"}', flag.format('gs:/bucket/run')]
  result = subprocess.run(command, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=command_env())
  assert result.returncode == 1 and 'Traceback' not in result.stderr
  assert result.stderr.strip().splitlines()[-1] == (
      "error: 'gs:/bucket/run' looks like a URL with a slash missing; write "
      "'gs://bucket/run' (or ./gs:/bucket/run for a local directory of that "
      'name).')
  assert sorted(os.listdir(tmp_path)) == []  # Nothing written anywhere.


def test_a_huge_value_is_cut_to_a_readable_line(tmp_path):
  line = _train(tmp_path, '--config.model=' + 'x' * 100_000)
  assert len(line) < 1100
  assert line.startswith("error: unknown model 'xxxx")
  assert '[... ' in line and ' characters left out ...]' in line
  # What to do, at the end of the message, is kept.
  assert line.endswith("as 'package.module:ClassName'.")


def test_a_workdir_with_brackets_is_one_line_and_nothing_is_written(tmp_path):
  workdir = tmp_path / 'sweep[3]'
  line = _train(tmp_path, workdir=workdir)
  assert line.startswith(f"error: '{workdir}' has '[' or ']' in it")
  assert not workdir.exists()

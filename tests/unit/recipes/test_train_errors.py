"""Bad input to `python -m recipes.train`, in process: `recipes.train.run`
(what the command runs once its flags are parsed) ends with SystemExit and
one line 'error: ...' that the command prints, and writes nothing. The
configs come from configs/fashion_mnist_pmap.py as the command loads them.
tests/integration/test_bad_input.py runs the command itself for what needs
the process: its flags, its exit status, no traceback."""

import hashlib
import os

import pytest

from recipes import train
from recipes.config import command_line
from recipes.runtime.errors import UserError
from tests.helpers import ROOT, config_from_command_line, train_error
from tests.idx_files import write_fashion_mnist

pytestmark = pytest.mark.usefixtures('fast_compiles')  # A tiny MLP.

CONFIG = os.path.join(ROOT, 'configs', 'fashion_mnist_pmap.py')


def _config(*overrides):
  """The config of `--config=configs/fashion_mnist_pmap.py
  --config.num_train_steps=2 OVERRIDES...`."""
  return config_from_command_line(['train', f'--config={CONFIG}',
                                   '--config.num_train_steps=2', *overrides])


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


@pytest.fixture(name='empty_dir')
def _empty_dir(tmp_path):
  path = tmp_path / 'empty'
  path.mkdir()
  return path


def test_batch_size_not_divisible_by_devices(data_dir, tmp_path):
  line = train_error(_config(f'--config.data_dir={data_dir}',
                        '--config.batch_size=100'), tmp_path / 'work')
  assert line == ('error: batch_size 100 is not divisible by the 8 devices; '
                  'use a multiple of 8, e.g. 96 or 104.')


def test_unknown_model(data_dir, tmp_path):
  line = train_error(_config(f'--config.data_dir={data_dir}',
                        '--config.model=cnnn'), tmp_path / 'work')
  assert line.startswith("error: unknown model 'cnnn'") and "'cnn'" in line


def test_unknown_dataset(data_dir, tmp_path):
  line = train_error(_config(f'--config.data_dir={data_dir}',
                        '--config.dataset=fashon_mnist'), tmp_path / 'work')
  assert line.startswith("error: unknown dataset 'fashon_mnist'")
  assert "'fashion_mnist'" in line


def test_fashion_mnist_files_missing(tmp_path, empty_dir):
  line = train_error(_config(f'--config.data_dir={empty_dir}'),
                     tmp_path / 'work')
  assert line.startswith('error: Fashion-MNIST files not found')
  assert 'apt-get install -y dataset-fashion-mnist' in line


def test_mnist_not_downloadable(tmp_path, empty_dir, monkeypatch):
  # A proxy on a closed local port makes every download fail at once, here
  # and on machines with internet alike.
  proxy = 'http://127.0.0.1:9'
  for name in ('HTTPS_PROXY', 'HTTP_PROXY', 'https_proxy', 'http_proxy'):
    monkeypatch.setenv(name, proxy)
  line = train_error(_config('--config.dataset=mnist',
                        f'--config.data_dir={empty_dir}'), tmp_path / 'work')
  assert line.startswith("error: dataset 'mnist' is not prepared")
  assert 'machine with internet' in line and 'data_dir' in line
  assert 'configs/fashion_mnist_pmap.py' in line
  assert os.listdir(empty_dir) == [] or 'downloads' in os.listdir(empty_dir)


@pytest.mark.parametrize('flag, expected', [
    ('--config.seed=1180591620717411303424', 'config field seed is '
     '1180591620717411303424; it must be an int from 0 to 2147483647.'),
    ('--config.learning_rate=nan', 'config field learning_rate is nan; it '
     'must be a finite number >= 0.'),
])
def test_config_value_out_of_range_from_the_command_line(data_dir, tmp_path,
                                                         flag, expected):
  line = train_error(_config(f'--config.data_dir={data_dir}', flag),
                tmp_path / 'work')
  assert line == f'error: {expected}'
  assert not (tmp_path / 'work').exists()  # Checked before anything else.


def test_config_file_missing(monkeypatch):
  monkeypatch.chdir(ROOT)
  with pytest.raises(UserError) as error:
    command_line.ConfigFileParser().parse('configs/no_such_config.py')
  assert str(error.value) == (
      "config file 'configs/no_such_config.py' not found; give the path of a "
      'config, e.g. --config=configs/fashion_mnist_pmap.py.')


def test_config_file_returning_a_dict(tmp_path):
  config = tmp_path / 'plain.py'
  config.write_text('def get_config():\n  return dict(batch_size=8)\n')
  with pytest.raises(UserError) as error:
    command_line.ConfigFileParser().parse(str(config))
  assert str(error.value) == (
      f"get_config() in '{config}' returned a dict, not an "
      'ml_collections.ConfigDict; start from recipes/config/defaults.py '
      'get_config() and return that.')


def test_config_in_a_directory_with_a_colon_in_its_name(tmp_path):
  config = tmp_path / 'runs:2026' / 'fashion_mnist.py'
  config.parent.mkdir()
  config.write_text(open(CONFIG).read())
  # The file loads (and its field is then checked).
  loaded = command_line.ConfigFileParser().parse(str(config))
  assert loaded.model == _config().model
  loaded.log_every_steps = 0
  assert train_error(loaded, tmp_path / 'work') == (
      'error: config field log_every_steps is 0; it must be an int >= 1.')


def test_workdir_not_writable(data_dir, tmp_path):
  # A directory under a regular file cannot be made, even by root.
  (tmp_path / 'file').write_text('')
  workdir = tmp_path / 'file' / 'work'
  line = train_error(_config(f'--config.data_dir={data_dir}'), workdir)
  assert line == (f"error: cannot write to workdir '{workdir}' (Not a "
                  'directory); choose a writable --workdir.')


def test_mesh_does_not_match_the_devices(data_dir, tmp_path):
  line = train_error(_config(f'--config.data_dir={data_dir}',
                        '--config.strategy=sharded', '--config.mesh.data=3'),
                tmp_path / 'work')
  assert line == ('error: mesh --config.mesh.data=3 --config.mesh.fsdp=1 '
                  '--config.mesh.tensor=1 has 3 devices but there are 8; make '
                  'the sizes multiply to 8, or set one of them to -1.')


def test_nothing_to_train(data_dir, tmp_path):
  line = train_error(_config(f'--config.data_dir={data_dir}',
                        '--config.batch_size=16', '--config.num_train_steps=0',
                        '--config.num_epochs=0'),
                tmp_path / 'work')
  assert line == ('error: nothing to train: set --config.num_epochs or '
                  '--config.num_train_steps to a positive value.')


@pytest.mark.parametrize('field', ['workdir', 'data_dir', 'init_from'])
def test_a_url_with_a_slash_missing_is_one_line_before_anything_runs(
    tmp_path, monkeypatch, field):
  """gs:/bucket/run would be a local directory 'gs:' in the working one."""
  monkeypatch.chdir(tmp_path)
  url = 'gs:/bucket/run'
  config = _config(*([f'--config.{field}={url}'] if field != 'workdir'
                     else []))
  line = train_error(config, url if field == 'workdir' else tmp_path / 'work')
  assert line == (
      "error: 'gs:/bucket/run' looks like a URL with a slash missing; write "
      "'gs://bucket/run' (or ./gs:/bucket/run for a local directory of that "
      'name).')
  assert sorted(os.listdir(tmp_path)) == []  # Nothing written anywhere.


def test_a_huge_value_is_cut_to_a_readable_line(data_dir, tmp_path):
  line = train_error(_config(f'--config.data_dir={data_dir}',
                        '--config.model=' + 'x' * 100_000), tmp_path / 'work')
  assert len(line) < 1100
  assert line.startswith("error: unknown model 'xxxx")
  assert '[... ' in line and ' characters left out ...]' in line
  # What to do, at the end of the message, is kept.
  assert line.endswith("as 'package.module:ClassName'.")


def test_a_workdir_with_brackets_is_one_line_and_nothing_is_written(
    data_dir, tmp_path):
  workdir = tmp_path / 'sweep[3]'
  line = train_error(_config(f'--config.data_dir={data_dir}'), workdir)
  assert line.startswith(f"error: '{workdir}' has '[' or ']' in it")
  assert not workdir.exists()


@pytest.fixture(scope='module', name='trained')
def _trained(tmp_path_factory):
  """(workdir, data flags) of a 2-step mlp run that saved a checkpoint."""
  data = tmp_path_factory.mktemp('data')
  write_fashion_mnist(str(data), num_train=128, num_test=16)
  flags = (f'--config.data_dir={data}', '--config.batch_size=64')
  workdir = tmp_path_factory.mktemp('trained')
  train.run(_config(*flags, '--config.model=mlp'), str(workdir))
  assert os.listdir(workdir / 'checkpoints') == ['2']
  return workdir, flags


# The tests on a trained workdir: a run first (about 10 s), the slow tier.
@pytest.mark.slow
def test_checkpoint_of_another_model(trained):
  workdir, data = trained
  before = _hashes(workdir)  # Checkpoints, config.json, summaries.
  line = train_error(_config(*data, '--config.model=cnn'), workdir)
  assert line.startswith(f"error: the checkpoint {workdir}/checkpoints/2 does "
                         'not fit this run: params/Conv_0/bias is missing '
                         'there and shape (32,) here')
  assert 'another model' in line and 'another --workdir' in line
  assert _hashes(workdir) == before


@pytest.mark.slow
@pytest.mark.parametrize('flag, error', [
    ('--config.batch_size=100', 'error: batch_size 100 is not divisible'),
    ('--config.model=cnnn', "error: unknown model 'cnnn'"),
])
def test_bad_input_keeps_the_checkpoint(trained, flag, error):
  workdir, data = trained
  before = _hashes(workdir)
  assert 'config.json' in before and 'checkpoints/2/_CHECKPOINT_METADATA' in (
      before)
  assert train_error(_config(*data, flag), workdir).startswith(error)
  assert _hashes(workdir) == before

"""What a new user meets first: the README's set-up commands, a quiet log,
`--help`, and a model of their own."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import ml_collections
import numpy as np
import pytest

import zoo
from recipes.aot import topology
from recipes.config import defaults as default
from recipes.parallel import partition_rules
from tests.convert_helpers import GoogleViT, google_vit_npz
from tests.helpers import ROOT, saved_params
from tests.idx_files import write_fashion_mnist

BASH = shutil.which('bash')


def _readme() -> str:
  with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
    return f.read()


def _quick_start_commands() -> list[str]:
  """The README's two set-up commands: the bash blocks of its Quick start."""
  section = _readme().split('## Quick start', 1)[1].split('\n##', 1)[0]
  commands = re.findall(r'```bash\n(.*?)\n```', section, re.DOTALL)
  assert len(commands) == 2, commands
  return commands


def _setup_prefix() -> str:
  """The system set-up both commands begin with (everything before the venv).

  Both must work on a fresh machine, whatever comes first.
  """
  prefixes = {c.split(' && python3 -m venv ', 1)[0]
              for c in _quick_start_commands()}
  assert len(prefixes) == 1, prefixes
  return prefixes.pop()


def _write_script(path, text: str):
  path.write_text(f'#!/bin/sh\n{text}\n')
  path.chmod(0o755)


@pytest.mark.slow
def test_readme_setup_uses_sudo_only_where_there_is_one(tmp_path):
  """Root on a machine without sudo runs apt-get itself; elsewhere every
  apt-get goes through sudo. apt-get and sudo are stand-ins that log their
  arguments (the real apt-get runs in the next test), so this runs as any
  user; PATH holds nothing else, so no real sudo can take part."""
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  log = tmp_path / 'log'
  _write_script(bin_dir / 'apt-get', f'echo "apt-get $*" >> {log}')
  prefix = _setup_prefix()

  def run():
    log.write_text('')
    result = subprocess.run([BASH, '-c', prefix], capture_output=True,
                            text=True, timeout=30, env={'PATH': str(bin_dir)})
    assert result.returncode == 0, result.stderr
    return log.read_text().splitlines()

  without_sudo = run()
  assert without_sudo[0] == 'apt-get update'
  install = without_sudo[-1].split()
  assert install[:3] == ['apt-get', 'install', '-y']
  assert {'python3-venv', 'dataset-fashion-mnist', 'fortunes'} <= set(
      install)

  _write_script(bin_dir / 'sudo', f'echo "sudo $*" >> {log}; exec "$@"')
  with_sudo = run()
  assert with_sudo == [line for apt in without_sudo
                       for line in (f'sudo {apt}', apt)]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which('apt-get') is None or os.geteuid() != 0,
                    reason='needs apt-get, run as root')
def test_readme_setup_installs_the_packages_as_root(tmp_path):
  """The README's set-up, verbatim, with the real apt-get (idempotent, so
  safe to repeat): first as the machine is (root, without sudo where there
  is none), then through a stand-in sudo that logs its command and runs it,
  as a user's sudo would. Tests add no users, so a non-root user's real sudo
  is not run; the test above checks that such a user's every apt-get goes
  through sudo.

  What follows the set-up in the commands is not run here: a fresh venv and
  `pip install -e .` download TensorFlow and JAX (minutes, network), and
  the README's run trains for 10 epochs. The tests themselves run in a venv
  made by `pip install -e '.[test]'` (.ci/run makes it from nothing); the
  config and the test command are checked below, and training on that
  config is tested elsewhere (test_bad_input.py, test_launch.py and
  test_preemption.py, next to this file).
  """
  prefix = _setup_prefix()
  result = subprocess.run([BASH, '-c', prefix], capture_output=True,
                          text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  installed = subprocess.run(
      ['dpkg-query', '-W', '-f=${Status}\n', 'python3-venv',
       'dataset-fashion-mnist', 'fortunes'], capture_output=True, text=True,
      check=True)
  assert installed.stdout.split('\n')[:3] == ['install ok installed'] * 3

  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  log = tmp_path / 'sudo.log'
  _write_script(bin_dir / 'sudo', f'echo "$*" >> {log}; exec "$@"')
  result = subprocess.run(
      [BASH, '-c', prefix], capture_output=True, text=True, timeout=600,
      env={**os.environ, 'PATH': f'{bin_dir}{os.pathsep}{os.environ["PATH"]}'})
  assert result.returncode == 0, result.stderr[-3000:]
  assert [line.split()[:2] for line in log.read_text().splitlines()] == [
      ['apt-get', 'update'], ['apt-get', 'install']]

  train, test = (c.split(' && ') for c in _quick_start_commands())
  config = re.search(r'--config=(\S+)', train[-1])[1]
  assert os.path.isfile(os.path.join(ROOT, config))
  assert train[-1].startswith('python -m recipes.train ')
  assert test[-1] == 'python -m pytest -q -n 2 tests'


def _user_env(**extra):
  """The environment of a user's shell: no test settings for JAX or TF."""
  env = {k: v for k, v in os.environ.items() if k not in (
      'JAX_PLATFORMS', 'JAX_NUM_CPU_DEVICES', 'TF_CPP_MIN_LOG_LEVEL',
      'XLA_FLAGS')}
  return {**env, **extra}


def _train(*flags, cwd=ROOT, env=None, timeout=300):
  return subprocess.run([sys.executable, '-m', 'recipes.train', *flags],
                        cwd=cwd, capture_output=True, text=True,
                        timeout=timeout, env=env or _user_env())


# A log record: severity, date, time, thread, file:line].
_RECORD = re.compile(r'^([IWEF])\d{4} [\d:.]+ +\d+ ([\w.]+):\d+\] ')
# CLU's summaries and parameter table are the run's own lines.
_CLU_FILES = {'logging_writer.py', 'parameter_overview.py'}


@pytest.mark.slow
def test_the_first_screen_is_ours(tmp_path):
  """A run's whole log, in a user's environment (JAX looks for TPUs and
  GPUs, TensorFlow loads its oneDNN kernels, orbax writes a checkpoint):
  every INFO line comes from the recipes or CLU, and every other line
  continues one of those (tables). Among them: the progress line, each
  evaluation once, the closing summary, and the config as the run uses it
  (CLU's progress went to a logger the log leaves out; the evaluation came
  twice; image_size said 224 for 28x28 images)."""
  write_fashion_mnist(str(tmp_path), num_train=64, num_test=16)
  result = _train('--config=configs/fashion_mnist_pmap.py',
                  f'--workdir={tmp_path / "work"}',
                  f'--config.data_dir={tmp_path}', '--config.batch_size=16',
                  '--config.num_train_steps=4', '--config.log_every_steps=2')
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout == ''
  lines = result.stderr.splitlines()
  ours = {path.name for path in pathlib.Path(ROOT, 'recipes').rglob('*.py')
          } | _CLU_FILES
  strays, ours_or_warning = [], False
  for line in lines:
    record = _RECORD.match(line)
    if record:
      ours_or_warning = record[1] != 'I' or record[2] in ours
    if not ours_or_warning:  # Also any line before the first record.
      strays.append(line)
  assert not strays, strays
  assert re.match(r'I.* train\.py:\d+\] JAX ', lines[0]), lines[0]
  assert 'Training cnn on fashion_mnist_idx' in result.stderr
  assert os.listdir(tmp_path / 'work' / 'checkpoints') == ['4']
  _assert_progress_and_summary(result.stderr, tmp_path / 'work')


def _assert_progress_and_summary(log: str, workdir):
  """The lines a user reads to follow and end a 4-step run (16 of 64
  images a step, evaluated on 16)."""
  assert re.search(r'progress\.py:\d+\] step 1/4 \(25%, epoch 0\.2/1\) · the '
                   r'first step \(compiling it\) took \S+$', log, re.M), log
  rates = re.compile(r'step [\d,]+/4 \(\d+%, epoch [\d.]+/1\) · [\d.,]+ '
                     r'steps/s · [\d.,]+ images/s · ETA \S+$')
  for line in re.findall(r'progress\.py:\d+\] (.*)', log):
    assert line.startswith('step 1/4 ') or rates.match(line), line
  assert re.search(r'\] Done: steps 1-4 of 4 in \S+ \([\d.,]+ steps/s · '
                   r'[\d.,]+ images/s while training\); final accuracy '
                   r'[\d.]+ on test \(loss [\d.]+\)\.$', log, re.M), log
  assert (f'] Checkpoints in {workdir}/checkpoints (the last of step 4); '
          f'summaries in {workdir}/summaries') in log, log
  assert len(re.findall(r'step 4: eval loss ', log)) == 1, log
  assert 'eval/accuracy=' not in log, log
  assert "'image_size': 28," in log, log


@pytest.mark.slow
def test_tensorflow_notices_are_dropped_and_its_warnings_kept(tmp_path):
  """What TensorFlow's C++ writes to stderr while it loads (a stand-in
  here, writing to the file descriptor as C++ does)."""
  (tmp_path / 'tensorflow.py').write_text(
      'import os\n'
      "os.write(2, b'WARNING: All log messages before absl::InitializeLog() "
      "is called are written to STDERR\\n')\n"
      "os.write(2, b'I0000 00:00:1.2 7 port.cc:153] oneDNN custom operations "
      "are on. You may see ...\\n')\n"
      "os.write(2, b'W0000 00:00:1.3 7 gpu.cc:1] a real warning\\n')\n")
  result = subprocess.run(
      [sys.executable, '-c', 'from recipes.runtime import library_noise; '
       'library_noise.import_tensorflow(); print("imported")'],
      capture_output=True, text=True, timeout=60, cwd=ROOT,
      env={**os.environ, 'PYTHONPATH': f'{tmp_path}{os.pathsep}{ROOT}'})
  assert result.returncode == 0, result.stderr
  assert result.stdout == 'imported\n'
  assert result.stderr == 'W0000 00:00:1.3 7 gpu.cc:1] a real warning\n'


@pytest.mark.slow
def test_tensorflow_loads_without_what_keras_would_load_for_us():
  """Keras, which TensorFlow loads, imports pandas, matplotlib,
  scipy.sparse, h5py and IPython where they are installed (here: the test
  extra), for what the recipes never ask of it; a command loads TensorFlow
  without them, and they still import afterwards."""
  unused = ('pandas', 'matplotlib', 'scipy.sparse', 'h5py', 'IPython')
  result = subprocess.run(
      [sys.executable, '-c',
       'import sys\n'
       'from recipes.runtime import library_noise\n'
       'library_noise.import_tensorflow()\n'
       f'print(sorted(n for n in {unused!r} if n in sys.modules))\n'
       'import matplotlib.pyplot, pandas, scipy.sparse, h5py, IPython\n'
       'import tensorflow as tf\n'
       'print([int(x) for x in tf.data.Dataset.range(3).map(lambda x: 2 * x)'
       '.as_numpy_iterator()])\n'],
      capture_output=True, text=True, timeout=120, cwd=ROOT)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.splitlines() == ['[]', '[0, 2, 4]'], result.stdout


@pytest.mark.slow
@pytest.mark.skipif(not topology.have_libtpu(),
                    reason="libtpu is not installed: pip install -e '.[tpu]'")
def test_libtpu_stays_quiet_where_there_is_no_tpu(tmp_path):
  """With the README's `.[tpu]` installed on a machine without TPUs, in a
  user's environment: a command of the recipes (a conversion) and of the zoo
  (its table, here of one model whose row starts JAX's backends) write
  nothing to stderr; libtpu, loaded to look for TPUs, wrote a block there
  (E0000 ... INVALID_ARGUMENT ...)."""
  np.savez(tmp_path / 'vit.npz',
           **google_vit_npz(GoogleViT(patch=4, grid=7), 'vit_jax'))
  commands = {
      'convert': ['-m', 'recipes.convert', '--source=big_vision',
                  str(tmp_path / 'vit.npz'), str(tmp_path / 'converted')],
      'zoo': ['-c', "import runpy, zoo; zoo.list_models = lambda: ['dinov2_s14']; "
              "runpy.run_module('zoo', run_name='__main__')"]}
  for name, args in commands.items():
    result = subprocess.run([sys.executable, *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=300,
                            env=_user_env())
    assert result.returncode == 0, (name, result.stderr[-3000:])
    assert result.stderr == '', (name, result.stderr[-3000:])
    assert result.stdout.startswith(
        {'convert': 'Converted ', 'zoo': 'model '}[name]), result.stdout


def _field_lines(text: str) -> dict[str, str]:
  """{field: value} from the config field lines of the help."""
  fields = text.split('(docs/config.md has them as a table):\n', 1)[1]
  return dict(re.findall(r'^  ([\w.]+) = (.*)$', fields, re.MULTILINE))


@pytest.mark.slow
def test_help_lists_our_flags_and_every_config_field():
  result = _train('--help', timeout=120)
  assert result.returncode == 0 and result.stderr == '', result.stderr
  text = result.stdout
  for flag in ('--config:', '--workdir:', '--[no]distributed:',
               '--verbosity=1:'):
    assert flag in text
  fields = _field_lines(text)
  config = default.get_config()
  for name, value in config.items():
    if not isinstance(value, ml_collections.ConfigDict):
      assert fields[name] == repr(value), name
  assert fields['mesh.data'] == '-1' and fields['model_kwargs'] == '{}'
  # Each field by section, with what it does.
  assert '\nschedule:\n  batch_size = 128\n      The global batch' in text
  for library in ('absltest', 'tensorflow', 'orbax', 'absl.logging'):
    assert library not in text

  # With a config file: its values; --helpfull adds absl's logging flags.
  result = _train('--config=configs/cifar10_vit_sharded.py', '--helpfull',
                  timeout=120)
  assert result.returncode == 0 and result.stderr == '', result.stderr
  fields = _field_lines(result.stdout)
  assert fields['model'] == "'vit_s16'" and fields['mesh.tensor'] == '2'
  assert fields['model_kwargs'] == "{'image_size': 32, 'patch_size': 4}"
  assert 'absl.logging:' in result.stdout and '--verbosity' in result.stdout
  assert 'absltest' not in result.stdout and 'tensorflow' not in result.stdout


@pytest.mark.slow
def test_the_command_alone_says_what_it_needs():
  result = _train(timeout=120)
  assert result.returncode == 1 and result.stdout == ''
  assert result.stderr == (
      'error: --config is missing; e.g. python -m '
      'recipes.train --config=configs/fashion_mnist_pmap.py '
      '--workdir=/tmp/fashion_mnist (--help lists the flags and config '
      'fields).\n')


# The module of a model of the user's own, as docs/models.md shows it.
def _docs_model_module() -> str:
  with open(os.path.join(ROOT, 'docs', 'models.md'), encoding='utf-8') as f:
    section = f.read().split('## A model of your own', 1)[1]
  return re.search(r'```python\n# my_models.py\n(.*?)```', section,
                   re.DOTALL)[1]


@pytest.mark.slow
def test_a_model_of_ones_own_trains_sharded_by_path_rules(tmp_path):
  """The module of docs/models.md, in the user's directory, outside the
  zoo: the sharded recipe places it by path rules and warns of a rule that
  matches no parameter."""
  (tmp_path / 'my_models.py').write_text(_docs_model_module())
  data = tmp_path / 'data'
  data.mkdir()
  write_fashion_mnist(str(data), num_train=64, num_test=16)
  workdir = tmp_path / 'work'
  rules = ("(('Dense_0/kernel$', ('fsdp', None)), "
           "('Dense_9/kernel$', ('fsdp',)))")
  result = _train(
      f'--config={ROOT}/configs/fashion_mnist_sharded.py',
      f'--workdir={workdir}', '--config.model=my_models:SmallNet',
      '--config.mesh.data=1', '--config.mesh.fsdp=-1',
      f'--config.path_rules={rules}', f'--config.data_dir={data}',
      '--config.batch_size=16', '--config.num_train_steps=2',
      cwd=tmp_path, env=_user_env(JAX_PLATFORMS='cpu', JAX_NUM_CPU_DEVICES='8'))
  assert result.returncode == 0, result.stderr[-3000:]
  log = result.stderr
  row = next(l for l in log.splitlines() if l.startswith('| Dense_0/kernel '))
  assert "P('fsdp'" in row and row.rstrip(' |').endswith('100,352')  # /8
  assert ("config.path_rules entry ('Dense_9/kernel$', ('fsdp',)) matches "
          'no parameter path') in log
  assert 'Training my_models:SmallNet on fashion_mnist_idx' in log
  step, params = saved_params(workdir)
  assert step == 2 and params['Dense_0']['kernel'].shape == (784, 256)


@pytest.fixture
def own_models(tmp_path, monkeypatch):
  """A directory on sys.path with a module of models outside the zoo."""
  (tmp_path / 'own_models.py').write_text(
      _docs_model_module() + '\nNOT_A_MODULE = 3\n')
  (tmp_path / 'broken_models.py').write_text('import no_such_dependency\n')
  (tmp_path / 'exiting_models.py').write_text('import sys\nsys.exit(0)\n')
  (tmp_path / 'interrupted_models.py').write_text('raise KeyboardInterrupt\n')
  monkeypatch.syspath_prepend(str(tmp_path))
  yield
  for name in ('own_models', 'broken_models', 'exiting_models',
               'interrupted_models'):
    sys.modules.pop(name, None)


def test_zoo_creates_a_model_named_by_its_import_path(own_models):
  model = zoo.create('own_models:SmallNet', num_classes=3)
  assert type(model).__name__ == 'SmallNet' and model.num_classes == 3
  assert partition_rules.default_rules('own_models:SmallNet') == ()
  with pytest.raises(ValueError, match='input shape is unknown; give'):
    zoo.input_shape('own_models:SmallNet')
  assert 'own_models:SmallNet' not in zoo.list_models()


@pytest.mark.parametrize('name, message', [
    ('no_such_package.models:Net', "model 'no_such_package.models:Net': no "
     "module named 'no_such_package'; install it, or add the directory that "
     'holds it to PYTHONPATH.'),
    ('broken_models:Net', "importing 'broken_models' for model "
     "'broken_models:Net' failed (ModuleNotFoundError: No module named "
     "'no_such_dependency')."),
    ('exiting_models:Net', "importing 'exiting_models' for model "
     "'exiting_models:Net' ended the program (SystemExit: 0); a module of "
     'models must not call sys.exit() when imported: move that code under '
     "`if __name__ == '__main__':`."),
    ('own_models:SmallNte', "model 'own_models:SmallNte': module "
     "'own_models' has no 'SmallNte'; did you mean 'SmallNet'?"),
    ('own_models:NOT_A_MODULE', "model 'own_models:NOT_A_MODULE' is 3, not "
     'a flax.linen.Module or flax.nnx.Module class.'),
    ('own_models:', "model 'own_models:' is not of the form "
     "'package.module:ClassName'."),
    ('own_models', "unknown model 'own_models'; registered models: "),
])
def test_a_bad_import_path_is_one_clear_line(own_models, name, message):
  with pytest.raises(ValueError) as error:
    zoo.create(name, num_classes=3)
  assert str(error.value).startswith(message)
  assert '\n' not in str(error.value)


def test_ctrl_c_while_a_model_module_is_imported_still_interrupts(own_models):
  with pytest.raises(KeyboardInterrupt):
    zoo.create('interrupted_models:Net', num_classes=3)

"""Every command the README and docs/ show still works: each run command's
config file loads, its overrides name real fields and pass the checks; each
other module, launcher and script it names exists and answers --help; the
README's Python runs. (The Quick start's two commands run for real in
test_first_contact.py.)"""

import pathlib
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest
import safetensors.numpy
from absl import flags
from ml_collections import config_flags

import zoo
from recipes import export
from recipes.config import command_line, validation
from tests.helpers import ROOT, command_env
from tests.hub_server import HubServer
from zoo import weights

DOCS = [pathlib.Path(ROOT, 'README.md'),
        *sorted(pathlib.Path(ROOT, 'docs').rglob('*.md'))]
RUN_MODULES = ('recipes.train', 'recipes.evaluate')
# Tools of the user's machine, not ours.
OTHER_PROGRAMS = ('pip', 'tensorboard', 'sha256sum', 'export', 'gcloud',
                  'cd', 'sudo', '$(command')


def _commands() -> list[tuple[str, list[str]]]:
  """(file, words) of every command in the bash blocks of the docs."""
  found = []
  for path in DOCS:
    for block in re.findall(r'```(?:bash|sh)\n(.*?)```', path.read_text(),
                            re.DOTALL):
      for line in block.replace('\\\n', ' ').splitlines():
        line = line.split(' # ')[0].strip()
        if line and not line.startswith('#'):
          found.append((path.name, shlex.split(line.removesuffix('&'))))
  return found


def _without_env(words: list[str]) -> list[str]:
  """The command after any VAR=value settings in front of it."""
  while words and re.fullmatch(r'[A-Z_]+=\S*', words[0]):
    words = words[1:]
  return words


def _inner(words: list[str]) -> list[str]:
  """The command a launcher runs: the words after '--' (or after the
  script, for sbatch)."""
  return words[words.index('--') + 1:] if '--' in words else []


def _run_commands():
  runs, others = [], []
  for doc, words in _commands():
    words = _without_env(words)
    inner = _inner(words)
    for command in (words, inner):
      if command[:2] == ['python', '-m'] and command[2] in RUN_MODULES:
        runs.append(pytest.param(command[3:], id=f'{doc}: {command[2]}'))
    if words and not words[0].startswith(OTHER_PROGRAMS):
      others.append((doc, words))
  return runs, others


RUNS, OTHERS = _run_commands()


def test_the_docs_show_commands_of_every_kind():
  assert len(RUNS) >= 15
  programs = {words[0] for _, words in OTHERS}
  assert {'python', 'launch/local.sh', 'launch/pod.sh', 'sbatch'} <= programs


def _parse(argv: list[str]):
  """The config the command line gives, parsed as the commands parse it."""
  values = flags.FlagValues()
  config_flags.DEFINE_config_file('config', None, '', flag_values=values,
                                  lock_config=True,
                                  sys_argv=['command', *argv])
  values['config'].parser = command_line.ConfigFileParser()
  flags.DEFINE_string('workdir', None, '', flag_values=values)
  flags.DEFINE_bool('distributed', False, '', flag_values=values)
  values(['command', *(a for a in argv if a not in ('--help', '-h'))])
  return values


@pytest.mark.parametrize('argv', RUNS)
def test_each_run_command_parses_and_passes_the_checks(argv, monkeypatch):
  monkeypatch.chdir(ROOT)
  values = _parse(argv)
  if '--help' not in argv:
    assert values.workdir, argv
  validation.check(values.config)


def test_a_misspelt_override_would_fail_here(monkeypatch):
  monkeypatch.chdir(ROOT)
  with pytest.raises(Exception):
    _parse(['--config=configs/fashion_mnist_pmap.py', '--workdir=/tmp/x',
            '--config.batchsize=8'])


def _entry_points() -> set[tuple[str, ...]]:
  """The other programs and modules the docs run, as --help would call
  them."""
  found = set()
  for _, words in OTHERS:
    if words[:2] == ['python', '-m'] and words[2] not in RUN_MODULES:
      found.add(('python', '-m', words[2]))
    elif words[0].startswith('launch/'):
      found.add((words[0],))
    elif words[0] == 'sbatch':
      script = next(w for w in words if w.startswith('launch/'))
      found.add((script,))
  return found


@pytest.mark.slow  # A process per module.
@pytest.mark.parametrize('entry', sorted(_entry_points()), ids=' '.join)
def test_each_other_command_exists_and_answers_help(entry):
  if entry[0].endswith('.sbatch'):
    # Its usage is in its comments; SLURM runs it (test_slurm.py).
    text = pathlib.Path(ROOT, entry[0]).read_text()
    assert text.startswith('#!/') and '#SBATCH' in text
    return
  command = [sys.executable, *entry[1:]] if entry[0] == 'python' else [
      str(pathlib.Path(ROOT, entry[0]))]
  result = subprocess.run([*command, '--help'], cwd=ROOT, env=command_env(),
                          capture_output=True, text=True, timeout=120,
                          check=False)
  # absl's own --help (recipes.bench.epoch) exits with status 1.
  assert result.returncode in (0, 1), result.stderr[-2000:]
  assert 'Traceback' not in result.stderr, result.stderr[-2000:]
  assert '--' in result.stdout, entry


@pytest.mark.slow  # Converts and runs ConvNeXt-T: about 15 s.
@pytest.mark.usefixtures('fast_compiles')
def test_the_readmes_python_runs(tmp_path, monkeypatch):
  """Each block runs as written, given `images`; the published weights it
  names come from a local server standing in for the Hugging Face Hub,
  files of random numbers in the tag's own layout (so XLA without most
  optimizations: no number is compared)."""
  text = pathlib.Path(ROOT, 'README.md').read_text()
  blocks = re.findall(r'```python\n(.*?)```', text, re.DOTALL)
  assert blocks
  tags = re.findall(r"create\('(\w+)', pretrained='(\w+)'\)", text)
  assert tags
  hub = HubServer({weights.find(model, tag).url.removeprefix('hf://'):
                   _published_file(model) for model, tag in tags})
  monkeypatch.setenv('HF_ENDPOINT', hub.url)
  monkeypatch.setenv('HF_HUB_CACHE', str(tmp_path / 'hub'))
  monkeypatch.setenv('JAX_MODEL_ZOO_WEIGHTS', str(tmp_path / 'weights'))
  images = np.zeros((1, 224, 224, 3), np.float32)
  try:
    for block in blocks:
      exec(compile(block, 'README.md', 'exec'), {'images': images})  # pylint: disable=exec-used
  finally:
    hub.stop()
  assert sum(r.startswith('GET /timm/') for r in hub.requests) == len(tags)


def _published_file(model: str) -> bytes:
  """A timm state dict of `model`, random numbers, as .safetensors."""
  converter = export.converter_for('timm', model, {})
  rng = np.random.default_rng(0)
  return safetensors.numpy.save({
      name: rng.normal(size=shape).astype(np.float32)
      for name, shape in converter.template(
          model, dict(zoo.spec(model).defaults)).items()})

"""`python -m recipes.generate` as a process: a Hub repository (a local
stand-in for the Hub) downloaded once, sampled continuations that repeat
with the seed and equal those of the command in process, the speed on
stderr, and a mistake that is one line and status 1. (Each flag and mistake
in process: tests/unit/recipes/test_generate.py.)"""

import subprocess
import sys

import pytest

from recipes import generate
from tests.helpers import command_env
from tests.hub_server import HubServer
from tests.unit.recipes.test_generate import write_model_folder

pytestmark = pytest.mark.slow


def _command(*argv, env):
  return subprocess.run([sys.executable, '-m', 'recipes.generate', *argv],
                        capture_output=True, text=True, env=env,
                        timeout=300, check=False)


def test_a_hub_model_generates_as_in_process_and_mistakes_are_one_line(
    tmp_path, capsys):
  folder = tmp_path / 'gpt2'
  write_model_folder(folder)
  # Heads of 32 features, not gpt2's 64: only its config.json says so.
  (folder / 'config.json').write_text('{"n_embd": 128, "n_head": 4}')
  server = HubServer({f'tiny/gpt2/{name}': (folder / name).read_bytes()
                      for name in ('model.safetensors', 'tokenizer.json',
                                   'config.json')})
  env = command_env(HF_ENDPOINT=server.url, HF_HUB_CACHE=str(tmp_path / 'hf'),
                    JAX_MODEL_ZOO_WEIGHTS=str(tmp_path / 'zoo'))
  argv = ['--model=gpt2', '--prompt=w1 w2 w3', '--prompt=w7',
          '--temperature=0.8', '--top_p=0.9', '--seed=3',
          '--max_new_tokens=12']
  try:
    runs = [_command('--weights=tiny/gpt2', *argv, env=env) for _ in (0, 1)]
    bad = _command('--weights=tiny/gpt2', *argv, '--top_p=0', env=env)
  finally:
    server.stop()
  for run in runs:
    assert run.returncode == 0, run.stderr
  assert runs[0].stdout == runs[1].stdout  # The seed's; the second cached.
  assert runs[0].stdout.splitlines()[0::2] == ['==> prompt 1 <==',
                                               '==> prompt 2 <==']
  last = runs[0].stderr.strip().splitlines()[-1]
  assert last.startswith('generated ') and last.endswith(' tokens/s'), last
  gets = [r for r in server.requests
          if r.startswith('GET') and '/resolve/' in r]
  assert sorted(r.split('/')[-1] for r in gets) == [
      'config.json', 'model.safetensors', 'tokenizer.json']  # Each once.
  assert generate.main([f'--weights={folder}', *argv]) == 0
  assert capsys.readouterr().out == runs[0].stdout
  assert bad.returncode == 1 and not bad.stdout
  assert bad.stderr == ('error: --top_p=0.0 must be more than 0 and at most '
                        '1 (1: all tokens).\n')

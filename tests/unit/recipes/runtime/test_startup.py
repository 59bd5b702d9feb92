"""A command (python -m recipes.X) loads with the garbage collector off and
turns it back on, what loaded frozen out of it, before it starts; imported
as a library, the collector is left alone."""

import ast
import gc
import pathlib
import sys

import pytest

from recipes.runtime import startup
from tests.helpers import ROOT


@pytest.fixture
def collector_restored():
  yield
  gc.unfreeze()
  gc.enable()


def test_a_command_loads_without_collection_then_freezes_what_loaded(
    monkeypatch, collector_restored):
  del collector_restored
  # Python finding recipes.train.
  monkeypatch.setattr(sys, 'argv', ['-m'])
  monkeypatch.setattr(sys, 'orig_argv', ['python', '-u', '-m',
                                         'recipes.train', '--workdir=w'])
  startup.loading()
  assert not gc.isenabled()
  startup.loaded()
  assert gc.isenabled() and gc.get_freeze_count() > 0


@pytest.mark.parametrize('argv, orig_argv', [
    (['notebook.py'], ['python', 'notebook.py']),
    # Another program, whose package loads the recipes as Python finds it.
    (['-m'], ['python', '-m', 'their_tools.train', '--config=c.py']),
])
def test_imported_as_a_library_collection_is_left_alone(
    monkeypatch, collector_restored, argv, orig_argv):
  del collector_restored
  monkeypatch.setattr(sys, 'argv', argv)
  monkeypatch.setattr(sys, 'orig_argv', orig_argv)
  frozen = gc.get_freeze_count()
  startup.loading()
  assert gc.isenabled()
  startup.loaded()
  assert gc.isenabled() and gc.get_freeze_count() == frozen


def _commands() -> dict[str, list[ast.stmt]]:
  """{path: the statements a command runs first} of every module under
  recipes/ that runs as python -m."""
  found = {}
  for path in pathlib.Path(ROOT, 'recipes').rglob('*.py'):
    tree = ast.parse(path.read_text())
    if path.name == '__main__.py':
      found[str(path)] = [s for s in tree.body
                          if not isinstance(s, (ast.Import, ast.ImportFrom))]
    for node in tree.body:
      if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and
          ast.unparse(node.test) == "__name__ == '__main__'"):
        found[str(path)] = node.body
  return found


def test_every_command_turns_collection_back_on_first():
  commands = _commands()
  assert len(commands) >= 12, sorted(commands)
  for path, body in commands.items():
    assert ast.unparse(body[0]) == 'startup.loaded()', path

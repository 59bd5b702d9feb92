"""The layout's rules, checked from the source: no import cycles between the
project's modules, and the zoo names no mesh axis (models speak logical axis
names only; recipes/parallel/ maps them onto meshes)."""

import ast
import pathlib

from tests.helpers import ROOT

PACKAGES = ('zoo', 'recipes')


def _modules() -> dict[str, pathlib.Path]:
  found = {}
  for package in PACKAGES:
    for path in (pathlib.Path(ROOT) / package).rglob('*.py'):
      name = '.'.join(path.relative_to(ROOT).with_suffix('').parts)
      found[name.removesuffix('.__init__')] = path
  return found


def _imports(path: pathlib.Path, modules) -> set[str]:
  """The project modules that `path` imports (at any depth in the file)."""
  names = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and node.module:
      for alias in node.names:
        submodule = f'{node.module}.{alias.name}'
        names.add(submodule if submodule in modules else node.module)
    elif isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
  return names & set(modules)


def _cycle(graph) -> list[str] | None:
  done, path = set(), []

  def visit(name):
    if name in path:
      return path[path.index(name):] + [name]
    if name in done:
      return None
    path.append(name)
    for dependency in sorted(graph[name]):
      if found := visit(dependency):
        return found
    path.pop()
    done.add(name)
    return None

  for name in sorted(graph):
    if found := visit(name):
      return found
  return None


def test_no_import_cycles():
  modules = _modules()
  assert 'recipes.parallel.strategy' in modules and 'zoo.registry' in modules
  graph = {name: _imports(path, modules) - {name}
           for name, path in modules.items()}
  assert _cycle(graph) is None, ' -> '.join(_cycle(graph))


def test_the_cycle_finder_finds_cycles():
  assert _cycle({'a': {'b'}, 'b': {'c'}, 'c': {'a'}}) == ['a', 'b', 'c', 'a']
  assert _cycle({'a': {'b'}, 'b': set()}) is None


def test_the_zoo_names_no_mesh_axis():
  for path in (pathlib.Path(ROOT) / 'zoo').rglob('*.py'):
    strings = {node.value for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Constant) and isinstance(node.value,
                                                                 str)}
    assert not strings & {'data', 'fsdp', 'tensor'}, path

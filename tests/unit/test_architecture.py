"""The layout's rules, checked from the source: the recipes' layers import
only downward, the zoo never imports the recipes, no import cycles between
the project's modules, and the zoo names no mesh axis (models speak logical
axis names only; recipes/parallel/ maps them onto meshes)."""

import ast
import pathlib

import pytest

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


# The layers of each layered package, lowest first: a module may import its
# own layer and those below it (and the zoo), never one above. The root of
# recipes/ holds the commands and the run; bench/ times them from the
# outside. Within recipes/data/, sources give examples, images/ decodes and
# augments them, pipeline/ batches them, and its root (the dataset registry,
# the prepare command) puts them together; text/ tokenizes and packs text,
# beside images/ (neither imports the other).
LAYERS = {
    'recipes': ('runtime', 'core', 'data', 'parallel', 'aot', 'checkpoint',
                'config', 'root', 'bench'),
    'recipes.data': ('sources', 'images', 'text', 'pipeline', 'root'),
}


def _layer(module: str, package: str) -> str:
  """('recipes.core.steps', 'recipes') -> 'core'; ('recipes.train',
  'recipes') -> 'root'."""
  parts = module.removeprefix(package + '.').split('.')
  if len(parts) > 1 or parts[0] in LAYERS[package]:
    return parts[0]
  return 'root'


def _upward_imports(graph) -> list[str]:
  """'a -> b' for each import of a module from a higher layer of the
  package both belong to."""
  found = []
  for package, layers in LAYERS.items():
    for name, imported in sorted(graph.items()):
      if not name.startswith(package + '.'):
        continue
      for other in sorted(imported):
        if not other.startswith(package + '.'):
          continue
        low, high = _layer(name, package), _layer(other, package)
        if layers.index(high) > layers.index(low):
          found.append(f'{name} ({low}) -> {other} ({high})')
  return found


def _graph():
  modules = _modules()
  return {name: _imports(path, modules) - {name}
          for name, path in modules.items()}


@pytest.mark.parametrize('package', sorted(LAYERS))
def test_every_folder_of_a_layered_package_is_a_layer(package):
  folders = {path.name
             for path in pathlib.Path(ROOT, *package.split('.')).iterdir()
             if (path / '__init__.py').exists()}
  assert folders == set(LAYERS[package]) - {'root'}


def test_the_recipes_layers_import_only_downward():
  assert _upward_imports(_graph()) == []


def test_the_layer_check_finds_upward_imports():
  graph = {'recipes.core.steps': {'recipes.parallel.mesh'},
           'recipes.parallel.mesh': {'recipes.core.steps', 'zoo'},
           'recipes.train': {'recipes.bench.step'},
           'recipes.data.sources.idx': {'recipes.data.images.preprocess'},
           'recipes.data.pipeline.streaming': {'recipes.data.sources.idx'}}
  assert _upward_imports(graph) == [
      'recipes.core.steps (core) -> recipes.parallel.mesh (parallel)',
      'recipes.train (root) -> recipes.bench.step (bench)',
      'recipes.data.sources.idx (sources) -> recipes.data.images.preprocess '
      '(images)']


def test_the_zoo_never_imports_the_recipes():
  graph = _graph()
  assert 'zoo.convert.files' in graph
  found = [f'{name} -> {other}' for name, imported in sorted(graph.items())
           if name.startswith('zoo') for other in sorted(imported)
           if other.startswith('recipes')]
  assert found == []


def test_no_import_cycles():
  graph = _graph()
  assert 'recipes.parallel.strategy' in graph and 'zoo.registry' in graph
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

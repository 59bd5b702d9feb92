"""The model registry: every model is created by name through one call.

    model = zoo.create('cnn', num_classes=10)
    zoo.list_models('resnet*')

Each registration also records what the model expects by default: its input
shape (one example, HWC) and the logical-axis rules that place its arrays on a
mesh (see `zoo.partitioning`).

A model of your own needs no registration: 'package.module:ClassName' names a
Linen Module class that is imported and created like a registered model
(e.g. `--config.model=my_models:SmallNet` in the recipes). It has no default
keyword arguments, input shape or logical-axis rules.
"""

import dataclasses
import difflib
import fnmatch
import importlib
from typing import Any

import flax.linen as nn

from zoo.partitioning import LogicalRules


@dataclasses.dataclass(frozen=True)
class _Entry:
  cls: type[nn.Module]
  defaults: dict[str, Any]
  input_shape: tuple[int, ...] | None  # None: unknown (a model of your own).
  rules: LogicalRules


_MODELS: dict[str, _Entry] = {}


def register(name: str, *, input_shape: tuple[int, ...], rules: LogicalRules,
             **defaults):
  """Class decorator: registers `cls` under `name` with default keyword args.

  The same class can be registered several times (size variants), each with
  its own defaults; keyword arguments given to `create` win over them.
  `input_shape` is one example's shape (height, width, channels) and `rules`
  the default logical-axis rules of the model.
  """

  def wrap(cls):
    if name in _MODELS:
      raise ValueError(f'model {name!r} is registered twice')
    _MODELS[name] = _Entry(cls, defaults, tuple(input_shape), tuple(rules))
    return cls

  return wrap


def _import(path: str) -> type[nn.Module]:
  """The Linen Module class that 'package.module:ClassName' names."""
  module_name, _, class_name = path.partition(':')
  if not module_name or not class_name.isidentifier():
    raise ValueError(f'model {path!r} is not of the form '
                     "'package.module:ClassName'.")
  try:
    module = importlib.import_module(module_name)
  except Exception as e:  # pylint: disable=broad-except
    if isinstance(e, ModuleNotFoundError) and e.name and (
        f'{module_name}.'.startswith(f'{e.name}.')):  # Not one it imports.
      raise ValueError(f'model {path!r}: no module named {e.name!r}; install '
                       'it, or add the directory that holds it to '
                       'PYTHONPATH.') from None
    raise ValueError(f'importing {module_name!r} for model {path!r} failed '
                     f'({type(e).__name__}: {e}).') from e
  cls = getattr(module, class_name, None)
  if cls is None:
    close = difflib.get_close_matches(class_name, dir(module), n=3)
    hint = (f'; did you mean {", ".join(repr(c) for c in close)}?' if close
            else '.')
    raise ValueError(f'model {path!r}: module {module_name!r} has no '
                     f'{class_name!r}{hint}')
  if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
    raise ValueError(f'model {path!r} is {cls!r}, not a flax.linen.Module '
                     'class.')
  return cls


def _entry(name: str) -> _Entry:
  if name in _MODELS:
    return _MODELS[name]
  if ':' in name:
    return _Entry(_import(name), {}, None, ())
  close = difflib.get_close_matches(name, list(_MODELS), n=3, cutoff=0.5)
  hint = (f'did you mean {", ".join(repr(c) for c in close)}?' if close else
          f'registered models: {", ".join(sorted(_MODELS))}; or name a Module '
          "of your own as 'package.module:ClassName'.")
  raise ValueError(f'unknown model {name!r}; {hint}')


def create(name: str, **kwargs) -> nn.Module:
  """Returns the Flax Linen module registered as `name` (or at
  'package.module:ClassName'), built with `kwargs`."""
  entry = _entry(name)
  return entry.cls(**{**entry.defaults, **kwargs})


def list_models(pattern: str = '*') -> list[str]:
  """Sorted names of the registered models that match an fnmatch pattern."""
  return sorted(n for n in _MODELS if fnmatch.fnmatchcase(n, pattern))


def input_shape(name: str) -> tuple[int, ...]:
  """The shape of one input example the model `name` is registered for."""
  shape = _entry(name).input_shape
  if shape is None:
    raise ValueError(f'model {name!r} is not registered, so its input shape is '
                     'unknown; give the shape.')
  return shape


def default_rules(name: str) -> LogicalRules:
  """Flax logical-axis rules placing the model's arrays on a mesh with axes
  ('data', 'fsdp', 'tensor'); see `zoo.partitioning`."""
  return _entry(name).rules

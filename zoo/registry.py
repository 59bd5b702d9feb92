"""The model registry: every model is created by name through one call.

    model = zoo.create('cnn', num_classes=10)
    zoo.list_models('resnet*')

Each registration also records what the model expects by default: its input
shape (one example, HWC) and the logical-axis rules that place its arrays on a
mesh (see `zoo.partitioning`).
"""

import dataclasses
import difflib
import fnmatch
from typing import Any

import flax.linen as nn

from zoo.partitioning import LogicalRules


@dataclasses.dataclass(frozen=True)
class _Entry:
  cls: type[nn.Module]
  defaults: dict[str, Any]
  input_shape: tuple[int, ...]
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


def _entry(name: str) -> _Entry:
  if name not in _MODELS:
    close = difflib.get_close_matches(name, list(_MODELS), n=3, cutoff=0.5)
    hint = (f'did you mean {", ".join(repr(c) for c in close)}?' if close else
            f'registered models: {", ".join(sorted(_MODELS))}.')
    raise ValueError(f'unknown model {name!r}; {hint}')
  return _MODELS[name]


def create(name: str, **kwargs) -> nn.Module:
  """Returns the Flax Linen module registered as `name`, built with `kwargs`."""
  entry = _entry(name)
  return entry.cls(**{**entry.defaults, **kwargs})


def list_models(pattern: str = '*') -> list[str]:
  """Sorted names of the registered models that match an fnmatch pattern."""
  return sorted(n for n in _MODELS if fnmatch.fnmatchcase(n, pattern))


def input_shape(name: str) -> tuple[int, ...]:
  """The shape of one input example the model `name` is registered for."""
  return _entry(name).input_shape


def default_rules(name: str) -> LogicalRules:
  """Flax logical-axis rules placing the model's arrays on a mesh with axes
  ('data', 'fsdp', 'tensor'); see `zoo.partitioning`."""
  return _entry(name).rules

"""The model registry: every model is created by name through one call.

    model = zoo.create('cnn', num_classes=10)
    zoo.list_models('resnet*')
"""

import difflib
import fnmatch
from typing import Callable

import flax.linen as nn

_MODELS: dict[str, Callable[..., nn.Module]] = {}


def register(name: str, **defaults):
  """Class decorator: registers `cls` under `name` with default keyword args.

  The same class can be registered several times (size variants), each with
  its own defaults; keyword arguments given to `create` win over them.
  """

  def wrap(cls):
    if name in _MODELS:
      raise ValueError(f'model {name!r} is registered twice')
    _MODELS[name] = lambda **kwargs: cls(**{**defaults, **kwargs})
    return cls

  return wrap


def create(name: str, **kwargs) -> nn.Module:
  """Returns the Flax Linen module registered as `name`, built with `kwargs`."""
  if name not in _MODELS:
    close = difflib.get_close_matches(name, list(_MODELS), n=3, cutoff=0.5)
    hint = (f'did you mean {", ".join(repr(c) for c in close)}?' if close else
            f'registered models: {", ".join(sorted(_MODELS))}.')
    raise ValueError(f'unknown model {name!r}; {hint}')
  return _MODELS[name](**kwargs)


def list_models(pattern: str = '*') -> list[str]:
  """Sorted names of the registered models that match an fnmatch pattern."""
  return sorted(n for n in _MODELS if fnmatch.fnmatchcase(n, pattern))

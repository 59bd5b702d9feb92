"""The model registry: every model is created by name, and each variant's
metadata lives in one place, its `@register(...)` line.

    model = zoo.create('cnn', num_classes=10)
    zoo.list_models('resnet*')
    zoo.spec('vit_s16').reference_params       # 22050664
    zoo.input_shape('vit_s16', image_size=32)  # (32, 32, 3)

A model is one module of this package with a `@register(...)` line per
variant on its class; the package imports every module (zoo/__init__.py).

A model of your own needs no registration: 'package.module:ClassName' names a
Linen Module class that is imported and created like a registered model
(e.g. `--config.model=my_models:SmallNet` in the recipes), or an NNX Module
class, which is wrapped as a Linen one (zoo/nnx_models.py). Its spec has no
defaults, family, input shape or test kwargs.
"""

import dataclasses
import difflib
import fnmatch
import importlib
import sys
from typing import Any, Callable, Mapping

import flax.linen as nn
import jax.numpy as jnp

# What kind of network a variant is. Code that owns a mesh picks default
# partition rules by family (recipes/parallel/partition_rules.py), so the zoo
# names logical axes only, never mesh axes.
FAMILIES = ('mlp', 'convnet', 'transformer', 'decoder', 'encoder')
# What a variant takes: images (float, HWC) or text (int32 token ids).
MODALITIES = ('image', 'text')


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """What the registry knows of one variant.

  `input_shape` maps the effective keyword arguments (the defaults updated by
  the caller's) to the shape of one example: HWC for an image, (length,) for
  the token ids of a text model (`modality`, whose `input_dtype` is int32). `test_kwargs` make a tiny
  model of the same structure for fast tests, on inputs of `test_input_shape`
  (default: the input shape with the test kwargs; fully convolutional nets
  may take smaller ones than they are built for). `reference_params` is the
  published parameter count, to within `reference_params_rtol` (0: exact;
  e.g. 0.02 where a paper gives two digits), and `reference_gflops` the
  published forward GFLOPs of one example (2 x GMACs); None where unknown.
  """

  name: str
  cls: type[nn.Module]
  defaults: Mapping[str, Any]
  family: str | None = None  # One of FAMILIES; None for a model of your own.
  input_shape: Callable[[Mapping[str, Any]], tuple[int, ...]] | None = None
  test_kwargs: Mapping[str, Any] | None = None
  reference_params: float | None = None
  reference_params_rtol: float = 0.0
  reference_gflops: float | None = None
  test_input_shape: tuple[int, ...] | None = None
  modality: str = 'image'  # One of MODALITIES.

  @property
  def input_dtype(self) -> jnp.dtype:
    """The dtype of the inputs: int32 token ids for text, else float32."""
    return jnp.dtype(jnp.int32 if self.modality == 'text' else jnp.float32)

  def test_input(self) -> tuple[int, ...]:
    """The shape of one example for the test-size model.

    Returns:
      `test_input_shape` if given, else `input_shape` of the defaults updated
      by `test_kwargs` (HWC; (length,) for text).
    """
    if self.test_input_shape:
      return self.test_input_shape
    return tuple(self.input_shape({**self.defaults, **self.test_kwargs}))


_MODELS: dict[str, ModelSpec] = {}


def register(name: str, *, family: str,
             input_shape: tuple[int, ...] | Callable[..., tuple[int, ...]],
             test_kwargs: Mapping[str, Any] | None = None,
             reference_params: float | None = None,
             reference_params_rtol: float = 0.0,
             reference_gflops: float | None = None,
             test_input_shape: tuple[int, ...] | None = None,
             modality: str = 'image', **defaults):
  """Class decorator: registers `cls` as the variant `name` (see `ModelSpec`).

  The same class can be registered several times (size variants), each with
  its own `defaults`; keyword arguments given to `create` win over them.
  `input_shape` is a fixed shape or a function of the effective keyword
  arguments (e.g. a ViT's `image_size`).

  Args:
    name: the variant's registry name, e.g. 'resnet50'; unique.
    family: one of FAMILIES ('mlp', 'convnet', 'transformer', 'decoder',
      'encoder');
      picks the default partition rules.
    input_shape: one example's shape (HWC; (length,) for text), or a
      function of the effective keyword arguments (a mapping) that returns
      it.
    test_kwargs: keyword arguments of a tiny model of the same structure for
      fast tests (the zoo's tests require them; {}: the model as it is).
    reference_params: the published parameter count; None: unknown.
    reference_params_rtol: relative tolerance on `reference_params` (0:
      exact).
    reference_gflops: the published forward GFLOPs of one example
      (2 x GMACs); None: unknown.
    test_input_shape: the test model's input shape; None: `input_shape` of
      the test kwargs.
    modality: one of MODALITIES: 'image' (float inputs) or 'text' (int32
      token ids).
    **defaults: the variant's keyword arguments of the class (e.g.
      num_classes=1000, stage_sizes=...); those given to `create` win.

  Returns:
    A class decorator that registers the class and returns it unchanged.

  Raises:
    ValueError: `family` is not one of FAMILIES, `modality` not one of
      MODALITIES, or (when the decorator is applied) `name` is already
      registered.
  """
  if family not in FAMILIES:
    raise ValueError(f'model {name!r}: family {family!r} is not one of '
                     f'{FAMILIES}')
  if modality not in MODALITIES:
    raise ValueError(f'model {name!r}: modality {modality!r} is not one of '
                     f'{MODALITIES}')
  if not callable(input_shape):
    input_shape = _fixed(tuple(input_shape))

  def wrap(cls):
    if name in _MODELS:
      raise ValueError(f'model {name!r} is registered twice')
    _MODELS[name] = ModelSpec(
        name, cls, dict(defaults), family, input_shape,
        None if test_kwargs is None else dict(test_kwargs), reference_params,
        reference_params_rtol, reference_gflops, test_input_shape, modality)
    return cls

  return wrap


def _fixed(shape: tuple[int, ...]):
  return lambda kwargs: shape


def _import(path: str) -> type[nn.Module]:
  """The Linen Module class that 'package.module:ClassName' names (an NNX
  Module class wrapped as one)."""
  module_name, _, class_name = path.partition(':')
  if not module_name or not class_name.isidentifier():
    raise ValueError(f'model {path!r} is not of the form '
                     "'package.module:ClassName'.")
  try:
    module = importlib.import_module(module_name)
  except SystemExit as e:  # Else the run would end there, maybe with 0.
    raise ValueError(f'importing {module_name!r} for model {path!r} ended '
                     f'the program (SystemExit: {e.code!r}); a module of '
                     'models must not call sys.exit() when imported: move '
                     "that code under `if __name__ == '__main__':`.") from None
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
  if _is_nnx_class(cls):
    # Imported here: flax.nnx takes a third of a second to load, and only
    # NNX models need it.
    from zoo import nnx_models  # pylint: disable=g-import-not-at-top
    return nnx_models.linen_class(cls)
  if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
    raise ValueError(f'model {path!r} is {cls!r}, not a flax.linen.Module '
                     'or flax.nnx.Module class.')
  return cls


def _is_nnx_class(cls: Any) -> bool:
  """Whether `cls` is a flax.nnx.Module class; asked without loading
  flax.nnx, which the module that defined such a class has loaded."""
  nnx = sys.modules.get('flax.nnx')
  return bool(nnx) and isinstance(cls, type) and issubclass(cls, nnx.Module)


def spec(name: str) -> ModelSpec:
  """The metadata of the model registered as `name` (or at
  'package.module:ClassName', which has little).

  Args:
    name: a registered name ('vit_s16'), or 'package.module:ClassName' for a
      Linen Module class of your own.

  Returns:
    The variant's ModelSpec; for a class of your own, one with no defaults,
    family, input shape or test kwargs.

  Raises:
    ValueError: `name` is not registered (the message suggests the closest
      names), or the 'package.module:ClassName' cannot be imported or is not
      a Linen Module class.
  """
  if name in _MODELS:
    return _MODELS[name]
  if ':' in name:
    return ModelSpec(name, _import(name), {})
  close = difflib.get_close_matches(name, list(_MODELS), n=3, cutoff=0.5)
  hint = (f'did you mean {", ".join(repr(c) for c in close)}?' if close else
          f'registered models: {", ".join(sorted(_MODELS))}; or name a Module '
          "of your own as 'package.module:ClassName'.")
  raise ValueError(f'unknown model {name!r}; {hint}')


def create(name: str, **kwargs) -> nn.Module:
  """Returns the Flax Linen module registered as `name` (or at
  'package.module:ClassName'), built with `kwargs`. (`zoo.create` also
  takes `pretrained=TAG`: zoo/pretrained.py.)

  Args:
    name: a registered name or 'package.module:ClassName' (see `spec`).
    **kwargs: the module's attributes (e.g. num_classes=10,
      dtype=jnp.bfloat16); they override the variant's registered defaults.

  Returns:
    The unbound Linen module; `init` and `apply` it as usual.

  Raises:
    ValueError: the model is unknown (see `spec`), or the module rejects an
      option (e.g. an unknown `pool` of a ViT).
  """
  model = spec(name)
  return model.cls(**{**model.defaults, **kwargs})


def list_models(pattern: str = '*') -> list[str]:
  """Sorted names of the registered models that match an fnmatch pattern.
  (`zoo.list_models` also takes `pretrained=True`: zoo/pretrained.py.)

  Args:
    pattern: an fnmatch pattern, case-sensitive (e.g. 'resnet*', 'vit_?16');
      the default '*' matches every model.

  Returns:
    The matching registered names, sorted; models of your own
    ('package.module:ClassName') are never listed.
  """
  return sorted(n for n in _MODELS if fnmatch.fnmatchcase(n, pattern))


def input_shape(name: str, **kwargs) -> tuple[int, ...]:
  """The shape of one input example of `create(name, **kwargs)`.

  Args:
    name: a registered name (see `spec`).
    **kwargs: the keyword arguments the model is created with; those that
      change the input (e.g. a ViT's `image_size`) change the shape.

  Returns:
    One example's shape (no batch dimension): HWC, e.g. (224, 224, 3); for
    a text model (length,) of token ids.

  Raises:
    ValueError: the model is unknown, or is a class of your own
      ('package.module:ClassName'), whose input shape the zoo does not know.
  """
  model = spec(name)
  if model.input_shape is None:
    raise ValueError(f'model {name!r} is not registered, so its input shape is '
                     'unknown; give the shape.')
  return tuple(model.input_shape({**model.defaults, **kwargs}))

"""Moving a file's tensors into a zoo model's variables, each exactly once.

A converter names, for every variable of the model, the tensor it comes
from and how its axes move (`Transfer.move`); `Transfer` checks each shape
on the way in and, at the end, that every tensor of the file was read once
and every variable set once. The first tensor that does not fit is the error,
by name: a file of another model or size never half-loads.
"""

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from zoo import registry


class ConversionError(ValueError):
  """A file that cannot become the asked-for model, in one line."""


@dataclasses.dataclass
class Converted:
  """A converted checkpoint.

  `name` and `kwargs` make the model (`zoo.create(name, **kwargs)`; kwargs
  hold what the file fixes, e.g. a ViT's patch size, image size and GELU),
  `variables` are its {'params': ..., 'batch_stats': ...} as nested dicts of
  float32 numpy arrays, `source` the library the file came from ('timm').
  The bookkeeping says where everything went: `reads`
  counts the reads of each tensor of the file, `writes` the assignments of
  each variable ('params/head/kernel'), `ignored` names the tensors read and
  deliberately not carried over, and why (a BatchNorm's step counter; a head
  for another number of classes), and `initialized` the variables left to
  the model's initialization (a new head).
  """

  name: str
  kwargs: dict[str, Any]
  variables: dict[str, Any]
  source: str
  reads: dict[str, int]
  writes: dict[str, int]
  ignored: dict[str, str]
  initialized: list[str]

  def describe(self) -> str:
    """'vit_b16 (patch_size=32, gelu='exact', ...)'.

    Returns:
      The model's name and its kwargs other than num_classes, for messages.
    """
    extra = {k: v for k, v in self.kwargs.items() if k != 'num_classes'}
    if not extra:
      return self.name
    return (f'{self.name} ('
            + ', '.join(f'{k}={v!r}' for k, v in extra.items()) + ')')


class Transfer:
  """The file's `tensors` into variables of the shapes `targets` gives,
  {'params/Conv_0/kernel': shape}; `model` names the model in errors.

  Args:
    tensors: the file's tensors by name.
    targets: the model's variables, {'params/...': shape} (see
      `target_shapes`).
    file: what to call the file in error messages.
    model: what to call the model in error messages.
  """

  def __init__(self, tensors: Mapping[str, np.ndarray],
               targets: Mapping[str, Sequence[int]], file: str, model: str):
    self._tensors = tensors
    self.targets = {k: tuple(v) for k, v in targets.items()}
    self._file = file
    self._model = model
    self.reads = {name: 0 for name in tensors}
    self.writes = {name: 0 for name in self.targets}
    self.values = {}
    self.ignored = {}
    self.initialized = []

  def _misfit(self, what: str) -> ConversionError:
    return ConversionError(f'{self._file} does not fit {self._model}: {what}')

  def has(self, name: str) -> bool:
    """Whether the file has tensor `name` (reading nothing).

    Args:
      name: a tensor's name in the file.

    Returns:
      True if the file has it.
    """
    return name in self._tensors

  def take(self, name: str, shape: Sequence[int] | None = None) -> np.ndarray:
    """Tensor `name` of the file (checked to be of `shape`), as float32.

    Counts as the tensor's read.

    Args:
      name: a tensor's name in the file.
      shape: the shape it must have; None: any.

    Returns:
      The tensor as a float32 numpy array; an integer tensor stays as it is
      (a step counter; the element indices zoo/export.py traces a
      conversion with).

    Raises:
      ConversionError: the file has no such tensor, or it has another
        shape.
    """
    if name not in self._tensors:
      raise self._misfit(f'it has no tensor {name!r} (another model, or '
                         'another depth?).')
    self.reads[name] += 1
    array = self._tensors[name]
    if shape is not None and tuple(array.shape) != tuple(shape):
      raise self._misfit(f'its tensor {name!r} has shape '
                         f'{tuple(array.shape)} where {self._model} needs '
                         f'{tuple(shape)} (another model or size?).')
    return _float32_unless_integer(array)

  def put(self, target: str, value: np.ndarray):
    """Sets variable `target` ('params/...') to `value`.

    Args:
      target: the variable's '/'-joined path, a key of `targets`.
      value: its value, of its shape; stored as float32 (integers as they
        are).

    Raises:
      ConversionError: the model has no such variable, or `value` has
        another shape.
    """
    if target not in self.targets:
      raise self._misfit(f'{self._model} has no variable {target!r}.')
    if tuple(value.shape) != self.targets[target]:
      raise self._misfit(f'{target} would be {tuple(value.shape)}, not '
                         f'{self.targets[target]}.')
    self.writes[target] += 1
    self.values[target] = np.ascontiguousarray(_float32_unless_integer(value))

  def move(self, name: str, target: str, axes: Sequence[int] | None = None,
           convert: Callable[[np.ndarray], np.ndarray] | None = None,
           shape: Sequence[int] | None = None):
    """Tensor `name` to variable `target`, transposed to `axes` (numpy's
    order: the target's axis i is the tensor's axis axes[i]), or through
    `convert` from a tensor of `shape`.

    Args:
      name: the tensor's name in the file.
      target: the variable's '/'-joined path, a key of `targets`.
      axes: the transposition, e.g. (1, 0) for a linear weight; None: the
        axes stay. Unused with `convert`.
      convert: tensor -> the variable's value, for what a transposition
        cannot do (a reshape, a resize); None: transpose by `axes`.
      shape: with `convert`, the shape the tensor must have; None: any.

    Raises:
      ConversionError: the model has no variable `target`, the file no
        tensor `name`, or a shape does not fit.
    """
    want = self.targets.get(target)
    if want is None:
      raise self._misfit(f'{self._model} has no variable {target!r}.')
    if convert is None:
      axes = tuple(range(len(want))) if axes is None else tuple(axes)
      shape = [0] * len(want)
      for i, axis in enumerate(axes):
        shape[axis] = want[i]
      self.put(target, self.take(name, shape).transpose(axes))
    else:
      self.put(target, convert(self.take(name, shape)))

  def ignore(self, name: str, why: str):
    """Reads tensor `name` and keeps it out of the model, for reason `why`.

    Args:
      name: the tensor's name in the file.
      why: the reason, kept in `Converted.ignored` (e.g. 'a step counter').

    Raises:
      ConversionError: the file has no tensor `name`.
    """
    self.take(name)
    self.ignored[name] = why

  def leave(self, target: str):
    """Leaves variable `target` to the model's initialization.

    Args:
      target: the variable's '/'-joined path, a key of `targets`.

    Raises:
      ConversionError: the model has no such variable.
    """
    if target not in self.targets:
      raise self._misfit(f'{self._model} has no variable {target!r}.')
    self.writes[target] += 1
    self.initialized.append(target)

  def finish(self, name: str, kwargs: dict[str, Any],
             source: str) -> Converted:
    """The result, once every tensor was read once and every variable set
    once (else the first that was not).

    Args:
      name: the zoo model's name.
      kwargs: its `zoo.create` arguments (what the file fixes).
      source: the library the file came from ('timm').

    Returns:
      The Converted checkpoint, its variables nested dicts.

    Raises:
      ConversionError: a tensor of the file was never read.
      AssertionError: a tensor was read twice, or a variable was not set
        exactly once (a converter's bug, not the file's).
    """
    for tensor, count in self.reads.items():
      if count == 0:
        raise self._misfit(f'its tensor {tensor!r} has no place in '
                           f'{self._model} (another model, or another '
                           'depth?).')
      if count > 1:
        raise AssertionError(f'tensor {tensor!r} was read {count} times')
    for target, count in self.writes.items():
      if count != 1:
        raise AssertionError(f'variable {target!r} was set {count} times')
    variables = traverse_util.unflatten_dict(self.values, sep='/')
    return Converted(name, dict(kwargs), variables, source, dict(self.reads),
                     dict(self.writes), dict(self.ignored),
                     list(self.initialized))


def check_family(name: str, cls: type, what: str):
  """Checks that the zoo model `name` is a `cls`, for a converter of
  `what` files (e.g. 'timm BiT').

  Args:
    name: a registered name.
    cls: the zoo's class of the converter's family.
    what: the files, for the message.

  Raises:
    ConversionError: `name` is a model of another class.
    ValueError: `name` is not a known model.
  """
  if not issubclass(registry.spec(name).cls, cls):
    raise ConversionError(f'{name} is not a {cls.__name__}, which {what} '
                          'files hold.')


def _float32_unless_integer(array) -> np.ndarray:
  array = np.asarray(array)
  return array if array.dtype.kind in 'iu' else np.asarray(array, np.float32)


def target_shapes(name: str, kwargs: Mapping[str, Any]) -> dict[str, tuple]:
  """{'params/Conv_0/kernel': shape, 'batch_stats/...': shape} of
  `zoo.create(name, **kwargs)`, from shapes alone (nothing is computed).

  Args:
    name: a registered name.
    kwargs: the keyword arguments of `zoo.create`.

  Returns:
    Every variable's '/'-joined path and shape.

  Raises:
    ValueError: the model is unknown or rejects `kwargs`.
  """
  model = registry.create(name, **kwargs)
  shape = registry.input_shape(name, **kwargs)
  variables = jax.eval_shape(
      lambda: model.init(jax.random.PRNGKey(0),
                         jnp.zeros((1, *shape),
                                   registry.spec(name).input_dtype),
                         train=False))
  flat = traverse_util.flatten_dict(nn.meta.unbox(variables), sep='/')
  return {k: tuple(v.shape) for k, v in flat.items()}

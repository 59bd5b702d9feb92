"""A zoo model's variables as another library's state dict: the converters
run backwards.

A converter only moves elements: it transposes, reshapes, splits and
stacks, never computes. So it is its own inverse once it is traced: give it
the file it would read (its `template(name, kwargs)`, names and shapes) with
every element numbered from 1, and each variable it returns holds, element
for element, the number of the file's element it came from (0: none, e.g.
a class token's position the file has no entry for). The export writes
each variable's values back to those places. Every element of the file must
be written exactly once; a step counter the converter sets aside is written
as 0.

    tensors = export.state_dict(zoo.convert.timm_vit, 'vit_b16', kwargs,
                                variables)

`python -m zoo.export` writes them to a .safetensors file (zoo/export.py).
"""

from types import ModuleType
from typing import Any, Mapping

import numpy as np
from flax import traverse_util

from zoo import registry
from zoo.convert.transfer import ConversionError

STEP_COUNTER = 'a step counter'


def state_dict(converter: ModuleType, name: str, kwargs: Mapping[str, Any],
               variables: Mapping[str, Any]) -> dict[str, np.ndarray]:
  """The tensors of `converter`'s file that hold `zoo.create(name,
  **kwargs)` with `variables`, in the template's order.

  Args:
    converter: a module of zoo.convert with `template` (e.g. timm_vit).
    name: the zoo model's registered name.
    kwargs: its `zoo.create` arguments (those not given are its defaults).
    variables: its {'params': ..., 'batch_stats': ...}, nested dicts of
      arrays (any float dtype).

  Returns:
    {tensor name: float32 numpy array} (a step counter as int64 0).

  Raises:
    ConversionError: the converter has no `template`, or the original
      library's model cannot be this one (an option the file fixes differs,
      e.g. timm's ViT has the exact GELU, the model the tanh one).
  """
  template = getattr(converter, 'template', None)
  if template is None:
    raise ConversionError(f'the {converter.SOURCE} converter '
                          f'{converter.__name__} cannot export.')
  kwargs = {**registry.spec(name).defaults, **kwargs}
  shapes = template(name, kwargs)
  sizes = [int(np.prod(shape, dtype=np.int64)) for shape in shapes.values()]
  starts = np.cumsum([1, *sizes])  # 0 is no element.
  numbered = {tensor: np.arange(start, start + size).reshape(shape)
              for (tensor, shape), start, size in zip(shapes.items(), starts,
                                                      sizes)}
  traced = converter.convert(numbered, f'a {converter.SOURCE} file', name,
                             kwargs.get('num_classes'),
                             kwargs.get('image_size'))
  model = registry.create(name, **kwargs)
  differ = {k: v for k, v in traced.kwargs.items()
            if getattr(model, k, None) != v}
  if traced.name != name or differ:
    theirs = ', '.join(f'{k}={v!r}' for k, v in differ.items())
    ours = ', '.join(f'{k}={getattr(model, k, None)!r}' for k in differ)
    raise ConversionError(
        f'a {converter.SOURCE} file holds {traced.name} with {theirs}, and '
        f'this {name} has {ours}: exported, it would compute something else.')
  values = np.zeros(starts[-1], np.float32)
  ours = traverse_util.flatten_dict(dict(variables), sep='/')
  places = []
  for target, where in traverse_util.flatten_dict(traced.variables,
                                                  sep='/').items():
    where = np.asarray(where).ravel()
    values[where] = np.asarray(ours[target], np.float32).ravel()
    places.append(where)
  written = np.bincount(np.concatenate(places), minlength=starts[-1])
  out = {}
  for (tensor, shape), start, size in zip(shapes.items(), starts, sizes):
    if traced.ignored.get(tensor) == STEP_COUNTER:
      out[tensor] = np.zeros(shape, np.int64)
      continue
    count = written[start:start + size]  # 0 (none) never counts.
    if not (count == 1).all():
      raise AssertionError(f'{converter.__name__}: elements of {tensor!r} '
                           f'were written {count.min()} to {count.max()} '
                           'times')
    out[tensor] = values[start:start + size].reshape(shape)
  return out

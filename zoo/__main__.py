"""Prints every registered model's parameter count, forward GFLOPs, input
shape, family and the tags of its published weights (zoo/weights.py).

    python -m zoo
"""

import os
from typing import Callable, Iterable

import jax

import zoo
from zoo import weights


def table(names: Iterable[str],
          model_info: Callable[[str], zoo.ModelInfo] = zoo.model_info) -> str:
  """One row per model; `model_info` gives each row's numbers.

  Args:
    names: registered model names, one row each, in this order.
    model_info: name -> its ModelInfo; default `zoo.model_info` (tests pass
      a cheaper one).

  Returns:
    The table as text: a header line, then name, parameters, GFLOPs, input
    shape, family and weights (`pretrained=` tags) per model.
  """
  rows = [f'{"model":<16} {"params":>13} {"GFLOPs":>8}  {"input":<11} '
          f'{"family":<11} weights']
  for name in names:
    info = model_info(name)
    shape = 'x'.join(map(str, info.input_shape))
    tags = ', '.join(weights.TAGS.get(name, {})) or '-'
    rows.append(f'{name:<16} {info.num_params:>13,} {info.gflops:>8.3f}  '
                f'{shape:<11} {zoo.spec(name).family:<11} {tags}')
  return '\n'.join(rows)


def main():
  """Prints the table of every registered model."""
  # Shapes and counts only, the same on any platform: the CPU gives them
  # without taking a GPU's memory, or a TPU from a run (and without libtpu's
  # start-up block on machines that have none).
  if not os.environ.get('JAX_PLATFORMS'):
    jax.config.update('jax_platforms', 'cpu')
  print(table(zoo.list_models()))


if __name__ == '__main__':
  main()

"""Prints every registered model's parameter count, forward GFLOPs, input shape
and family.

    python -m zoo
"""

from typing import Callable, Iterable

import zoo


def table(names: Iterable[str],
          model_info: Callable[[str], zoo.ModelInfo] = zoo.model_info) -> str:
  """One row per model; `model_info` gives each row's numbers.

  Args:
    names: registered model names, one row each, in this order.
    model_info: name -> its ModelInfo; default `zoo.model_info` (tests pass
      a cheaper one).

  Returns:
    The table as text: a header line, then name, parameters, GFLOPs, input
    shape and family per model.
  """
  rows = [f'{"model":<10} {"params":>13} {"GFLOPs":>8}  {"input":<10} family']
  for name in names:
    info = model_info(name)
    shape = 'x'.join(map(str, info.input_shape))
    rows.append(f'{name:<10} {info.num_params:>13,} {info.gflops:>8.3f}  '
                f'{shape:<10} {zoo.spec(name).family}')
  return '\n'.join(rows)


def main():
  """Prints the table of every registered model."""
  print(table(zoo.list_models()))


if __name__ == '__main__':
  main()

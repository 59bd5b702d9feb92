"""Benchmarks: `python -m recipes.bench` times the train step (step.py) or,
with `--input_only`, the input pipeline (input.py); `python -m
recipes.bench.epoch` a whole epoch of the recipe, `python -m
recipes.bench.checkpoints` saving and restoring, and `python -m
recipes.bench.input_sources` the streamed sources (image folders, ArrayRecord)
against tf.data on the same images."""

import json
import sys

from recipes.bench import step
from recipes.runtime import storage
from recipes.runtime.errors import UserError


def main(argv: list[str] | None = None) -> dict:
  """The command line of `python -m recipes.bench`; returns the result.

  Args:
    argv: the arguments (without the program name); None: sys.argv's.

  Returns:
    The result dict of step.measure or input.measure, also written to
    `--json` if given. A UserError exits with its message instead.
  """
  args = step.parse_args(argv)
  try:
    if args.input_only:
      # Only this mode needs TensorFlow; the step bench runs without it.
      from recipes.bench import \
          input as input_bench  # pylint: disable=g-import-not-at-top
      result = input_bench.measure(args)
    else:
      result = step.measure(args)
      print(step.table(result))
  except UserError as e:
    sys.exit(f'error: {e}')
  if args.json:
    storage.path(args.json).write_text(json.dumps(result, indent=2))
  return result

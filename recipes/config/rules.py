"""The kinds of value a config field allows, each with the words its error
uses, so that the check and the message cannot disagree."""

import dataclasses
import math
from typing import Any, Callable

import ml_collections


@dataclasses.dataclass(frozen=True)
class Rule:
  """A check on one field's value.

  Attributes:
    allows: value -> whether the field may hold it.
    allowed: what `allows` accepts, in the words of the error and the docs.
  """

  allows: Callable[[Any], bool]
  allowed: str


def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value))


def integer(low: int, high: int | None = None, note: str = '') -> Rule:
  """An int from `low` to `high` (None: no upper bound); `note` explains
  special values, e.g. ' (0 = off)'."""
  bounds = f'>= {low}' if high is None else f'from {low} to {high}'
  return Rule(lambda v: _is_int(v) and low <= v and (high is None or
                                                     v <= high),
              f'an int {bounds}{note}')


def number(low: float, high: float | None = None, low_open: bool = False,
           high_open: bool = False) -> Rule:
  """A finite float (or int) between the bounds, open or closed."""

  def allows(v):
    return _is_number(v) and (v > low if low_open else v >= low) and (
        high is None or (v < high if high_open else v <= high))

  bounds = f'{">" if low_open else ">="} {low:g}'
  if high is not None:
    bounds += f' and {"<" if high_open else "<="} {high:g}'
  return Rule(allows, f'a finite number {bounds}')


def choice(*options: str) -> Rule:
  """One of `options`."""
  return Rule(lambda v: v in options,
              f'one of {", ".join(repr(o) for o in options)}')


def int_choice(*options: int) -> Rule:
  """One of the ints `options` (not a bool, though True == 1)."""
  return Rule(lambda v: _is_int(v) and v in options,
              f'one of {", ".join(map(str, options))}')


def text(non_empty: bool = False) -> Rule:
  """A string (a non-empty one if asked)."""
  return Rule(lambda v: isinstance(v, str) and bool(v or not non_empty),
              'a non-empty string' if non_empty else 'a string')


BOOLEAN = Rule(lambda v: isinstance(v, bool), 'True or False')
FRACTION = number(0, 1, high_open=True)
PROBABILITY = number(0, 1)
MESH_SIZE = Rule(lambda v: _is_int(v) and (v >= 1 or v == -1),
                 'an int >= 1, or -1 for the devices left over')


def _are_eval_splits(value) -> bool:
  # Not 'ema' or '*_ema': eval_<name>_ema/ holds the EMA's results.
  return isinstance(value, (dict, ml_collections.ConfigDict)) and all(
      isinstance(k, str) and k.isidentifier() and k != 'ema'
      and not k.endswith('_ema') and isinstance(v, str) and v
      for k, v in value.items())


EVAL_SPLITS = Rule(_are_eval_splits,
                   "a dict of {name: split} whose names are identifiers, "
                   "neither 'ema' nor ending in '_ema', e.g. "
                   "{'minival': 'train[99%:]'}")

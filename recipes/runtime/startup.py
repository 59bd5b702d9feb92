"""A command loads with the garbage collector off.

Loading JAX, TensorFlow and the recipes makes about 500,000 objects that
all stay; while they load, the collector's full passes over them cost a
sixth of a command's start (0.8 of 4.5 s of CPU for `python -m
recipes.train`). recipes/__init__.py turns collection off when Python runs
a command (`python -m recipes.X`: `sys.argv[0]` is '-m' while Python finds
X, and `sys.orig_argv` names X), and the command turns it back on once its
module has loaded, with what has loaded frozen (`gc.freeze`: later passes
skip it, as they skip nothing that a run makes). Imported as a library (a
notebook, the tests), nothing changes.
"""

import gc
import sys

_turned_off = False


def loading():
  """Turns collection off where Python is starting a command."""
  global _turned_off
  if _starting_a_command() and gc.isenabled():
    gc.disable()
    _turned_off = True


def _starting_a_command() -> bool:
  """Whether Python is finding the module of `python -m recipes.X`: not
  that of another program's `python -m` whose package loads the recipes
  (it would not turn collection back on)."""
  if sys.argv[:1] != ['-m'] or '-m' not in sys.orig_argv:
    return False
  module = sys.orig_argv[sys.orig_argv.index('-m') + 1:][:1]
  return bool(module) and module[0].startswith('recipes.')


def loaded():
  """Turns collection back on if `loading` turned it off, what has loaded
  frozen out of it (with the few thousand objects of garbage that loading
  left: a full pass to free them would cost half a second)."""
  global _turned_off
  if _turned_off:
    gc.freeze()
    gc.enable()
    _turned_off = False

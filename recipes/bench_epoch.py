"""The old name of `python -m recipes.bench.epoch`, kept so that commands
written for it still run."""

import runpy

if __name__ == '__main__':
  runpy.run_module('recipes.bench.epoch', run_name='__main__', alter_sys=True)

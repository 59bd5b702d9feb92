"""The old name of `python -m recipes.bench.checkpoints`, kept so that commands
written for it still run."""

import runpy

if __name__ == '__main__':
  runpy.run_module('recipes.bench.checkpoints', run_name='__main__', alter_sys=True)

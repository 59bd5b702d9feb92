"""Evaluates a run's latest checkpoint, writes its eval summaries and stops:
`python -m recipes.evaluate --config=FILE --workdir=DIR`.

The same flags and config as `python -m recipes.train` (the run's own config,
or another eval split, e.g. `--config.eval_split=test`); it is that command
with `--config.mode=eval`. Every eval split of the config is evaluated, the
EMA's too, at the step of the latest checkpoint.

In a workdir without a checkpoint, the weights that --config.init_from (a
directory python -m recipes.convert wrote, or another run) or
--config.pretrained names are evaluated instead, as step 0: converted or
published weights measured on the config's data without training.
"""

import functools

from absl import app

from recipes import train
from recipes.config import command_line
from recipes.runtime import startup

if __name__ == '__main__':
  startup.loaded()
  app.run(functools.partial(train.main, mode='eval'),
          flags_parser=command_line.parser('recipes.evaluate', __doc__))

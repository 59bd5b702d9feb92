"""Training recipes for the zoo's models, in layers; each imports only the
layers below it (tests/unit/test_architecture.py):

  train, evaluate, convert   the commands
  experiment, loop, evaluation   one run: what it is built from, how it goes
  config/      fields, defaults, validation, command-line handling
  checkpoint/  saving, checksums, resuming, converted weights
  parallel/    strategies (pmap, shard_map, sharded), meshes, partition rules
  data/        datasets, preprocessing, the batches each process feeds
  core/        the shared step, train state, optimizers, metrics, mixing
  runtime/     errors, storage, lease, summaries, preemption, watchdog,
               dispatch

bench/ (python -m recipes.bench) times the layers above it from the outside.
"""

# Every command (python -m recipes.X) runs this first: before it loads JAX
# and the rest (runtime/startup.py), and before JAX starts its backends.
# pylint: disable=g-import-not-at-top,wrong-import-position
from recipes.runtime import startup

startup.loading()

from recipes.runtime import library_noise

library_noise.skip_tpu_where_there_is_none()

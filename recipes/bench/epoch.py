"""Times one training epoch of the recipe against a bare `jax.jit` loop.

    python -m recipes.bench.epoch --config=configs/fashion_mnist_pmap.py

Both run the same model, optimizer, batch size and tf.data pipeline, data
included, after a compile warm-up: the recipe with the config's strategy and
its device prefetch; the bare loop feeds each numpy batch straight to a
single-device jitted step. Prints a table of images/s. Use
JAX_NUM_CPU_DEVICES / the device count to choose how many devices the recipe
uses (default: all local devices).
"""

import time

import jax
from absl import app, flags
from ml_collections import config_flags

from recipes import experiment, loop
from recipes.bench import step as bench_step
from recipes.runtime import startup
from recipes.runtime.dispatch import OneAhead

_CONFIG = config_flags.DEFINE_config_file(
    'config', 'configs/fashion_mnist_pmap.py', 'Config to benchmark.')
_REPEATS = flags.DEFINE_integer('repeats', 1, 'Timed epochs per mode.')


def _epoch_batches(exp, config):
  return exp.data.train_batches(
      batch_size=config.batch_size, seed=config.seed, start_step=0,
      num_steps=exp.steps_per_epoch)


def time_recipe(exp, config) -> float:
  """Times one epoch of the recipe's loop, after a two-step warm-up.

  Args:
    exp: the experiment (recipes/experiment.py `build`).
    config: its config (batch size and seed).

  Returns:
    The epoch's seconds, input pipeline included.
  """
  strategy = exp.strategy
  state = exp.create_state()
  warmup = strategy.place_batches(_epoch_batches(exp, config))
  for _, state, _ in loop.train_steps(strategy, state, warmup, 1, 2):
    pass
  start = time.perf_counter()
  batches = strategy.place_batches(_epoch_batches(exp, config))
  for _, state, metrics in loop.train_steps(strategy, state, batches, 1,
                                            exp.steps_per_epoch):
    pass
  jax.block_until_ready((state, metrics))
  return time.perf_counter() - start


def time_bare_jit(exp, config) -> float:
  """Times one epoch of a single-device jitted step, after one warm-up step.

  Args:
    exp: the experiment (recipes/experiment.py `build`).
    config: its config (batch size and seed).

  Returns:
    The epoch's seconds, input pipeline included.
  """
  step = bench_step.bare_train_step()
  # The recipe's initial state, whole on one device.
  state = jax.device_put(exp.strategy.to_host(exp.create_state()),
                         jax.devices()[0])
  state, _ = step(state, next(_epoch_batches(exp, config)))
  start = time.perf_counter()
  one_ahead = OneAhead()  # As the recipe's loop does.
  for batch in _epoch_batches(exp, config):
    state, metrics = step(state, batch)
    one_ahead(metrics)
  jax.block_until_ready((state, metrics))
  return time.perf_counter() - start


def main(argv):
  """Times both modes and prints the table (absl's entry point).

  Args:
    argv: the command line left after absl's flags; not used.
  """
  del argv
  config = _CONFIG.value
  exp = experiment.build(config)
  images = exp.steps_per_epoch * config.batch_size
  rows = []
  for name, timer in (('bare jax.jit loop, 1 device', time_bare_jit),
                      (f'{config.strategy} recipe, {jax.device_count()} '
                       'device(s)', time_recipe)):
    for _ in range(_REPEATS.value):
      seconds = timer(exp, config)
      rows.append((name, seconds, images / seconds))
  print(f'\n{config.model} on {config.dataset}, batch {config.batch_size}, '
        f'{exp.steps_per_epoch} steps per epoch, JAX {jax.__version__} '
        f'on {jax.devices()[0].platform}')
  print(f'| {"mode":32} | {"epoch s":>8} | {"images/s":>9} |')
  print(f'|{"-" * 34}|{"-" * 10}|{"-" * 11}|')
  for name, seconds, rate in rows:
    print(f'| {name:32} | {seconds:8.2f} | {rate:9.0f} |')


if __name__ == '__main__':
  startup.loaded()
  app.run(main)

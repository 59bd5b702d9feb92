"""Input-pipeline throughput against what the train step consumes.

    python -m recipes.bench --input_only --model=cnn --batch_size=128

Runs the recipes' tf.data training pipeline (`in_memory.train_batches`
with `Preprocessing`) over synthetic in-memory splits of random uint8 images
shaped like the real datasets, and reports batches/s and images/s:

    fashion_mnist  28x28x1, no augmentation (scaled to [0, 1], per batch)
    cifar10        32x32x3, pad-crop-flip augmentation per example, CIFAR-10
                   normalization

Then it times the train step of `--model` at the same batch on one device
(`--strategy=jit`, recipes/bench/step.py) and gives how many times more batches/s
each pipeline delivers than the step consumes. Each is measured alone: where
the pipeline and the step share the same CPU cores, as on a laptop, the
end-to-end rate is lower than either (recipes/bench/epoch.py measures that).
Needs TensorFlow, unlike the rest of the benchmark.
"""

import argparse
import time

import numpy as np

from recipes.bench import step as bench_step
from recipes.data.images.preprocess import Preprocessing
from recipes.data.pipeline import in_memory
from recipes.runtime.errors import UserError

SPLITS = {
    'fashion_mnist': ((28, 28, 1), Preprocessing()),
    'cifar10': ((32, 32, 3), Preprocessing('cifar', 'cifar10')),
}
_WARMUP_BATCHES = 20  # tf.data's autotuning settles in the first batches.


def pipeline_batches_per_sec(shape, preprocessing: Preprocessing,
                             num_examples: int, batch_size: int,
                             num_batches: int) -> float:
  """The training pipeline's rate on a synthetic split of random images.

  Args:
    shape: the shape of one image, e.g. (28, 28, 1).
    preprocessing: the pipeline's preprocessing.
    num_examples: examples in the synthetic split.
    batch_size: images per batch.
    num_batches: timed batches, after _WARMUP_BATCHES untimed ones.

  Returns:
    Batches per second.
  """
  rng = np.random.default_rng(0)
  split = {'image': rng.integers(0, 256, (num_examples, *shape), np.uint8),
           'label': rng.integers(0, 10, num_examples, np.int64)}
  batches = in_memory.train_batches(
      split, batch_size=batch_size, seed=0, start_step=0,
      num_steps=_WARMUP_BATCHES + num_batches, preprocessing=preprocessing)
  for _ in range(_WARMUP_BATCHES):
    next(batches)
  start = time.perf_counter()
  for _ in range(num_batches):
    next(batches)
  return num_batches / (time.perf_counter() - start)


def measure(args: argparse.Namespace) -> dict:
  """Pipeline rates, the train step's rate and their ratios, as a dict.

  Args:
    args: the command line (recipes/bench/step.py `parse_args`).

  Returns:
    The results; their table is printed too.

  Raises:
    UserError: if --input_examples is smaller than one batch, or for a
      bad model.
  """
  in_memory.hide_accelerators_from_tensorflow()
  if args.input_examples < args.batch_size:
    raise UserError(f'--input_examples={args.input_examples} is '
                          f'smaller than one batch of {args.batch_size}.')
  num_batches = args.input_batches
  pipelines = {}
  for name, (shape, preprocessing) in SPLITS.items():
    bench_step.log(f'input pipeline {name}: {num_batches} batches of '
              f'{args.batch_size}...')
    rate = pipeline_batches_per_sec(shape, preprocessing, args.input_examples,
                                    args.batch_size, num_batches)
    pipelines[name] = {'batches_per_sec': rate,
                       'images_per_sec': rate * args.batch_size}
  step = bench_step.measure(argparse.Namespace(**{**vars(args), 'strategy': 'jit',
                                         'devices': None, 'profile': None}))
  step_rate = 1 / step['step_time_median_s']
  for result in pipelines.values():
    result['times_train_step'] = result['batches_per_sec'] / step_rate
  result = {'batch_size': args.batch_size, 'input_examples':
            args.input_examples, 'input_batches': num_batches,
            'pipelines': pipelines, 'train_step': step,
            'train_step_batches_per_sec': step_rate}
  print(table(result))
  return result


def table(result: dict) -> str:
  """The results as a Markdown table.

  Args:
    result: what `measure` returns.

  Returns:
    A line on the train step, then a row per pipeline.
  """
  step = result['train_step']
  lines = [f"batch {result['batch_size']}; the train step of {step['model']} "
           f"({step['dtype']}, jit, 1 {step['platform']} device) consumes "
           f"{result['train_step_batches_per_sec']:.1f} batches/s",
           '| pipeline | batches/s | images/s | x train step |',
           '|---|---|---|---|']
  for name, r in result['pipelines'].items():
    lines.append(f"| {name} | {r['batches_per_sec']:,.1f} | "
                 f"{r['images_per_sec']:,.0f} | {r['times_train_step']:.1f} |")
  return '\n'.join(lines)

"""tf.data pipelines over an in-memory split, with a fixed data order.

The data-order rule: the global batch at step s is a pure function of
(seed, s) -- the same whatever the number of processes and devices -- and each
process reads only its own contiguous slice of every global batch. That makes
a 2-host run equal to a 1-host run, and lets a resumed run continue exactly:
it just starts the same sequence at a later step. Random augmentation is
seeded by (seed, position of the example in the whole sequence), so it obeys
the same rule.

Epoch e visits the examples in a permutation drawn from (seed, e); the last
incomplete batch of each epoch is dropped. Evaluation visits every example
exactly once: the last batch is padded and the padding has `mask` False.

Batches come out as numpy dicts with a leading local-batch axis: `image`
float32 (see recipes/data/preprocess.py), `label` int32, and `mask` bool for
evaluation. Placing them on devices is the strategy's job.
"""

import math
from typing import Iterator

import numpy as np
import tensorflow as tf

from recipes.parallel.distributed import process_slice
from recipes.data.preprocess import Preprocessing

Batch = dict[str, np.ndarray]


def steps_per_epoch(num_examples: int, batch_size: int) -> int:
  return num_examples // batch_size


def num_eval_steps(num_examples: int, batch_size: int) -> int:
  return math.ceil(num_examples / batch_size)


def hide_accelerators_from_tensorflow():
  """tf.data runs on the host: TensorFlow must not take GPU/TPU memory."""
  for kind in ('GPU', 'TPU'):
    tf.config.set_visible_devices([], kind)


def as_numpy(ds: tf.data.Dataset) -> Iterator[Batch]:
  # Without tf.data's autotuning thread: deleting an iterator waits for it,
  # which after a stop by SIGTERM of a multi-process run took up to a minute
  # (a scheduler's SIGKILL came first). AUTOTUNE then means a thread per core
  # for `map` and a prefetch buffer that grows while the consumer waits.
  options = tf.data.Options()
  options.autotune.enabled = False
  return ds.with_options(options).prefetch(
      tf.data.AUTOTUNE).as_numpy_iterator()


def train_batches(split: Batch, *, batch_size: int, seed: int,
                  start_step: int, num_steps: int,
                  preprocessing: Preprocessing = Preprocessing()
                  ) -> Iterator[Batch]:
  """This process's slices of the global batches for steps [start, num_steps)."""
  n = len(split['label'])
  per_epoch = steps_per_epoch(n, batch_size)
  start, stop = process_slice(batch_size)
  images, labels = tf.constant(split['image']), tf.constant(split['label'])
  seed = tf.constant(seed, tf.int64)

  def epoch_indices(epoch):
    # argsort of stateless uniforms: a permutation that depends on (seed,
    # epoch) only, so any step's batch can be recomputed without history.
    noise = tf.random.stateless_uniform([n], seed=tf.stack([seed, epoch]))
    order = tf.argsort(noise, stable=True)[:per_epoch * batch_size]
    order = tf.reshape(order, [per_epoch, batch_size])[:, start:stop]
    return tf.data.Dataset.from_tensor_slices(order)

  def batch(step, indices):
    image = tf.gather(images, indices)
    if preprocessing.is_random:
      positions = step * batch_size + tf.range(start, stop, dtype=tf.int64)
      seeds = tf.stack([tf.fill([stop - start], seed), positions], axis=1)
      image = tf.map_fn(lambda x: preprocessing.train(x[0], x[1]),
                        (image, seeds), fn_output_signature=tf.float32)
    else:
      image = preprocessing.eval(image)  # Deterministic: the whole batch.
    return {'image': image, 'label': tf.cast(tf.gather(labels, indices),
                                             tf.int32)}

  first_epoch = start_step // per_epoch
  last_epoch = math.ceil(num_steps / per_epoch)
  ds = (tf.data.Dataset.range(first_epoch, last_epoch)
        .flat_map(epoch_indices)
        .skip(start_step - first_epoch * per_epoch)
        .take(num_steps - start_step)
        .enumerate(start_step)
        .map(batch, num_parallel_calls=tf.data.AUTOTUNE))
  return as_numpy(ds)


def eval_batches(split: Batch, *, batch_size: int,
                 preprocessing: Preprocessing = Preprocessing()
                 ) -> Iterator[Batch]:
  """One pass over every example; padding examples have mask False."""
  n = len(split['label'])
  start, stop = process_slice(batch_size)
  images, labels = tf.constant(split['image']), tf.constant(split['label'])

  def batch(step):
    positions = step * batch_size + tf.range(start, stop, dtype=tf.int64)
    indices = tf.minimum(positions, n - 1)
    return {'image': preprocessing.eval(tf.gather(images, indices)),
            'label': tf.cast(tf.gather(labels, indices), tf.int32),
            'mask': positions < n}

  ds = tf.data.Dataset.range(num_eval_steps(n, batch_size)).map(
      batch, num_parallel_calls=tf.data.AUTOTUNE)
  return as_numpy(ds)

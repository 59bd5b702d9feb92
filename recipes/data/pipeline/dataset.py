"""What the training loop needs from a dataset, whatever its source.

recipes/data/datasets.py finds a dataset by name; in_memory.InMemoryDataset
and streaming.StreamingDataset implement this interface.
"""

from typing import Iterator, Protocol, runtime_checkable

import jax
import numpy as np

# Numpy arrays with a leading local-batch axis: `image` float32, `label`
# int32, and `mask` bool in evaluation (False for padding examples).
Batch = dict[str, np.ndarray]


@runtime_checkable
class Dataset(Protocol):
  """A training split and one or more evaluation splits of one dataset,
  batched for this process. Splits are TFDS split strings ('test',
  'train[99%:]'); the first evaluation split is the main one."""

  @property
  def num_classes(self) -> int:
    """How many classes the labels run over (0 to num_classes - 1)."""
    ...

  @property
  def class_names(self) -> tuple[str, ...]:
    """Each label's name, in label order; () if the source names none."""
    ...

  @property
  def files(self) -> dict[str, list[tuple[str, int | None]]]:
    """For splits read from files a user may change (an image folder): the
    (name, size) of each example's file, in order, by split string; {} for
    other sources. A resumed run checks them (recipes/checkpoint/
    data_files.py)."""
    ...

  @property
  def num_train(self) -> int:
    """Examples in the training split."""
    ...

  @property
  def num_eval(self) -> int:
    """Examples in the first evaluation split."""
    ...

  @property
  def eval_sizes(self) -> dict[str, int]:
    """Examples in each evaluation split, in the order given."""
    ...

  @property
  def image_shape(self) -> tuple[int, ...]:
    """The shape of one preprocessed image, as the model sees it."""
    ...

  def train_batches(self, *, batch_size: int, seed: int, start_step: int,
                    num_steps: int) -> Iterator[Batch]:
    """This process's share of the global batches of steps [start_step,
    num_steps); `batch_size` is global.

    Args:
      batch_size: the global batch, over all processes; a multiple of the
        process count.
      seed: the run's seed: the data order and augmentation.
      start_step: the first step to feed (a resumed run's step).
      num_steps: the step to stop before.

    Returns:
      An iterator of this process's batch_size / process_count rows of each
      global batch, `image` and `label`.
    """
    ...

  def eval_batches(self, *, batch_size: int, split: str | None = None
                   ) -> Iterator[Batch]:
    """One pass over evaluation split `split` (None: the first), padded to
    whole batches.

    Args:
      batch_size: the global batch, over all processes.
      split: one of the evaluation splits; None: the first.

    Returns:
      An iterator of this process's rows of each global batch, `image`,
      `label` and `mask` (False for padding).
    """
    ...


def process_slice(batch_size: int) -> tuple[int, int]:
  """[start, stop) of this process's examples within each global batch of
  `batch_size`: every process loads only its own contiguous rows.

  Args:
    batch_size: the global batch; a multiple of the process count.

  Returns:
    (start, stop), row indices into the global batch.
  """
  local = batch_size // jax.process_count()
  start = jax.process_index() * local
  return start, start + local


def batch_shapes(batch_size: int, image_shape: tuple[int, ...],
                 evaluation: bool = False) -> dict[str, jax.ShapeDtypeStruct]:
  """The shapes and dtypes of a global batch as every dataset yields it:
  `image` float32, `label` int32 and, to evaluate, `mask` bool; for token
  sequences (image_shape (seq_len,)), as recipes/data/pipeline/
  token_batches.py yields them: `inputs`, `targets`, `segment_ids`,
  `positions` int32 and `mask` bool, each [batch, seq_len].

  Args:
    batch_size: the global batch.
    image_shape: one image's shape, HWC; (seq_len,) for token sequences.
    evaluation: add the eval batches' `mask` (token batches always have
      it).

  Returns:
    {name: jax.ShapeDtypeStruct}, for compiling the steps without data.
  """
  if len(image_shape) == 1:  # Token sequences.
    rows = (batch_size, *image_shape)
    return {**{k: jax.ShapeDtypeStruct(rows, np.int32) for k in (
        'inputs', 'targets', 'segment_ids', 'positions')},
            'mask': jax.ShapeDtypeStruct(rows, np.bool_)}
  shapes = {'image': jax.ShapeDtypeStruct((batch_size, *image_shape),
                                          np.float32),
            'label': jax.ShapeDtypeStruct((batch_size,), np.int32)}
  if evaluation:
    shapes['mask'] = jax.ShapeDtypeStruct((batch_size,), np.bool_)
  return shapes

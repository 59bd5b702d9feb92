"""The classifier head: carried over when the number of classes is the
file's, else left to the model's initialization (fine-tuning on a new
task); with num_classes=0 the model has none and returns its features (a
file's head is then set aside)."""

from typing import Mapping, Sequence

import numpy as np

from zoo.convert.transfer import Transfer


def classes(tensors: Mapping[str, np.ndarray], bias: str, file: str,
            num_classes: int | None) -> tuple[int | None, int]:
  """(the file's number of classes or None without a head, the model's).

  Args:
    tensors: the checkpoint's tensors by name.
    bias: the name of the head's bias in the file, e.g. 'fc.bias'.
    file: the file's name (unused: no head is not an error).
    num_classes: the classes asked for (0: no head); None: the file's.

  Returns:
    (file_classes, num_classes): the file head's classes (None: no head)
    and the model's: the asked-for number, else the file's, else 0 (a file
    without a head, e.g. a SigLIP image tower, gives a model without one).
  """
  del file
  file_classes = int(tensors[bias].shape[-1]) if bias in tensors else None
  if num_classes is None:
    num_classes = file_classes or 0
  return file_classes, num_classes


def move(t: Transfer, weight: str, bias: str, target: str,
         axes: Sequence[int], file_classes: int | None, num_classes: int):
  """Tensors `weight` and `bias` to `target`/kernel and `target`/bias when
  the classes agree; otherwise both are read, set aside and the head is left
  to initialization (none with num_classes=0).

  Args:
    t: the Transfer in progress.
    weight: the name of the head's weight in the file.
    bias: the name of the head's bias in the file.
    target: the head's variable path, e.g. 'params/head'.
    axes: how the weight's axes move to the kernel's (see `Transfer.move`).
    file_classes: the file head's classes; None: the file has no head.
    num_classes: the model's classes; 0: it has no head.
  """
  if file_classes == num_classes:
    t.move(weight, f'{target}/kernel', axes)
    t.move(bias, f'{target}/bias')
    return
  if file_classes is not None:
    why = f'a head for {file_classes} classes, not {num_classes}'
    t.ignore(weight, why)
    t.ignore(bias, why)
  if not num_classes:
    return
  t.leave(f'{target}/kernel')
  t.leave(f'{target}/bias')

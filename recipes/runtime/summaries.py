"""Metric summaries: TensorBoard event files in WORKDIR/summaries, log lines,
and a Weights & Biases run if asked (recipes/runtime/wandb_writer.py).

Only process 0 writes them; the other processes' writer writes nothing, so a
multi-process run logs each metric line once.

The events are in a subdirectory, not WORKDIR itself, so that
`tensorboard --logdir=WORKDIR` names the run `summaries`: for a run named `.`
TensorBoard's hparams dashboard finds no metric values.

The event files are written through `recipes.runtime.storage` like every
other file, so they land wherever the workdir is (a local disk, a bucket, an
emulator).
Cloud Storage objects cannot be appended to and appear only once complete,
so each flush writes the events since the last one as a new, complete event
file; TensorBoard reads all of a run's files in the order of their names.
"""

import itertools
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

import jax
import ml_collections
from clu import metric_writers
from etils import epath
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.hparams import summary_v2 as hparams_summary
from tensorboard.plugins.scalar import summary_v2 as scalar_summary
from tensorboard.summary.writer.record_writer import RecordWriter

from recipes.runtime import scalar_writer, storage, wandb_writer

DIRECTORY = 'summaries'
# Numbers the event files of this process, in every workdir and writer: with
# the time and process id in the name, no two files share a name.
_file_numbers = itertools.count()


def directory(workdir: str | os.PathLike) -> epath.Path:
  """Where the event files of the run in `workdir` are.

  Args:
    workdir: the run's directory (local, or a bucket's gs:// path).

  Returns:
    The path `workdir`/summaries.
  """
  return storage.path(workdir) / DIRECTORY


def create_writer(config: ml_collections.ConfigDict,
                  workdir: str | os.PathLike) -> metric_writers.MetricWriter:
  """Process 0: log lines and event files, and a W&B run when
  config.wandb_project is set (recipes/runtime/wandb_writer.py), written in
  the background; other processes: a writer that writes nothing.

  Args:
    config: the run's configuration.
    workdir: the run's directory (local, or a bucket's gs:// path).

  Returns:
    The metric writer for this process; close it at the end of the run.
  """
  if jax.process_index() > 0:
    return metric_writers.MultiWriter([])
  writers = [TrainLog(), EventFileWriter(directory(workdir))]
  if config.wandb_project:
    writers.append(wandb_writer.create(config, workdir))
  return metric_writers.AsyncMultiWriter(writers)


def hparams(config: ml_collections.ConfigDict, prefix: str = '') -> dict:
  """Config fields as TensorBoard hparams: dotted names, scalar values.

  Args:
    config: the run's configuration; nested ConfigDicts are flattened.
    prefix: put before every name (used for the nested ones).

  Returns:
    A flat {dotted name: bool, int, float or str} dict; other values as
    their str.
  """
  flat = {}
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict):
      flat.update(hparams(value, f'{prefix}{key}.'))
    else:
      scalar = isinstance(value, (bool, int, float, str))
      flat[prefix + key] = value if scalar else str(value)
  return flat


class TrainLog(metric_writers.LoggingWriter):
  """CLU's log lines of the summaries (`[STEP] train/loss=...`), less the
  eval ones: recipes/evaluation.py logs each evaluation in a line of its
  own, with the split and its size."""

  def write_scalars(self, step: int, scalars: Mapping[str, Any]):
    scalars = {tag: value for tag, value in scalars.items()
               if not tag.startswith('eval')}
    if scalars:
      super().write_scalars(step, scalars)


class EventFileWriter(scalar_writer.ScalarWriter):
  """Scalars and hyperparameters as TensorBoard event files in `directory`.

  Events are kept in memory and written as one new file at each `flush`, or
  at the first write `flush_secs` after the last file.
  """

  def __init__(self, directory: epath.Path, flush_secs: float = 120.0):
    """Writes nothing until the first flush.

    Args:
      directory: where the event files go; made at the first flush.
      flush_secs: write a file at the first event this long after the last.
    """
    self._directory = directory
    self._flush_secs = flush_secs
    self._events: list[event_pb2.Event] = []
    self._last_flush = time.monotonic()

  def write_scalars(self, step: int, scalars: Mapping[str, Any]):
    """Adds one event of scalar summaries.

    Args:
      step: the step the values are of.
      scalars: {tag: number}, e.g. {'train/loss': 0.3}.
    """
    summary = summary_pb2.Summary()
    for tag, value in scalars.items():
      summary.MergeFrom(scalar_summary.scalar_pb(tag, value))
    self._add(event_pb2.Event(step=step, summary=summary))

  def write_hparams(self, hparams):  # pylint: disable=redefined-outer-name
    """Adds the run's hyperparameters, for TensorBoard's hparams dashboard.

    Args:
      hparams: {name: scalar value}, e.g. from `hparams(config)`.
    """
    self._add(event_pb2.Event(summary=hparams_summary.hparams_pb(hparams)))

  def _add(self, event: event_pb2.Event):
    event.wall_time = time.time()
    self._events.append(event)
    if time.monotonic() - self._last_flush >= self._flush_secs:
      self.flush()

  def flush(self):
    """Writes the events kept since the last flush as one new event file.

    Returns:
      None; writes nothing when there are no new events.
    """
    self._last_flush = time.monotonic()
    if not self._events:
      return
    events, self._events = self._events, []
    # Names sort in the order written: by the second, then by the number.
    name = (f'events.out.tfevents.{int(time.time()):010d}.'
            f'{socket.gethostname()}.{os.getpid()}.{next(_file_numbers):06d}'
            '.v2')
    self._directory.mkdir(parents=True, exist_ok=True)
    with (self._directory / name).open('wb') as f:
      records = RecordWriter(f)
      version = event_pb2.Event(wall_time=events[0].wall_time,
                                file_version='brain.Event:2')
      for event in [version, *events]:
        records.write(event.SerializeToString())

  def close(self):
    """Writes what is left (see `flush`).

    Returns:
      None.
    """
    self.flush()

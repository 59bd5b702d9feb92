"""A clean stop on SIGTERM or SIGINT: preemption, `scancel`, Ctrl-C.

The signal only sets a flag. The loop asks `should_stop` at every step
boundary (train steps and eval batches alike); all processes must stop at
the same boundary, or the one that stops first leaves the others waiting in a
collective forever. So with several processes the answer comes from JAX's
preemption sync point: `jax.distributed` installs its own SIGTERM notifier,
tells every process, and they agree on the first boundary that all of them
have not passed yet. SIGINT is passed on to that notifier as SIGTERM.
Nothing else may ask that sync point (it keeps the last number it was
given): the checkpoint manager does not (recipes/checkpoint/store.py).

A second signal acts as if there were no handler (Ctrl-C twice interrupts
at once).
"""

import os
import signal
import threading

import jax
from absl import logging
from jax.experimental import multihost_utils

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
  """Use as a context manager around the loop; ask `should_stop()` often."""

  def __init__(self):
    self.received = None  # The name of the first signal, once one came.
    self._boundary = 0
    self._previous = {}

  def __enter__(self):
    self._multi_process = jax.process_count() > 1
    # SIGTERM stays with JAX's notifier when there are several processes.
    handled = (signal.SIGINT,) if self._multi_process else SIGNALS
    if threading.current_thread() is not threading.main_thread():
      handled = ()  # Python takes signals in the main thread only.
    for signum in handled:
      self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def __exit__(self, *exc_info):
    self._restore_handlers()

  def _restore_handlers(self):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}

  def _handle(self, signum, frame):
    del frame
    self.received = signal.Signals(signum).name
    self._restore_handlers()  # The next one is not caught.
    if self._multi_process:
      os.kill(os.getpid(), signal.SIGTERM)
    logging.warning('%s received: stopping at the next step boundary.',
                    self.received)

  def should_stop(self) -> bool:
    """True at the boundary where every process stops; call at each one.

    Returns:
      Whether to stop here: a stop signal came (to any process, when there
      are several) and every process stops at this boundary.
    """
    self._boundary += 1
    if self._multi_process:
      # Boundaries are counted alike on every process (same steps, same eval
      # batches), so they serve as the sync point's step ids.
      stop = multihost_utils.reached_preemption_sync_point(self._boundary)
      if stop and self.received is None:
        self.received = 'SIGTERM'
      return stop
    return self.received is not None

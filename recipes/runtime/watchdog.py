"""Ends a run that has stopped making progress, saying where it stopped.

A collective that never completes (another process died or hangs, a lost
network link, a runtime bug) blocks every process inside the runtime with no
error and no output, and a pod job then hangs until someone notices. The
loop reports each completed train step, eval batch and checkpoint save with
`beat`; when none comes for `timeout_seconds`, a daemon thread writes the
stack of every Python thread to stderr (faulthandler), then one line naming
the phase and the step, and ends the process with status 124 (as `timeout`
does). launch/local.sh and srun then stop the other processes.

Time the process spends suspended (Ctrl-Z then `fg`, SIGSTOP then SIGCONT,
SLURM's `scontrol suspend`, gang scheduling) or the machine asleep is not a
stall: the watchdog's thread wakes every few seconds, and a wake-up that comes
far later than asked means the process was not running; that time is taken
off the idle time.

Compiling is not a stall: JAX marks the start and end of each tracing,
lowering and XLA compilation (jax.monitoring events), and while one runs the
stall timer waits for COMPILE_SECONDS instead (or the timeout, if longer). A
large model's first compilation legitimately takes many minutes; the bound
stays finite because a compilation can also wait on storage (the compilation
cache in a bucket) and then hang like anything else.

The checkpoints already saved are kept; one being written is left unfinished
and ignored by the next run.
"""

import faulthandler
import os
import sys
import tempfile
import threading
import time

from jax import monitoring

EXIT_STATUS = 124
# The longest a single compilation may take before it counts as a stall.
COMPILE_SECONDS = 3600.0
# JAX records each as a scalar (its start time) when it starts and as a
# duration when it ends.
_COMPILE_EVENTS = frozenset({
    '/jax/core/compile/jaxpr_trace_duration',
    '/jax/core/compile/jaxpr_to_mlir_module_duration',
    '/jax/core/compile/backend_compile_duration'})


class Watchdog:
  """A context manager around the loop; `timeout_seconds` <= 0 turns it off."""

  def __init__(self, timeout_seconds: float,
               compile_seconds: float = COMPILE_SECONDS):
    self.timeout_seconds = timeout_seconds
    self.compile_seconds = max(compile_seconds, timeout_seconds)
    self._where = 'starting'
    self._last = time.monotonic()
    self._lock = threading.Lock()
    self._compiling: list[str] = []  # What is being compiled, innermost last.
    self._done = threading.Event()
    self._thread = None

  def beat(self, where: str):
    """Progress was made; `where` says what the run is doing now, e.g.
    'training step 31 of 468'.

    Args:
      where: what the run is doing now, named in the message of a stall.
    """
    self._where, self._last = where, time.monotonic()

  def _compile_started(self, event: str, value, **kwargs):
    del value
    if event in _COMPILE_EVENTS:
      with self._lock:
        self._compiling.append(str(kwargs.get('fun_name', 'a function')))
        self._last = time.monotonic()

  def _compile_ended(self, event: str, duration, **kwargs):
    del duration, kwargs
    if event in _COMPILE_EVENTS:
      with self._lock:
        if self._compiling:
          self._compiling.pop()
        self._last = time.monotonic()  # The time after it counts again.

  def __enter__(self):
    self._last = time.monotonic()
    if self.timeout_seconds > 0:
      monitoring.register_scalar_listener(self._compile_started)
      monitoring.register_event_duration_secs_listener(self._compile_ended)
      self._thread = threading.Thread(target=self._watch, daemon=True,
                                      name='stall watchdog')
      self._thread.start()
    return self

  def __exit__(self, *exc_info):
    self._done.set()
    if self._thread is not None:
      self._thread.join()
      monitoring.unregister_scalar_listener(self._compile_started)
      monitoring.unregister_event_duration_listener(self._compile_ended)

  def _watch(self):
    interval = min(self.timeout_seconds / 4, 5.0)
    previous = time.monotonic()
    while not self._done.wait(interval):
      now = time.monotonic()
      late = now - previous - interval
      if late > max(interval, 1.0):  # Suspended, not stalled, meanwhile.
        self._last = min(self._last + late, now)
      previous = now
      with self._lock:
        compiling = self._compiling[-1] if self._compiling else None
        idle = now - self._last
      if idle >= (self.compile_seconds if compiling else
                  self.timeout_seconds):
        self._stop(idle, compiling)

  def _stop(self, idle: float, compiling: str | None):
    where = self._where
    setting = f'--config.stall_timeout_seconds={self.timeout_seconds:g}'
    if compiling:
      where = f'compiling {compiling} ({where})'
      setting = (f'a compilation may take {self.compile_seconds:g} s, or '
                 f'{setting} if longer')
    if 'checkpoint' in where and not compiling:
      # Waiting on storage (an unreachable bucket, a hung disk): one line;
      # the stacks, which show only orbax waiting, go to a file.
      with tempfile.NamedTemporaryFile('w', prefix='stalled-', suffix='.txt',
                                       delete=False) as stacks:
        faulthandler.dump_traceback(file=stacks, all_threads=True)
      sys.stderr.write(
          f'error: stalled in {where}: no progress for {idle:.0f} s '
          f'({setting}): the storage does not answer. The checkpoints saved '
          'so far are kept; run the same command again to resume once it '
          f'does (every thread\'s stack: {stacks.name}).\n')
    else:
      sys.stderr.write(f'No progress for {idle:.0f} s in {where}; the stack '
                       'of every thread follows.\n')
      sys.stderr.flush()
      faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
      sys.stderr.write(
          f'error: stalled in {where}: no progress for {idle:.0f} s '
          f'({setting}), so the run was stopped; the stacks above show where '
          'each thread waited. The checkpoints saved so far are kept.\n')
    sys.stderr.flush()
    os._exit(EXIT_STATUS)  # The main thread is blocked: no clean way out.

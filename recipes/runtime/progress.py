"""Progress of long work in the log, in a line of our own at a sensible
interval: how far (and which epoch), how fast, and the time left
(`Progress`); or, for work that cannot be counted (compiling), what it is
and how long it has taken so far (`phase`).

step 1,300/5,000 (26%, epoch 2.6/10) · 41.3 steps/s · 5,286 images/s · ETA 1m30s

The first line comes a few seconds in, so that a user sees the work is
alive, then one every EVERY_SECS: a short run gets one or two, a long one a
line per screen's glance.
"""

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from absl import logging

FIRST_SECS = 5.0  # The first line, this long after the work started.
EVERY_SECS = 20.0  # Then one line every this long.


def duration(seconds: float) -> str:
  """`seconds` as 45s, 1m32s, 2h05m or 3d04h: two units at most.

  Args:
    seconds: a length of time, >= 0.

  Returns:
    The text; under ten seconds with a tenth (3.2s).
  """
  if seconds < 10:
    return f'{seconds:.1f}s'
  seconds = round(seconds)
  minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
  if seconds < 60:
    return f'{seconds}s'
  if seconds < 3600:
    return f'{minutes}m{seconds % 60:02d}s'
  if seconds < 86400:
    return f'{hours}h{minutes % 60:02d}m'
  return f'{days}d{hours % 24:02d}h'


def _rate(value: float) -> str:
  """5,290 or 41.3: a tenth only where it tells."""
  return f'{value:,.0f}' if value >= 100 else f'{value:.1f}'


class Progress:
  """Lines of progress through `total` units of work, written by `write`.

  The rates count from the first `update`, and leave out the time spent in
  `paused` blocks: the first step's compilation, evaluations and checkpoint
  saves are not training, so the ETA is that of the work left.
  """

  def __init__(self, total: int, start: int = 0, *, label: str = 'step',
               unit: str = 'steps', per_unit: Sequence[tuple[str, int]] = (),
               per_epoch: int = 0, first: str = '',
               write: Callable[[str], None] = logging.info,
               clock: Callable[[], float] = time.monotonic):
    """Writes nothing yet.

    Args:
      total: the units of work in all (e.g. the run's last step).
      start: the units done before this process began (a resumed run's).
      label: the word before the count: 'step' in `step 1,200/5,000`.
      unit: the rate's unit: 'steps' in `41.3 steps/s`.
      per_unit: more rates, as (name, how many per unit): ('images', the
        global batch size) gives `5,290 images/s`.
      per_epoch: units in an epoch, to show the epoch; 0: none.
      first: if given, the first update writes a line saying how long the
        first unit took, e.g. 'the first step (compiling it)'.
      write: where the lines go (a log function, print to stderr...).
      clock: seconds, monotonic (a test's own clock).
    """
    self.total, self.start, self.done = total, start, start
    self._label, self._unit, self._per_unit = label, unit, tuple(per_unit)
    self._per_epoch, self._first = per_epoch, first
    self._write, self._clock = write, clock
    self._created = clock()
    self._paused = 0.0  # Seconds in `paused` blocks so far.
    # (units done, clock, seconds paused) at the first update and the last.
    self._first_update = self._last_update = None
    self._next_line = 0.0

  def update(self, done: int):
    """`done` units are done; writes a line if one is due.

    Args:
      done: all the units done so far (e.g. the step just run).
    """
    self.done = done
    now = self._clock()
    self._last_update = (done, now, self._paused)
    if self._first_update is None:
      self._first_update = self._last_update
      self._next_line = now + FIRST_SECS
      if self._first:
        self._write(f'{self._position()} · {self._first} took '
                    f'{duration(now - self._created - self._paused)}')
    elif now >= self._next_line and done < self.total:
      self._next_line = now + EVERY_SECS
      self._write(self.line())

  @contextlib.contextmanager
  def paused(self) -> Iterator[None]:
    """A block whose time the rates leave out."""
    began = self._clock()
    try:
      yield
    finally:
      self._paused += self._clock() - began

  def rate(self) -> float:
    """Units per second from the first update to the last, pauses left
    out; 0 before it can be measured."""
    if self._first_update is None:
      return 0.0
    (first, since, paused), (last, until, paused_until) = (
        self._first_update, self._last_update)
    seconds = until - since - (paused_until - paused)
    return (last - first) / seconds if seconds > 0 else 0.0

  def rates(self) -> str:
    """`41.3 steps/s · 5,290 images/s`: the rate, and the others."""
    rate = self.rate()
    return ' · '.join(f'{_rate(rate * n)} {name}/s' for name, n in (
        (self._unit, 1), *self._per_unit))

  def line(self) -> str:
    """Where the work is, how fast it goes, and the time left: the
    module's example."""
    rate = self.rate()
    eta = (duration((self.total - self.done) / rate) if rate else
           'not known yet')
    return f'{self._position()} · {self.rates()} · ETA {eta}'

  def _position(self) -> str:
    where = f'{100 * self.done // max(self.total, 1)}%'
    if self._per_epoch:
      epochs = self.total / self._per_epoch  # A short run: a fraction.
      epochs = (f'{epochs:.2g}' if epochs < 0.05 else
                f'{epochs:.1f}'.removesuffix('.0'))
      where += f', epoch {self.done / self._per_epoch:.1f}/{epochs}'
    return f'{self._label} {self.done:,}/{self.total:,} ({where})'


@contextlib.contextmanager
def phase(what: str, write: Callable[[str], None] = logging.info,
          every: float = EVERY_SECS) -> Iterator[None]:
  """Writes `what` (e.g. 'Compiling the train step at batch 1024'), then
  every `every` seconds until the block ends, how long it has taken so far:
  for work that says nothing of its own progress.

  Args:
    what: the work, as a sentence's beginning.
    write: where the lines go.
    every: seconds between lines.
  """
  write(f'{what}...')
  began = time.monotonic()
  finished = threading.Event()

  def tell():
    while not finished.wait(every):
      write(f'{what}: {duration(time.monotonic() - began)} so far')

  teller = threading.Thread(target=tell, daemon=True, name='progress')
  teller.start()
  try:
    yield
  finally:
    finished.set()
    teller.join()

"""The progress lines of training, compiling and preparing data: their
shape, when they come, and rates and ETAs that leave out the first step's
compilation and the pauses (a clock of the test's own)."""

import threading

import pytest

from recipes.runtime import progress


class Clock:
  """Seconds that pass only when the test says so."""

  def __init__(self):
    self.now = 1000.0

  def __call__(self) -> float:
    return self.now


@pytest.mark.parametrize('seconds, text', [
    (0, '0.0s'), (3.24, '3.2s'), (45.4, '45s'), (59.6, '1m00s'),
    (92, '1m32s'), (3599, '59m59s'), (7500, '2h05m'), (3 * 86400 + 4 * 3600,
                                                       '3d04h')])
def test_durations_are_short(seconds, text):
  assert progress.duration(seconds) == text


def _training(clock, lines, **kwargs):
  return progress.Progress(
      5000, per_unit=[('images', 128)], per_epoch=500,
      first='the first step (compiling it)', write=lines.append, clock=clock,
      **kwargs)


def test_a_training_line_says_where_how_fast_and_when_it_ends():
  clock, lines = Clock(), []
  steps = _training(clock, lines)
  clock.now += 90  # Compiling the first step.
  steps.update(1)
  assert lines == ['step 1/5,000 (0%, epoch 0.0/10) · the first step '
                   '(compiling it) took 1m30s']
  for step in range(2, 1202):  # 40 steps/s from here on.
    clock.now += 1 / 40
    steps.update(step)
  # 1,200 steps in 30 s: 40 steps/s, 5,120 images/s, 3,799 steps left.
  assert steps.line() == ('step 1,201/5,000 (24%, epoch 2.4/10) · 40.0 '
                          'steps/s · 5,120 images/s · ETA 1m35s')


def test_lines_come_early_then_every_twenty_seconds_and_not_at_the_end():
  clock, lines = Clock(), []
  steps = _training(clock, lines)
  written = {}
  for step in range(1, 5001):  # 1 step/s after a compile of 10 s.
    clock.now += 10 if step == 1 else 1
    steps.update(step)
    written.setdefault(len(lines), step)
  assert list(written.values())[:4] == [1, 6, 26, 46]  # 5 s, then 20 s.
  assert len(lines) == 1 + 1 + (4999 - 5) // 20
  assert not lines[-1].startswith('step 5,000/')  # The summary says that.


def test_pauses_and_the_first_step_are_not_in_the_rate():
  clock, lines = Clock(), []
  steps = _training(clock, lines, start=1000)  # A resumed run.
  with steps.paused():  # An evaluation interrupted before the stop.
    clock.now += 50
  clock.now += 30
  steps.update(1001)
  assert lines[-1].endswith('took 30s')
  clock.now += 10
  steps.update(1101)
  with steps.paused():  # An evaluation, then a save.
    clock.now += 100
  clock.now += 10
  steps.update(1201)
  assert steps.rate() == pytest.approx(10.0)
  with steps.paused():  # The final one's time is not counted either.
    clock.now += 100
  assert steps.rates() == '10.0 steps/s · 1,280 images/s'
  assert steps.line().endswith('ETA 6m20s')  # 3,799 steps left at 10/s.


def test_before_a_rate_is_known_the_eta_says_so():
  steps = progress.Progress(70_000, label='examples', unit='examples',
                            write=lambda line: None, clock=Clock())
  assert steps.line() == ('examples 0/70,000 (0%) · 0.0 examples/s · '
                          'ETA not known yet')


def test_a_phase_says_what_it_is_then_how_long_so_far():
  lines, ticked = [], threading.Event()

  def write(line):
    lines.append(line)
    if len(lines) == 3:
      ticked.set()

  with progress.phase('Compiling the train step', write, every=0.01):
    assert ticked.wait(10)
  assert lines[0] == 'Compiling the train step...'
  assert lines[1].startswith('Compiling the train step: ')
  assert lines[1].endswith('s so far')
  count = len(lines)
  ticked.wait(0.05)
  assert len(lines) == count  # None after the block.


def test_a_run_shorter_than_an_epoch_shows_its_fraction():
  """A 20-step run of 1,174 steps an epoch is 0.017 of one, not '0'."""
  for total, shown in ((20, '0.017'), (600, '0.5'), (11_740, '10')):
    steps = progress.Progress(total, per_epoch=1174, write=lambda _: None)
    steps.update(11)
    assert f'epoch 0.0/{shown})' in steps.line(), steps.line()

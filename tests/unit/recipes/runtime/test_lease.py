"""A workdir's lease: on a local disk a free one is taken at once and
atomically (runs started together get it once); a lease left by a killed
run is taken over after the wait for a rival."""

import json
import os
import socket
import threading
import time

import pytest

from recipes.runtime import lease, storage


@pytest.fixture(name='waits')
def _waits(monkeypatch):
  """The seconds each acquire slept to let a rival write (none slept)."""
  slept = []
  monkeypatch.setattr(time, 'sleep', slept.append)
  return slept


def test_runs_started_together_get_a_free_lease_once_without_waiting(
    tmp_path, waits):
  racers = 8
  leases = [lease._Lease(tmp_path, lease.TRAINING) for _ in range(racers)]
  together = threading.Barrier(racers)
  refusals = [None] * racers

  def take(i):
    together.wait()
    refusals[i] = leases[i].acquire()

  threads = [threading.Thread(target=take, args=(i,)) for i in range(racers)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  winners = [i for i, refused in enumerate(refusals) if refused is None]
  assert len(winners) == 1, refusals
  for refused in refusals:
    assert refused is None or refused.startswith(
        'another run holds the workdir: process '), refused
  held = json.loads((tmp_path / lease.FILE_NAME).read_text())
  assert held['run'] == leases[winners[0]].mine['run']
  assert os.listdir(tmp_path) == [lease.FILE_NAME]  # Nothing else left.
  assert waits == []
  leases[winners[0]].release()
  assert os.listdir(tmp_path) == []


def test_a_killed_runs_lease_is_taken_over_after_the_wait(tmp_path, waits):
  # Written by a process of this host that no longer exists.
  (tmp_path / lease.FILE_NAME).write_text(json.dumps(dict(
      run='killed', host=socket.gethostname(), pid=2**22 + 1,
      started=0, renewed=time.time())))
  taken = lease._Lease(tmp_path, lease.TRAINING)
  assert taken.acquire() is None
  assert waits == [lease.VERIFY_SECONDS]
  held = json.loads((tmp_path / lease.FILE_NAME).read_text())
  assert held['run'] == taken.mine['run']
  taken.release()


def test_an_unreadable_lease_is_replaced_after_the_wait(tmp_path, waits):
  (tmp_path / lease.FILE_NAME).write_text('{"run": "half-writ')
  taken = lease._Lease(tmp_path, lease.TRAINING)
  assert taken.acquire() is None
  assert waits == [lease.VERIFY_SECONDS]
  taken.release()


def test_create_whole_writes_only_a_new_file_and_leaves_nothing_beside_it(
    tmp_path):
  file = storage.path(tmp_path / 'lease')
  assert storage.create_whole(file, 'first') is True
  assert storage.create_whole(file, 'second') is False
  assert file.read_text() == 'first'
  assert os.listdir(tmp_path) == ['lease']
  # A bucket has no atomic create here: nothing is written there.
  assert storage.create_whole(storage.path('gs://bucket/lease'), 'x') is None

"""One training run per workdir: a lease file that a second run respects.

A job submitted twice, or the same command started in two terminals, would
have two runs write checkpoints and config.json into one workdir; one of them
then fails for a wrong reason, and the workdir's config no longer describes
its checkpoints. So process 0 of a training run holds `WORKDIR/run.lease`:
who holds it (a run id, host, process id, start time) and when it was last
renewed. A background thread renews it every RENEW_SECONDS. A run that finds
a lease renewed less than STALE_SECONDS ago stops at once with one line
naming the other run, before it writes anything; a lease older than that is
left by a run that was killed and is taken over, as is one of a process on
this host that no longer exists, so a restart after a kill is never stuck.

The file goes through recipes.runtime.storage, so this works on local disks
and in buckets alike. Two runs starting within the same second could both
find no lease: each writes its own, waits VERIFY_SECONDS and reads it back,
and the one whose lease was replaced stops.
"""

import contextlib
import datetime
import json
import os
import socket
import threading
import time
import uuid

import jax
from absl import logging
from jax.experimental import multihost_utils

from recipes.runtime import storage
from recipes.runtime.errors import UserError

FILE_NAME = 'run.lease'
RENEW_SECONDS = 30.0
STALE_SECONDS = 120.0
VERIFY_SECONDS = 1.0


def _read(path) -> dict | None:
  try:
    return json.loads(path.read_text())
  except FileNotFoundError:
    return None
  except (ValueError, OSError) as e:  # Garbled: as if none were held.
    logging.warning('Ignoring the unreadable lease %s (%s).', path, e)
    return None


def _pid_is_gone(lease: dict) -> bool:
  """Whether the lease's process is known not to exist: on this host only."""
  if lease.get('host') != socket.gethostname():
    return False
  try:
    os.kill(int(lease['pid']), 0)
  except ProcessLookupError:
    return True
  except (PermissionError, KeyError, ValueError, TypeError):
    return False
  return False


def held_by_another(lease: dict | None, now: float) -> bool:
  """Whether `lease` (as read from a workdir) belongs to a live run.

  Args:
    lease: the lease file's contents, or None where there is none.
    now: the current time (seconds since the epoch).

  Returns:
    True when it was renewed less than STALE_SECONDS ago by a process that
    may still exist.
  """
  if not lease:
    return False
  age = now - float(lease.get('renewed', 0))
  return age < STALE_SECONDS and not _pid_is_gone(lease)


def _describe(lease: dict, path, now: float) -> str:
  started = datetime.datetime.fromtimestamp(float(lease.get('started', 0)))
  return (f'another run holds the workdir: process {lease.get("pid")} on '
          f'host {lease.get("host")}, started {started:%Y-%m-%d %H:%M:%S}, '
          f'alive {now - float(lease.get("renewed", 0)):.0f} s ago ({path}). '
          'Wait for it to end or stop it, or use another --workdir; a lease '
          f'not renewed for {STALE_SECONDS:.0f} s is taken over.')


class _Lease:
  """Process 0's lease, renewed by a daemon thread until released."""

  def __init__(self, path):
    self.path = path
    self.mine = dict(run=uuid.uuid4().hex, host=socket.gethostname(),
                     pid=os.getpid(), started=time.time())
    self._released = threading.Event()
    self._thread = threading.Thread(target=self._renew, daemon=True,
                                    name='workdir lease')

  def _write(self):
    self.path.write_text(json.dumps({**self.mine, 'renewed': time.time()}))

  def acquire(self) -> str | None:
    """Takes the lease; or says why not (another run holds it)."""
    now = time.time()
    found = _read(self.path)
    if held_by_another(found, now):
      return _describe(found, self.path, now)
    if found:
      logging.warning('Taking over the lease of a run that ended without '
                      'releasing it (process %s on host %s).',
                      found.get('pid'), found.get('host'))
    self._write()
    time.sleep(VERIFY_SECONDS)  # A run that started with us writes too.
    found = _read(self.path)
    if found and found.get('run') != self.mine['run']:
      return _describe(found, self.path, time.time())
    self._thread.start()
    return None

  def _renew(self):
    while not self._released.wait(RENEW_SECONDS):
      try:
        self._write()
      except Exception as e:  # pylint: disable=broad-except
        logging.warning('Could not renew the lease %s (%s).', self.path, e)

  def release(self):
    self._released.set()
    if self._thread.is_alive():
      self._thread.join()
    try:
      found = _read(self.path)
      if found and found.get('run') == self.mine['run']:
        self.path.unlink()
    except Exception as e:  # pylint: disable=broad-except
      logging.warning('Could not remove the lease %s (%s).', self.path, e)


@contextlib.contextmanager
def held(workdir: str | os.PathLike):
  """The workdir's lease for the duration of a training run.

  Args:
    workdir: the run's directory (local or a bucket), already created.

  Yields:
    Nothing; the lease is renewed meanwhile and released on exit.

  Raises:
    UserError: on every process, when another live run holds the workdir.
  """
  lease, refused = None, None
  if jax.process_index() == 0:
    lease = _Lease(storage.path(workdir) / FILE_NAME)
    refused = lease.acquire()
  if jax.process_count() > 1:  # Every process stops, or none.
    if multihost_utils.broadcast_one_to_all(refused is not None):
      raise UserError(refused or 'another run holds the workdir (process 0 '
                      'says which).')
  elif refused:
    raise UserError(refused)
  try:
    yield
  finally:
    if lease is not None:
      lease.release()

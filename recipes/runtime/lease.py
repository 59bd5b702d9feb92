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

Other commands that write a directory in steps hold its lease alike, under
another file name (`Holder`): `python -m recipes.data.prepare` holds
DST/prepare.lease (`held_here`, one process).

The file goes through recipes.runtime.storage, so this works on local disks
and in buckets alike. Two runs starting within the same second could both
find no lease. On a local disk the file is created atomically, so one of
them gets it and the other finds it held. In a bucket, and where a stale
lease is taken over, each writes its own, waits VERIFY_SECONDS and reads it
back, and the one whose lease was replaced stops.
"""

import contextlib
import dataclasses
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


@dataclasses.dataclass(frozen=True)
class Holder:
  """What holds a directory's lease: its file there, and the words of the
  line that stops a second one."""

  file_name: str  # In the directory.
  who: str  # 'run': 'another run holds ...'.
  what: str  # The directory as the user knows it: 'the workdir'.
  elsewhere: str  # The other way out: 'use another --workdir'.


TRAINING = Holder('run.lease', 'run', 'the workdir', 'use another --workdir')
FILE_NAME = TRAINING.file_name
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


def _describe(lease: dict, path, now: float, holder: Holder) -> str:
  started = datetime.datetime.fromtimestamp(float(lease.get('started', 0)))
  return (f'another {holder.who} holds {holder.what}: process '
          f'{lease.get("pid")} on host {lease.get("host")}, started '
          f'{started:%Y-%m-%d %H:%M:%S}, alive '
          f'{now - float(lease.get("renewed", 0)):.0f} s ago ({path}). '
          f'Wait for it to end or stop it, or {holder.elsewhere}; a lease '
          f'not renewed for {STALE_SECONDS:.0f} s is taken over.')


class _Lease:
  """One process's lease, renewed by a daemon thread until released."""

  def __init__(self, directory, holder: Holder):
    self.path = storage.path(directory) / holder.file_name
    self.holder = holder
    self.mine = dict(run=uuid.uuid4().hex, host=socket.gethostname(),
                     pid=os.getpid(), started=time.time())
    self._released = threading.Event()
    self._thread = threading.Thread(target=self._renew, daemon=True,
                                    name=holder.file_name)

  def _contents(self) -> str:
    return json.dumps({**self.mine, 'renewed': time.time()})

  def _write(self):
    self.path.write_text(self._contents())

  def acquire(self) -> str | None:
    """Takes the lease; or says why not (another run holds it)."""
    now = time.time()
    found = _read(self.path)
    if not found:
      # Where none is, a local disk creates it atomically: no wait.
      created = storage.create_whole(self.path, self._contents())
      if created:
        self._thread.start()
        return None
      if created is False:  # A run that started with us was quicker.
        now, found = time.time(), _read(self.path)
    if held_by_another(found, now):
      return _describe(found, self.path, now, self.holder)
    if found:
      logging.warning('Taking over the lease of a %s that ended without '
                      'releasing it (process %s on host %s).',
                      self.holder.who, found.get('pid'), found.get('host'))
    self._write()
    time.sleep(VERIFY_SECONDS)  # A run that started with us writes too.
    found = _read(self.path)
    if found and found.get('run') != self.mine['run']:
      return _describe(found, self.path, time.time(), self.holder)
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
    lease = _Lease(workdir, TRAINING)
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


@contextlib.contextmanager
def held_here(directory: str | os.PathLike, holder: Holder):
  """The lease of `directory` for a command of one process (no JAX).

  Args:
    directory: the directory the command writes, already created.
    holder: the lease's file name and the words of its refusal.

  Yields:
    Nothing; the lease is renewed meanwhile and released on exit.

  Raises:
    UserError: another live process holds the directory; it is named.
  """
  lease = _Lease(directory, holder)
  refused = lease.acquire()
  if refused:
    raise UserError(refused)
  try:
    yield
  finally:
    lease.release()

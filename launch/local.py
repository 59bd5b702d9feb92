"""Runs N processes of one command on this machine as one multi-process JAX job.

    launch/local.sh --num_processes=2 --devices_per_process=4 -- \
        python -m recipes.train --config=configs/fashion_mnist_pmap.py --workdir=/tmp/fm

Each process gets JAX_COORDINATOR_ADDRESS (127.0.0.1 and a free port),
JAX_NUM_PROCESSES, JAX_PROCESS_ID and JAX_NUM_CPU_DEVICES in its environment;
the recipe's `recipes/parallel/distributed.py` turns them into
`jax.distributed.initialize(...)`. Every output line is prefixed with its
process index. As soon as one process fails, the others are stopped and the
launcher exits with that process's status; it exits 0 when all succeed.

Ctrl-C or SIGTERM to the launcher is passed on to every process as SIGTERM,
which the recipe turns into a checkpoint and a clean stop; they get
`--grace_seconds` for it before they are killed.

If the launcher itself is killed (SIGKILL, the OOM killer), on Linux every
process is killed with it (see `_killed_with_launcher`), so that no process
trains on unseen. The command should be the process that trains, or `exec`
it: a process it starts in turn is not killed.
"""

import argparse
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


# Gloo (JAX's CPU collectives between processes) prints a line for each new
# group of processes; it tells the user nothing.
_GLOO_NOTICE = re.compile(rb'\[Gloo\] Rank \d+ is connected to \d+ peer ranks')


def _forward(index: int, stream, lock: threading.Lock):
  for line in iter(stream.readline, b''):
    if _GLOO_NOTICE.match(line):
      continue
    with lock:
      sys.stdout.buffer.write(f'[{index}] '.encode() + line)
      sys.stdout.flush()


def _stop(processes, grace_seconds: float = 5.0):
  """SIGTERM every live process group, then SIGKILL what is left."""
  for p in processes:
    if p.poll() is None:
      os.killpg(p.pid, signal.SIGTERM)
  deadline = time.monotonic() + grace_seconds
  for p in processes:
    try:
      p.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
      os.killpg(p.pid, signal.SIGKILL)
      p.wait()


def _killed_with_launcher():
  """A function for Popen's preexec_fn: the child gets SIGKILL when the
  launcher dies (Linux's parent-death signal; None elsewhere).

  SIGKILL, not SIGTERM: nobody is left to kill a process that does not stop
  on SIGTERM (one waiting in a collective, or compiling for minutes before
  the next step boundary), and killing loses nothing saved: checkpoints are
  committed whole and checksummed, and the same command resumes from the
  last one, as after `kill -9` of a single process.
  """
  if not sys.platform.startswith('linux'):
    return None
  prctl = ctypes.CDLL(None, use_errno=True).prctl
  launcher = os.getpid()

  def in_child():
    prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != launcher:  # The launcher died before this line.
      os.kill(os.getpid(), signal.SIGKILL)

  return in_child


def _interrupt(signum, frame):
  del signum, frame
  raise KeyboardInterrupt


# A multi-process JAX run ends on every process together (they leave
# jax.distributed at one barrier): a process that exited 0 while others still
# run this much later left them waiting for it, which JAX ends only after
# minutes.
FINISH_SECONDS = 10.0


def launch(command: list[str], num_processes: int,
           devices_per_process: int, grace_seconds: float = 120.0) -> int:
  # SIGTERM (e.g. from a scheduler) stops the children like Ctrl-C does.
  signal.signal(signal.SIGTERM, _interrupt)
  address = f'127.0.0.1:{_free_port()}'
  lock = threading.Lock()
  processes, threads = [], []
  # The parent-death signal is tied to the thread that starts the child:
  # here the main thread, which lives as long as the launcher.
  preexec_fn = _killed_with_launcher()
  for index in range(num_processes):
    env = {**os.environ, 'JAX_COORDINATOR_ADDRESS': address,
           'JAX_NUM_PROCESSES': str(num_processes),
           'JAX_PROCESS_ID': str(index),
           'JAX_NUM_CPU_DEVICES': str(devices_per_process),
           'PYTHONUNBUFFERED': '1'}
    # A process group per child, so stopping it also stops its children.
    processes.append(subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True, preexec_fn=preexec_fn))
  # The output threads start after the last fork: preexec_fn is safe only
  # while no other thread runs.
  for index, p in enumerate(processes):
    thread = threading.Thread(target=_forward, args=(index, p.stdout, lock),
                              daemon=True)
    thread.start()
    threads.append(thread)

  status, grace, first_done = 0, 5.0, None
  try:
    while True:
      codes = [p.poll() for p in processes]  # Poll all: it sets returncode.
      if all(code is not None for code in codes):
        break
      failed = [(i, code) for i, code in enumerate(codes)
                if code not in (None, 0)]
      if failed:
        index, status = failed[0]
        print(f'[launcher] process {index} exited with status {status}; '
              'stopping the others.', file=sys.stderr, flush=True)
        break
      done = [i for i, code in enumerate(codes) if code == 0]
      if done and first_done is None:
        first_done = time.monotonic()
      if done and time.monotonic() - first_done > FINISH_SECONDS:
        running = [i for i, code in enumerate(codes) if code is None]
        print(f'[launcher] process {done[0]} exited with status 0, but '
              f'process{"es" if len(running) > 1 else ""} '
              f'{", ".join(map(str, running))} still '
              f'run{"" if len(running) > 1 else "s"} '
              f'{FINISH_SECONDS:.0f} s later; stopping '
              f'{"them" if len(running) > 1 else "it"}.',
              file=sys.stderr, flush=True)
        status = 1
        break
      time.sleep(0.1)
  except KeyboardInterrupt:
    print('[launcher] interrupted: asking every process to stop.',
          file=sys.stderr, flush=True)
    grace = grace_seconds
  finally:
    _stop(processes, grace)
    for thread in threads:
      thread.join(timeout=5)
  if status == 0:
    status = next((p.returncode for p in processes if p.returncode), 0)
  return status if status >= 0 else 128 - status


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n')[0],
      usage='launch/local.sh --num_processes=N --devices_per_process=K '
            '-- COMMAND...')
  parser.add_argument('--num_processes', type=int, required=True)
  parser.add_argument('--devices_per_process', type=int, default=1)
  parser.add_argument('--grace_seconds', type=float, default=120.0,
                      help='after Ctrl-C or SIGTERM, how long the processes '
                      'may take to save a checkpoint and stop')
  parser.add_argument('command', nargs=argparse.REMAINDER)
  args = parser.parse_args(argv)
  command = args.command[1:] if args.command[:1] == ['--'] else args.command
  if not command:
    parser.error('give the command to run after --')
  if args.num_processes < 1 or args.devices_per_process < 1:
    parser.error('--num_processes and --devices_per_process must be >= 1')
  return launch(command, args.num_processes, args.devices_per_process,
                args.grace_seconds)


if __name__ == '__main__':
  sys.exit(main())

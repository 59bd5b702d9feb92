"""launch/pod.sh: the gcloud commands it prints with --dry-run, and what it
does against a stand-in gcloud that records its calls, plays a queued
resource's states and a preemption, and runs the workers' shell commands on
this machine (each worker a home directory of its own)."""

import json
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from tests.helpers import ROOT, command_env

pytestmark = pytest.mark.slow  # Every test starts pod.sh.

POD = os.path.join(ROOT, 'launch', 'pod.sh')
SETTINGS = ('--dry-run', '--tpu_name=zoo', '--project=proj',
            '--zone=us-central2-b')
SLICE = ('--accelerator_type=v4-32', '--version=tpu-ubuntu2204-base')
LOCATION = ['--project=proj', '--zone=us-central2-b']


def _dry(*args, **env):
  """Runs pod.sh from a copy in an empty tree, which it must leave as it was
  (no logs/NAME/ from a dry run)."""
  with tempfile.TemporaryDirectory() as root:
    os.mkdir(os.path.join(root, 'launch'))
    pod = shutil.copy(POD, os.path.join(root, 'launch'))
    result = subprocess.run(['bash', pod, *args], capture_output=True,
                            text=True, timeout=30, cwd=root,
                            env=command_env(**{'TMPDIR': '/tmp', **env}))
    assert [(d, sorted(f)) for d, _, f in os.walk(root)] == [
        (root, []), (os.path.dirname(pod), ['pod.sh'])]
  return result


@pytest.mark.parametrize('args, expected', [
    (('create',), 'gcloud compute tpus queued-resources create zoo '
     '--project=proj --zone=us-central2-b --node-id=zoo '
     '--accelerator-type=v4-32 --runtime-version=tpu-ubuntu2204-base --spot'),
    (('create',), 'gcloud compute tpus queued-resources describe zoo '
     '--project=proj --zone=us-central2-b --format=value(state.state)'),
    (('queued',), 'gcloud compute tpus queued-resources create zoo '
     '--project=proj --zone=us-central2-b --node-id=zoo'),
    (('--node_count=4', 'create'), 'gcloud compute tpus queued-resources '
     'create zoo --project=proj --zone=us-central2-b --node-count=4 '
     '--node-prefix=zoo --accelerator-type=v4-32'),
    (('--direct', 'create'), 'gcloud compute tpus tpu-vm create zoo '
     '--project=proj --zone=us-central2-b --accelerator-type=v4-32 '
     '--version=tpu-ubuntu2204-base --spot'),
    (('copy',), 'gcloud compute tpus tpu-vm scp /tmp/jax-model-zoo-zoo.tar.gz'
     ' zoo:jax-model-zoo.tar.gz --project=proj --zone=us-central2-b '
     '--worker=all'),
    (('install',), "pip install -q -e '.[tpu]'"),
    (('stop',), '/tmp/libtpu_lockfile'),
    (('status',), 'logs/run.pid'),
    (('logs',), 'tail -n 50 logs/run.log'),
    (('attach',), 'gcloud compute tpus tpu-vm ssh zoo --project=proj '
     '--zone=us-central2-b --worker=0 --command=cd ~/jax-model-zoo'),
    (('delete',), 'gcloud compute tpus queued-resources delete zoo '
     '--project=proj --zone=us-central2-b --force --quiet'),
    (('--direct', 'delete',), 'gcloud compute tpus tpu-vm delete zoo '
     '--project=proj --zone=us-central2-b --quiet'),
])
def test_dry_run_prints_the_gcloud_commands(args, expected):
  result = _dry(*SETTINGS, *SLICE, '--spot', *args)
  assert result.returncode == 0, result.stderr
  printed = result.stdout.replace('\\', '')
  assert expected in printed
  if args[-1] in ('copy', 'install', 'stop', 'status', 'logs'):
    assert 'tpu-vm ssh zoo' in printed and '--worker=all' in printed


def test_a_dry_run_shows_the_command_once_with_its_workers():
  """Four lines whatever the number of workers: which workers, the ssh
  command with what differs per worker left as N, and the command each
  worker's shell runs, as it reads it (no escapes)."""
  result = _dry(*SETTINGS, '--workers=16', 'run', '--', 'python', '-m',
                'recipes.train', '--config=configs/mnist_pmap.py',
                '--workdir=gs://bucket/run')
  assert result.returncode == 0, result.stderr
  workers, ssh, caption, command = result.stdout.splitlines()
  assert workers == (
      'pod.sh: dry run: the command below runs on 16 workers (TPU VM zoo, '
      '--worker=N, N = 0 to 15), each one\'s output to logs/zoo/worker-N.log '
      'here:')
  assert ssh == ('gcloud compute tpus tpu-vm ssh zoo --project=proj '
                 '--zone=us-central2-b --worker=N --command="$COMMAND"')
  assert caption == 'COMMAND, the same on every worker:'
  assert '\\' not in command
  assert ('export RECIPES_DISTRIBUTED=1 && python -m recipes.train '
          '--config=configs/mnist_pmap.py --workdir=gs://bucket/run ;'
          ) in command
  assert 'setsid nohup' in command
  assert 'gcloud storage cp logs/run.log gs://bucket/run/logs/' in command

  detached = _dry(*SETTINGS, '--detach', 'run', '--', 'python', '-m',
                  'recipes.train').stdout.splitlines()
  assert detached[0] == ('pod.sh: dry run: the command below starts the run '
                         'on every worker (TPU VM zoo, --worker=all) and '
                         'returns:')
  assert detached[1].endswith(' --worker=all --command="$COMMAND"')
  assert len(detached) == 4 and 'setsid nohup' in detached[3]


def test_multislice_addresses_every_worker_of_every_slice():
  run = _dry(*SETTINGS, '--node_count=2', '--workers=2', 'run', '--',
             'python', '-m', 'recipes.train')
  assert run.returncode == 0, run.stderr
  workers, ssh = run.stdout.splitlines()[:2]
  assert ('on 4 workers (TPU VMs zoo-S, S = 0 to 1, --worker=N, N = 0 to 1 '
          'on each), each one\'s output to logs/zoo/slice-S-worker-N.log'
          ) in workers
  assert ssh.startswith('gcloud compute tpus tpu-vm ssh zoo-S '
                        '--project=proj --zone=us-central2-b --worker=N ')
  copy = _dry(*SETTINGS, '--node-count=2', 'copy').stdout.splitlines()
  assert [l.split()[4:6] for l in copy[1:]] == [
      ['scp', '/tmp/jax-model-zoo-zoo.tar.gz'],
      ['scp', '/tmp/jax-model-zoo-zoo.tar.gz'], ['ssh', 'zoo-0'],
      ['ssh', 'zoo-1']]
  assert 'zoo-1:jax-model-zoo.tar.gz' in copy[2]


def test_help_prints_the_usage_only():
  result = _dry('--help')
  assert result.returncode == 0 and result.stderr == ''
  with open(POD, encoding='utf-8') as f:
    header = f.read().split('\nset -')[0].splitlines()[1:]
  assert all(line.startswith('#') for line in header)  # The comment block.
  assert result.stdout.splitlines() == [
      line.removeprefix('#').removeprefix(' ') for line in header]
  assert result.stdout.startswith('TPU VM pods: create, copy the code')
  for setting in ('--node_count=N', '--direct', '--retries=N', '--detach',
                  '--timeout=SECONDS', 'POD_POLL_SECONDS', 'status', 'attach'):
    assert setting in result.stdout


RUN = ('run', '--', 'python', '-m', 'recipes.train')


@pytest.mark.parametrize('args, env, message', [
    (('--dry-run', 'create'), {}, 'no TPU name: pass --tpu_name'),
    (('--dry-run', '--tpu_name=zoo', 'create'), {'GCLOUD': '/nonexistent'},
     'no project: pass --project'),
    (SETTINGS + ('create',), {}, '--accelerator_type needed'),
    (SETTINGS + ('--retries=1',) + RUN, {}, '--accelerator_type needed'),
    (('--tpu_name=zoo', 'create'), {'GCLOUD': '/nonexistent'},
     'gcloud not found'),
    (SETTINGS + ('launch',), {}, 'unknown subcommand launch'),
    (SETTINGS + ('--bogus', 'create'), {}, 'unknown option --bogus'),
    (SETTINGS + ('--retries=-1',) + RUN, {}, "--retries must be a whole "
     "number, 0 or more; got '-1'"),
    (SETTINGS + ('--retries=two',) + RUN, {}, "got 'two'"),
    (SETTINGS + ('--retries',) + RUN, {}, '--retries needs a value'),
    (SETTINGS + ('--node_count=0', 'create'), {}, "--node_count must be a "
     "number of slices, 1 or more; got '0'"),
    (SETTINGS + ('--node-count=1.5', 'create'), {}, "got '1.5'"),
    (SETTINGS + ('--workers=0',) + RUN, {}, '--workers must be'),
    (SETTINGS + ('--timeout=soon', 'create'), {}, '--timeout must be'),
    (SETTINGS + ('create',), {'POD_POLL_SECONDS': '-1'}, 'POD_POLL_SECONDS'),
    (SETTINGS + ('--direct', '--node_count=2', 'create'), {},
     'needs a queued resource: drop --direct'),
    (SETTINGS + ('--detach', '--retries=1') + RUN, {}, 'drop --detach'),
])
def test_bad_input_is_one_error_line(args, env, message):
  result = _dry(*args, **env)
  assert result.returncode == 2
  assert len(result.stderr.splitlines()) == 1, result.stderr
  assert result.stderr.startswith('pod.sh: error: ')
  assert message in result.stderr


# A stand-in for gcloud: appends its arguments to `calls`, keeps the queued
# resource in state.json (`qr`: the states `describe` gives in turn, the last
# one staying), and runs the workers' commands that concern a run here. A run
# started while `preemptions` is not 0 takes the slice away (SUSPENDED); ssh
# to a slice that is not ACTIVE fails as it does when the TPU VMs are gone.
FAKE_GCLOUD = r'''
import fcntl, json, os, shlex, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))
argv = sys.argv[1:]
lock = open(os.path.join(here, 'lock'), 'w')
fcntl.flock(lock, fcntl.LOCK_EX)
with open(os.path.join(here, 'calls'), 'a') as f:
  f.write(shlex.join(argv) + '\n')
with open(os.path.join(here, 'state.json')) as f:
  state = json.load(f)


def save():
  with open(os.path.join(here, 'state.json'), 'w') as f:
    json.dump(state, f)


def flag(name):
  return next(a.split('=', 1)[1] for a in argv if a.startswith(f'--{name}='))


words = [a for a in argv if not a.startswith('--')]
group, verb = words[2:4]
if group == 'queued-resources':
  if verb == 'create':
    if state['qr'] is not None:
      sys.exit('ERROR: (gcloud) already exists')
    state['qr'] = list(state['on_create'])
  elif verb == 'describe':
    if state['qr'] is None:
      sys.exit('ERROR: (gcloud) NOT_FOUND')
    print(state['qr'][0])
    state['qr'] = state['qr'][1:] or state['qr']
  elif verb == 'delete':
    state['qr'] = None
  save()
  sys.exit(0)
if verb == 'describe':
  print(state['workers'])
  sys.exit(0)
if verb != 'ssh':
  sys.exit(0)
command = flag('command')
if 'setsid' in command and state['preemptions']:
  state['preemptions'] -= 1
  state['qr'] = ['SUSPENDED']
  save()
if state['qr'] != ['ACTIVE']:
  sys.exit('ssh: connect to host 10.0.0.2 port 22: Connection refused')
lock.close()
if 'logs/run' not in command or 'sudo' in command:
  sys.exit(0)
worker = flag('worker')
status = 0
for i in range(state['workers']) if worker == 'all' else [int(worker)]:
  home = os.path.join(here, 'workers', words[4], f'w{i}')
  os.makedirs(os.path.join(home, 'jax-model-zoo', '.venv', 'bin'),
              exist_ok=True)
  open(os.path.join(home, 'jax-model-zoo', '.venv', 'bin', 'activate'),
       'a').close()
  # Each worker answers to a name of its own, as TPU VMs do: their runs copy
  # their logs to WORKDIR/logs/run-HOSTNAME.log side by side.
  bin_dir = os.path.join(home, 'bin')
  os.makedirs(bin_dir, exist_ok=True)
  with open(os.path.join(bin_dir, 'hostname'), 'w') as f:
    f.write(f'#!/bin/sh\necho {words[4]}-w{i}\n')
  os.chmod(os.path.join(bin_dir, 'hostname'), 0o755)
  env = {**os.environ, 'HOME': home,
         'PATH': bin_dir + os.pathsep + os.environ['PATH']}
  status = subprocess.run(['bash', '-c', command], env=env).returncode or status
sys.exit(status)
'''


class Fake:
  """pod.sh in a tree of its own, against the stand-in gcloud."""

  def __init__(self, tmp_path: pathlib.Path):
    self.dir = tmp_path / 'gcloud'
    self.dir.mkdir()
    gcloud = self.dir / 'gcloud'
    gcloud.write_text(f'#!{sys.executable}\n{FAKE_GCLOUD}')
    gcloud.chmod(0o755)
    self.tree = tmp_path / 'tree'
    (self.tree / 'launch').mkdir(parents=True)
    self.pod_sh = shutil.copy(POD, self.tree / 'launch')
    self.env = command_env(GCLOUD=str(gcloud), TMPDIR=str(tmp_path),
                           POD_POLL_SECONDS='0.05')
    self.set(qr=['ACTIVE'], on_create=['ACTIVE'], workers=1, preemptions=0)

  def set(self, **state):
    (self.dir / 'state.json').write_text(json.dumps(state))

  def state(self):
    return json.loads((self.dir / 'state.json').read_text())

  def pod(self, *args, timeout=30):
    return subprocess.run(
        ['bash', self.pod_sh, '--tpu_name=zoo', *LOCATION, *SLICE, *args],
        capture_output=True, text=True, timeout=timeout, cwd=self.tree,
        env=self.env)

  def calls(self):
    path = self.dir / 'calls'
    calls = [shlex.split(l) for l in path.read_text().splitlines()]
    path.unlink()
    return calls

  def steps(self):
    """The calls since the last look, in short: group, verb, TPU VM, worker
    and, for ssh, what the command is for."""
    steps = []
    for call in self.calls():
      words = call[2:4] + [w for w in call[4:5] if not w.startswith(('-', '/'))]
      worker = [w for w in call if w.startswith('--worker=')]
      command = ''.join(w for w in call if w.startswith('--command='))
      what = [name for name, part in (
          ('run', 'setsid'), ('copy', 'tar -xzf'), ('install', 'pip install'),
          ('status', 'kill -0'), ('logs', 'tail -n 50 logs')) if part in command]
      steps.append(' '.join(words + worker + what[:1]))
    return steps

  def run_pids(self):
    return [int(p.read_text()) for p in sorted(
        self.dir.glob('workers/*/*/jax-model-zoo/logs/run.pid'))]

  def end_runs(self):
    """Ends what the runs of this test left going, by their process ids."""
    for pid in self.run_pids():
      try:
        with open(f'/proc/{pid}/cmdline', 'rb') as f:
          ours = b'logs/run.status' in f.read()
        if ours and os.getsid(pid) == pid:
          os.killpg(pid, signal.SIGTERM)
      except OSError:  # Ended already.
        pass


@pytest.fixture
def fake(tmp_path):
  fake = Fake(tmp_path)
  yield fake
  fake.end_runs()


WAIT = ['WAITING_FOR_RESOURCES', 'PROVISIONING', 'ACTIVE']
UP = ['queued-resources create zoo'] + ['queued-resources describe zoo'] * 3


def test_create_asks_for_a_queued_resource_and_waits_until_it_is_active(fake):
  fake.set(qr=None, on_create=WAIT, workers=1, preemptions=0)
  result = fake.pod('--spot', 'create')
  assert result.returncode == 0, result.stderr
  calls = fake.calls()
  assert calls[1] == [
      'compute', 'tpus', 'queued-resources', 'create', 'zoo', *LOCATION,
      '--node-id=zoo', '--accelerator-type=v4-32',
      '--runtime-version=tpu-ubuntu2204-base', '--spot']
  assert [c[3] for c in calls] == ['describe', 'create'] + ['describe'] * 3
  assert calls[-1][-1] == '--format=value(state.state)'
  assert result.stdout.splitlines() == [
      'pod.sh: queued resource zoo is WAITING_FOR_RESOURCES; waiting',
      'pod.sh: queued resource zoo is PROVISIONING; waiting',
      'pod.sh: queued resource zoo is ACTIVE']
  # Once more: the request exists, so it is only looked at.
  assert fake.pod('create').returncode == 0
  assert fake.steps() == ['queued-resources describe zoo'] * 2


@pytest.mark.parametrize('states', [['WAITING_FOR_RESOURCES', 'FAILED'],
                                    ['SUSPENDED']])
def test_a_slice_that_will_not_come_up_is_one_error_line(fake, states):
  fake.set(qr=None, on_create=states, workers=1, preemptions=0)
  result = fake.pod('create')
  assert result.returncode == 2
  assert result.stderr.splitlines() == [
      f'pod.sh: error: queued resource zoo is {states[-1]}, it will not come '
      "up: see 'gcloud compute tpus queued-resources describe zoo', then "
      'pod.sh delete and pod.sh create to ask again (another zone, or spot '
      'capacity, may have room)']


def test_the_wait_ends_at_the_timeout(fake):
  fake.set(qr=None, on_create=['WAITING_FOR_RESOURCES'], workers=1,
           preemptions=0)
  start = time.monotonic()
  result = fake.pod('--timeout=1', 'create')
  assert result.returncode == 2 and time.monotonic() - start < 5
  assert result.stderr.splitlines() == [
      'pod.sh: error: queued resource zoo still WAITING_FOR_RESOURCES after '
      '1 s; the request stays queued: pod.sh create waits again, pod.sh '
      'delete withdraws it']


def test_a_preempted_run_runs_again_on_a_new_slice(fake):
  fake.set(qr=None, on_create=WAIT, workers=1, preemptions=1)
  assert fake.pod('--spot', 'create').returncode == 0
  fake.calls()
  result = fake.pod('--spot', '--retries=2', *RUN[:2], 'echo', 'trained')
  assert result.returncode == 0, result.stdout + result.stderr
  assert fake.steps() == [
      'tpu-vm describe zoo',  # The workers.
      'tpu-vm ssh zoo --worker=0 run',  # Preempted.
      'queued-resources describe zoo',  # SUSPENDED: asked for again.
      'queued-resources delete zoo', *UP,
      'tpu-vm scp --worker=all', 'tpu-vm ssh zoo --worker=all copy',
      'tpu-vm ssh zoo --worker=all install',
      'tpu-vm ssh zoo --worker=0 run']
  assert [l for l in result.stdout.splitlines() if 'retry' in l] == [
      'pod.sh: retry 1 of 2: queued resource zoo is SUSPENDED (preempted); '
      'asking for it again, then copy, install and the same command']
  assert 'trained' in result.stdout.splitlines()
  assert result.stdout.splitlines()[-1].startswith(
      'pod.sh: all 1 workers finished')
  # `delete` removes the queued resource (and with it its TPU VMs).
  assert fake.pod('delete').returncode == 0
  assert fake.calls() == [['compute', 'tpus', 'queued-resources', 'delete',
                           'zoo', *LOCATION, '--force', '--quiet']]
  assert fake.state()['qr'] is None


def test_without_retries_a_preempted_run_is_one_error_line(fake):
  fake.set(qr=['ACTIVE'], on_create=['ACTIVE'], workers=1, preemptions=1)
  result = fake.pod(*RUN)
  assert result.returncode == 1
  errors = [l for l in result.stderr.splitlines() if 'error' in l]
  assert errors == [
      'pod.sh: error: queued resource zoo is SUSPENDED (preempted) and no '
      'retries are left: pod.sh run --retries=N asks for it again and runs '
      'again']


def test_a_command_that_fails_on_a_live_slice_is_not_run_again(fake):
  fake.set(qr=['ACTIVE'], on_create=['ACTIVE'], workers=2, preemptions=0)
  result = fake.pod('--retries=3', *RUN[:2], 'sh', '-c', 'echo failing; exit 3')
  assert result.returncode == 1
  assert result.stderr.splitlines()[-1].startswith(
      'pod.sh: workers failed: worker-0 worker-1 (logs in ')
  assert 'retry' not in result.stdout
  assert sorted(fake.steps()) == [
      'queued-resources describe zoo', 'tpu-vm describe zoo',
      'tpu-vm ssh zoo --worker=0 run', 'tpu-vm ssh zoo --worker=1 run']
  for worker in (0, 1):
    log = fake.tree / 'logs' / 'zoo' / f'worker-{worker}.log'
    assert log.read_text().splitlines() == ['failing']


def test_a_detached_run_goes_on_and_status_logs_attach_follow_it(fake,
                                                                 tmp_path):
  fake.set(qr=['ACTIVE'], on_create=['ACTIVE'], workers=2, preemptions=0)
  workdir = tmp_path / 'workdir'
  script = 'echo step one; sleep 3; echo step two'
  start = time.monotonic()
  result = fake.pod('--detach', *RUN[:2], 'sh', '-c', script, 'sh',
                    f'--workdir={workdir}')
  assert result.returncode == 0, result.stderr
  assert time.monotonic() - start < 3  # Back before the command ended.
  assert 'started on every worker of zoo' in result.stdout
  # Each worker's run leads a session of its own, apart from pod.sh's.
  pids = fake.run_pids()
  assert len(pids) == 2 and all(os.getsid(pid) == pid for pid in pids)

  status = fake.pod('status').stdout.splitlines()
  assert status[0] == 'pod.sh: queued resource zoo: ACTIVE'
  assert [l.split(': ')[-1] for l in status[1:]] == ['running'] * 2
  again = fake.pod('--detach', *RUN[:2], 'true')
  assert again.returncode == 1 and 'a run still goes on' in again.stderr

  attach = fake.pod('attach')  # Until the run ends.
  assert attach.returncode == 0, attach.stderr
  assert attach.stdout.splitlines() == [
      'step one', 'step two', 'pod.sh: the run ended, exit status 0']
  status = fake.pod('status').stdout.splitlines()
  assert [l.split(': ')[-1] for l in status[1:]] == [
      'finished, exit status 0'] * 2
  logs = fake.pod('logs').stdout.splitlines()
  assert [l.split(': ', 1)[1] for l in logs] == ['step one', 'step two'] * 2
  # Each worker's log, copied into the workdir at the end under its name.
  copied = sorted((workdir / 'logs').iterdir())
  assert [path.name for path in copied] == ['run-zoo-w0.log', 'run-zoo-w1.log']
  for path in copied:
    assert path.read_text().splitlines() == ['step one', 'step two']


def test_ctrl_c_leaves_an_attached_run_going(fake):
  fake.set(qr=['ACTIVE'], on_create=['ACTIVE'], workers=1, preemptions=0)
  pod = subprocess.Popen(
      ['bash', fake.pod_sh, '--tpu_name=zoo', *LOCATION, *RUN[:2], 'sh', '-c',
       'echo started; sleep 5'], stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True, cwd=fake.tree, env=fake.env)
  assert pod.stdout.readline() == 'started\n'  # Shown as it comes.
  pod.send_signal(signal.SIGINT)
  _, stderr = pod.communicate(timeout=10)
  assert pod.returncode == 130
  assert stderr.splitlines() == [
      'pod.sh: the run goes on on the workers: pod.sh attach follows it, '
      'pod.sh stop ends it']
  [pid] = fake.run_pids()
  os.kill(pid, 0)  # Still there.

"""launch/slurm.sbatch run by a real SLURM (.ci/slurm_setup.sh: CPU nodes
cpu1 and cpu2, and nodes gpu2 and gpu8 whose GPUs are GRES entries backed by
dummy devices, all on this machine): CPU jobs of one and of two processes
train alike, each GPU layout gives every process GPUs of its own, and
`scancel` stops a job with a checkpoint within seconds, as CANCELLED, and the
resubmitted job ends bitwise where an uninterrupted one does."""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from tests.helpers import ROOT, command_env, read_scalars, saved_params
from tests.idx_files import write_fashion_mnist

SCRIPT = os.path.join(ROOT, 'launch', 'slurm.sbatch')
NODES = ('cpu1', 'cpu2', 'gpu2', 'gpu8')
JOB_MINUTES = 3  # Each job's --time: SLURM ends a hung job.
JOB_TIMEOUT = 240  # Seconds a test waits for one job (queueing included).
pytestmark = pytest.mark.slow

RECIPE = ('--config.batch_size=16', '--config.eval_batch_size=16',
          '--config.lr_schedule=constant', '--config.log_every_steps=4')


def _node_states() -> tuple[dict[str, str], str]:
  """{node: compact state} from sinfo, and what it said on stderr."""
  try:
    result = subprocess.run(['sinfo', '-h', '-N', '-o', '%N %t'],
                            capture_output=True, text=True, timeout=20)
  except subprocess.TimeoutExpired:
    return {}, 'sinfo did not answer in 20 s'
  return (dict(line.split() for line in result.stdout.splitlines()),
          result.stderr.strip())


def _missing_cluster(wait_seconds: float = 60) -> str | None:
  """Why the test cluster cannot be used, or None. A node between two jobs
  (of another test worker) may pass through other states: wait for it."""
  if not shutil.which('sbatch'):
    return 'sbatch is not installed'
  up = ('idle', 'mix', 'alloc', 'comp')  # Free, or running jobs.
  deadline = time.monotonic() + wait_seconds
  while True:
    states, stderr = _node_states()
    down = [f'{node} ({states.get(node, "missing")})' for node in NODES
            if states.get(node) not in up]
    if not down:
      return None
    if time.monotonic() > deadline:
      return f'nodes {", ".join(down)} are not up ({stderr})'
    time.sleep(1)


@pytest.fixture(scope='module', autouse=True)
def slurm():
  reason = _missing_cluster()
  if reason:
    message = (f'no SLURM test cluster: {reason}; .ci/slurm_setup.sh (as '
               'root) starts one')
    if os.environ.get('TESTS_REQUIRE_SLURM') == '1':  # Set by .ci/run.
      pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  path = tmp_path_factory.mktemp('data')
  write_fashion_mnist(str(path), num_train=64, num_test=20)
  return str(path)


def _submit(tmp_path, sbatch_args, recipe_args=(), **env) -> str:
  """Submits the script as a user does; returns the job id. `env` is the
  submitting shell's (CONFIG, WORKDIR, ...)."""
  env = command_env(**{'CONFIG': 'configs/fashion_mnist_pmap.py',
                       'VENV': sys.prefix, **env})
  env = {k: v for k, v in env.items() if not k.startswith('SLURM_')}
  result = subprocess.run(
      ['sbatch', '--parsable', f'--chdir={ROOT}', f'--time={JOB_MINUTES}',
       f'--output={tmp_path}/slurm-%j.out', *sbatch_args, SCRIPT,
       *recipe_args], env=env, capture_output=True, text=True, timeout=30)
  assert result.returncode == 0, result.stderr
  return result.stdout.strip().split(';')[0]


def _output(tmp_path, job: str) -> str:
  try:
    with open(tmp_path / f'slurm-{job}.out', encoding='utf-8') as f:
      return f.read()
  except FileNotFoundError:
    return ''


def _job(job: str) -> dict[str, str]:
  """scontrol's fields of a job (kept for 5 minutes after it ended)."""
  line = subprocess.run(['scontrol', '-o', 'show', 'job', job],
                        capture_output=True, text=True, timeout=20).stdout
  return dict(re.findall(r'(\w+)=(\S*)', line))


def _running(job: str) -> bool:
  """Pending, running or completing (processes left)."""
  return bool(subprocess.run(['squeue', '-h', '-j', job, '-o', '%T'],
                             capture_output=True, text=True,
                             timeout=20).stdout.strip())


def _wait(tmp_path, *jobs: str) -> list[dict[str, str]]:
  """Waits for the jobs to end; cancels them and fails after JOB_TIMEOUT."""
  deadline = time.monotonic() + JOB_TIMEOUT
  while any(_running(job) for job in jobs):
    if time.monotonic() > deadline:
      subprocess.run(['scancel', *jobs], timeout=20, check=False)
      pytest.fail(f'jobs {jobs} still running after {JOB_TIMEOUT} s:\n' +
                  '\n'.join(_output(tmp_path, job)[-3000:] for job in jobs))
    time.sleep(0.3)
  return [_job(job) for job in jobs]


def _wait_for_output(tmp_path, job: str, text: str):
  deadline = time.monotonic() + JOB_TIMEOUT
  while text not in _output(tmp_path, job):
    if time.monotonic() > deadline or not _running(job):
      subprocess.run(['scancel', job], timeout=20, check=False)
      pytest.fail(f'no {text!r} from job {job}:\n' +
                  _output(tmp_path, job)[-3000:])
    time.sleep(0.3)


def _tasks(output: str) -> set[str]:
  """The task numbers that srun --label put before the lines."""
  return set(re.findall(r'^ *(\d+): ', output, re.MULTILINE))


def _assert_completed(state, output):
  assert (state['JobState'], state['ExitCode']) == ('COMPLETED', '0:0'), (
      output[-3000:])


def test_one_and_two_processes_train_alike(data_dir, tmp_path):
  """One process of 4 CPU devices, and PER_NODE=1 on 2 nodes (over
  --ntasks-per-node=2): 2 processes of 2 devices."""
  recipe = (f'--config.data_dir={data_dir}', *RECIPE,
            '--config.num_train_steps=24', '--config.eval_every_steps=12')
  one = _submit(tmp_path, ['--nodes=1'], recipe,
                WORKDIR=str(tmp_path / 'one'), JAX_NUM_CPU_DEVICES='4')
  two = _submit(tmp_path, ['--nodes=2', '--ntasks-per-node=2'], recipe,
                WORKDIR=str(tmp_path / 'two'), JAX_NUM_CPU_DEVICES='2',
                PER_NODE='1')
  states = _wait(tmp_path, one, two)
  outputs = [_output(tmp_path, job) for job in (one, two)]
  for state, output in zip(states, outputs):
    _assert_completed(state, output)
  assert states[1]['NodeList'] == 'cpu[1-2]'
  assert _tasks(outputs[0]) == {'0'} and _tasks(outputs[1]) == {'0', '1'}
  assert 'process 1 of 2, 2 local devices' in outputs[1]
  runs = [read_scalars(str(tmp_path / name)) for name in ('one', 'two')]
  assert sorted(runs[0]['train/loss']) == [4, 8, 12, 16, 20, 24]
  for tag in ('train/loss', 'train/accuracy', 'eval/loss', 'eval/accuracy'):
    assert sorted(runs[1][tag]) == sorted(runs[0][tag])
    np.testing.assert_allclose(
        [runs[1][tag][s] for s in sorted(runs[1][tag])],
        [runs[0][tag][s] for s in sorted(runs[0][tag])], rtol=1e-5)


# Stands in for the virtual environment's python: instead of training, each
# task starts jax.distributed as the recipe does (JAX's SLURM detection) and
# reports its GPUs and which of them JAX would use.
PROBE = """#!{python}
import json, os, sys
sys.path.insert(0, os.getcwd())
import jax
from recipes.parallel import distributed
distributed.initialize(False)
print('PROBE', json.dumps(dict(
    process=jax.process_index(), node=os.environ['SLURMD_NODENAME'],
    visible=os.environ.get('CUDA_VISIBLE_DEVICES', ''),
    jax=jax.config.read('jax_cuda_visible_devices'),
    xla_flags=os.environ.get('XLA_FLAGS', '').split(),
    nccl_debug=os.environ.get('NCCL_DEBUG'))), flush=True)
jax.distributed.shutdown()
"""


@pytest.mark.parametrize('node, sbatch_args, env, processes, gpus', [
    ('gpu8', [], {}, 8, 8),  # One process per GPU, all of the node's.
    ('gpu2', [], {}, 2, 2),
    ('gpu8', ['--gpus-per-node=2'], {}, 2, 2),  # 2 of the node's 8.
    # GPUs asked for per task are still shared by the node's processes.
    ('gpu8', ['--ntasks-per-node=8', '--gpus-per-task=1'], {}, 8, 8),
    ('gpu8', [], {'PER_NODE': '1'}, 1, 8),  # One process, every GPU.
    # The user's own XLA and NCCL settings win over the script's.
    ('gpu2', [], {'XLA_FLAGS': '--xla_gpu_enable_latency_hiding_scheduler='
                               'false', 'NCCL_DEBUG': 'INFO'}, 2, 2),
])
def test_every_process_drives_gpus_of_its_own(tmp_path, node, sbatch_args,
                                              env, processes, gpus):
  venv = tmp_path / 'venv'
  (venv / 'bin').mkdir(parents=True)
  (venv / 'bin' / 'python').write_text(PROBE.format(python=sys.executable))
  (venv / 'bin' / 'python').chmod(0o755)
  job = _submit(tmp_path, ['--partition=gpu', f'--nodelist={node}',
                           *sbatch_args], VENV=str(venv),
                WORKDIR=str(tmp_path / 'unused'), **env)
  state, = _wait(tmp_path, job)
  output = _output(tmp_path, job)
  _assert_completed(state, output)
  reports = [json.loads(line) for line in re.findall(
      r'^(?: *\d+: )?PROBE (.*)$', output, re.MULTILINE)]
  assert sorted(r['process'] for r in reports) == list(range(processes))
  driven = []
  # XLA's and NCCL's multi-GPU settings, before the user's (a later flag
  # wins); XLA parsed them all (a name it does not know would end the probe).
  submitted = env.get('XLA_FLAGS', command_env().get('XLA_FLAGS', ''))
  for report in reports:
    assert report['xla_flags'] == [
        '--xla_gpu_enable_latency_hiding_scheduler=true',
        '--xla_gpu_nccl_termination_timeout_seconds=900',
        *submitted.split()], report
    assert report['nccl_debug'] == env.get('NCCL_DEBUG', 'WARN'), report
    visible = report['visible'].split(',')
    ids = [int(i) for i in report['jax'].split(',')]
    # JAX numbers the visible GPUs from 0: a larger id is CUDA's "invalid
    # device ordinal".
    assert max(ids) < len(visible), report
    assert len(ids) == gpus // processes, report
    driven += [(report['node'], visible[i]) for i in ids]
  assert len(set(driven)) == len(driven) == gpus, reports


def test_scancel_saves_exits_within_seconds_and_resumes_bitwise(
    data_dir, tmp_path):
  recipe = (f'--config.data_dir={data_dir}', *RECIPE,
            '--config.eval_every_steps=100000')
  layout = ['--nodes=1', '--ntasks-per-node=2']
  env = dict(WORKDIR=str(tmp_path / 'stopped'), JAX_NUM_CPU_DEVICES='2')
  job = _submit(tmp_path, layout, (*recipe, '--config.num_train_steps=100000'),
                **env)
  _wait_for_output(tmp_path, job, 'train/loss=')  # Training is under way.
  start = time.monotonic()
  subprocess.run(['scancel', job], timeout=20, check=True)
  state, = _wait(tmp_path, job)
  seconds = time.monotonic() - start
  output = _output(tmp_path, job)
  assert (state['JobState'], state['ExitCode']) == ('CANCELLED', '0:15')
  stops = re.findall(r'^ *(\d): .*Stopped by SIGTERM after step (\d+) of',
                     output, re.MULTILINE)
  assert sorted(task for task, _ in stops) == ['0', '1'], output[-3000:]
  step = int(stops[0][1])
  assert {int(s) for _, s in stops} == {step}
  assert str(step) in os.listdir(tmp_path / 'stopped' / 'checkpoints')
  assert 'Killed' not in output
  # SLURM notices within a second that the processes are gone.
  assert seconds < 10, output[-3000:]

  # The same command again resumes; against a run nothing stopped.
  steps = f'--config.num_train_steps={step + 8}'
  resumed = _submit(tmp_path, layout, (*recipe, steps), **env)
  uninterrupted = _submit(tmp_path, layout, (*recipe, steps),
                          **{**env, 'WORKDIR': str(tmp_path / 'whole')})
  states = _wait(tmp_path, resumed, uninterrupted)
  for state, job in zip(states, (resumed, uninterrupted)):
    _assert_completed(state, _output(tmp_path, job))
  assert (f'Resuming from the checkpoint of step {step} '
          in _output(tmp_path, resumed))
  (final, params), (whole_final, whole) = (
      saved_params(tmp_path / 'stopped'), saved_params(tmp_path / 'whole'))
  assert final == whole_final == step + 8
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(whole),
                  strict=True):
    np.testing.assert_array_equal(a, b)


def test_a_suspended_job_is_not_a_stall(data_dir, tmp_path):
  """`scontrol suspend` for twice the stall timeout, then `scontrol
  resume`: the job trains on (the watchdog does not count the time
  suspended) until it is cancelled."""
  recipe = (f'--config.data_dir={data_dir}', *RECIPE,
            '--config.eval_every_steps=100000',
            '--config.num_train_steps=100000',
            '--config.stall_timeout_seconds=10')
  job = _submit(tmp_path, ['--nodes=1'], recipe,
                WORKDIR=str(tmp_path / 'suspended'), JAX_NUM_CPU_DEVICES='2')
  _wait_for_output(tmp_path, job, 'train/loss=')
  suspended = subprocess.run(['scontrol', 'suspend', job], timeout=20,
                             capture_output=True, text=True)
  if suspended.returncode:
    subprocess.run(['scancel', job], timeout=20, check=False)
    pytest.skip(f'scontrol suspend does not work here: {suspended.stderr}')
  time.sleep(20)
  logged = _output(tmp_path, job).count('train/loss=')
  subprocess.run(['scontrol', 'resume', job], timeout=20, check=True)
  deadline = time.monotonic() + 60
  while _output(tmp_path, job).count('train/loss=') <= logged:
    assert _running(job) and time.monotonic() < deadline, (
        _output(tmp_path, job)[-3000:])
    time.sleep(0.3)
  subprocess.run(['scancel', job], timeout=20, check=True)
  state, = _wait(tmp_path, job)
  output = _output(tmp_path, job)
  assert 'stalled' not in output, output[-3000:]
  assert (state['JobState'], state['ExitCode']) == ('CANCELLED', '0:15')

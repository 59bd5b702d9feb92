"""The benchmark command: its JSON, its FLOP count, its imports, its errors."""

import glob
import gzip
import json
import math
import subprocess
import sys

import pytest

import zoo
from recipes import bench
from recipes.bench import step as bench_step
from tests.helpers import ROOT, command_env, slow_after
from tests.idx_files import write_fashion_mnist

# Tiny models, whose compiling takes longer than the steps they time.
pytestmark = pytest.mark.usefixtures('fast_compiles')

FIELDS = ('model', 'strategy', 'dtype', 'batch_size', 'images_per_sec',
          'step_time_median_s', 'step_time_p90_s', 'compile_time_s',
          'flops_per_step', 'tflops_per_sec', 'mfu', 'devices', 'platform',
          'device_kind', 'jax_version', 'peak_memory_bytes',
          'residual_bytes_per_device')


def _run_json(tmp_path, *flags) -> dict:
  path = tmp_path / 'bench.json'
  bench.main(['--model=mlp', '--batch_size=8', '--steps=3', '--warmup=1',
              f'--json={path}', *flags])
  return json.loads(path.read_text())


# The fast tier: one device and the global arrays of two; the rest in the
# whole suite.
@pytest.mark.parametrize('strategy,devices', slow_after(2, [
    pytest.param('jit', 1), pytest.param('sharded', 2),
    pytest.param('pmap', 2), pytest.param('shard_map', 2)]))
def test_writes_every_field(tmp_path, strategy, devices):
  r = _run_json(tmp_path, f'--strategy={strategy}', f'--devices={devices}')
  assert set(FIELDS) <= set(r)
  assert (r['model'], r['strategy'], r['dtype'], r['batch_size'],
          r['devices'], r['platform']) == ('mlp', strategy, 'float32', 8,
                                           devices, 'cpu')
  assert r['jax_version'] == __import__('jax').__version__
  assert r['compile_time_s'] > 0
  assert 0 < r['step_time_median_s'] <= r['step_time_p90_s']
  assert r['images_per_sec'] == pytest.approx(8 / r['step_time_median_s'])
  # 3 forward passes' worth per image, from the zoo's own count.
  forward = zoo.model_info('mlp').gflops * 1e9
  assert r['flops_per_step'] == pytest.approx(3 * forward * 8, rel=1e-9)
  assert r['tflops_per_sec'] == pytest.approx(
      r['flops_per_step'] / r['step_time_median_s'] / 1e12)
  assert r['mfu'] is None and r['peak_memory_bytes'] is None  # CPU.
  # At most the MLP's weights and its activations, per device's share.
  params = zoo.model_info('mlp').num_params * 4
  assert 0 < r['residual_bytes_per_device'] < params + 8 * 2**20
  assert math.isfinite(r['final_loss'])


def test_remat_keeps_fewer_activations():
  # A ViT whose saved activations outweigh its parameters.
  kwargs = dict(num_classes=10, hidden_size=64, num_layers=4, num_heads=2,
                mlp_dim=256, patch_size=4, image_size=32)
  kept = {remat: bench_step.residual_bytes(
      zoo.create('vit_s16', remat=remat, **kwargs), (32, 32, 3), 32)
          for remat in (False, True)}
  assert kept[True] < 0.2 * kept[False], kept


def test_bfloat16_and_profile(tmp_path, capsys):
  r = _run_json(tmp_path, '--dtype=bfloat16', f'--profile={tmp_path}/trace')
  assert r['dtype'] == 'bfloat16' and math.isfinite(r['final_loss'])
  assert glob.glob(f'{tmp_path}/trace/**/perfetto_trace.json.gz',
                   recursive=True)
  assert 'largest host ops of one step' in capsys.readouterr().err


def test_largest_ops_of_a_gpu_shaped_trace(tmp_path):
  # The layout a GPU profile has: a device process whose threads are the
  # module, its ops and the kernels on a stream, beside the host's threads.
  def meta(kind, pid, tid, name):
    return dict(ph='M', name=kind, pid=pid, tid=tid, args=dict(name=name))

  def op(pid, tid, name, dur):
    return dict(ph='X', name=name, pid=pid, tid=tid, ts=0, dur=dur)

  events = [
      meta('process_name', 1, 0, '/host:CPU'),
      meta('thread_name', 1, 5, 'python'),
      meta('process_name', 2, 0, '/device:GPU:0'),
      meta('thread_name', 2, 1, 'XLA Modules'),
      meta('thread_name', 2, 2, 'Stream #13(Compute)'),
      op(1, 5, 'PjitFunction(train_step)', 9000),
      op(2, 1, 'jit_train_step', 1000),
      op(2, 2, 'cutlass_gemm', 300), op(2, 2, 'cutlass_gemm', 300),
      op(2, 2, 'cudnn_flash_fwd', 200), op(2, 2, 'loop_fusion', 200),
  ]
  path = tmp_path / 'perfetto_trace.json.gz'
  with gzip.open(path, 'wt') as f:
    json.dump(dict(traceEvents=events), f)
  lines = bench_step.largest_ops(str(path)).splitlines()
  assert lines[0].startswith('largest device ops of one step')
  rows = [line.split() for line in lines[1:]]
  assert [r[-1] for r in rows] == ['jit_train_step', 'cutlass_gemm',
                                   'cudnn_flash_fwd', 'loop_fusion']
  # Total microseconds and share of the thread: the module is all of its
  # thread, the two gemms 60% of the stream's kernel time.
  assert rows[0][:2] == ['1000.0', '100.0%']
  assert rows[1][:2] == ['600.0', '60.0%']
  assert rows[2][:2] == ['200.0', '20.0%']


def test_float16_trains_with_loss_scaling(tmp_path):
  r = _run_json(tmp_path, '--dtype=float16', '--strategy=sharded',
                '--devices=2')
  assert r['dtype'] == 'float16' and math.isfinite(r['final_loss'])


def test_peak_table():
  assert bench_step.peak_tflops('NVIDIA H200') == 989
  assert bench_step.peak_tflops('NVIDIA A100-SXM4-80GB') == 312
  assert bench_step.peak_tflops('TPU v5 lite') == 197
  assert bench_step.peak_tflops('TPU v5') == 459
  assert bench_step.peak_tflops('TPU v6 lite') == 918
  assert bench_step.peak_tflops('cpu') is None


@pytest.mark.parametrize('flags,message', [
    (['--model=cnnn'], "unknown model 'cnnn'; did you mean 'cnn'?"),
    (['--strategy=pmap', '--devices=4', '--batch_size=10'],
     'batch_size 10 is not divisible by the 4 devices'),
    (['--strategy=jit', '--devices=2'], 'runs on one device'),
])
def test_bad_input_is_one_line(flags, message):
  with pytest.raises(SystemExit) as e:
    bench.main(flags)
  assert str(e.value).startswith('error: ') and message in str(e.value)
  assert '\n' not in str(e.value)


@pytest.mark.slow
def test_imports_no_tensorflow():
  code = ('import sys; from recipes import bench; '
          "bench.main(['--model=mlp', '--batch_size=4', '--steps=1']); "
          "print(sorted({m.split('.')[0] for m in sys.modules} & "
          "{'tensorflow', 'tensorflow_datasets', 'ml_collections'}))")
  out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, check=True,
                       capture_output=True, text=True,
                       env=command_env()).stdout
  assert out.splitlines()[-1] == '[]'


def test_input_only(tmp_path):
  path = tmp_path / 'input.json'
  bench.main(['--input_only', '--model=mlp', '--batch_size=16', '--steps=2',
              '--warmup=1', '--input_examples=256', '--input_batches=5',
              f'--json={path}'])
  r = json.loads(path.read_text())
  assert set(r['pipelines']) == {'fashion_mnist', 'cifar10'}
  for p in r['pipelines'].values():
    assert p['batches_per_sec'] > 0
    assert p['images_per_sec'] == pytest.approx(16 * p['batches_per_sec'])
    assert p['times_train_step'] == pytest.approx(
        p['batches_per_sec'] / r['train_step_batches_per_sec'])
  assert r['train_step']['strategy'] == 'jit'
  assert r['train_step_batches_per_sec'] > 0


@pytest.mark.slow
def test_epoch_bench_times_the_recipe_and_the_bare_loop(tmp_path):
  write_fashion_mnist(str(tmp_path), num_train=128, num_test=16)
  # A process: the command's flags are absl's, which recipes.train's own
  # would clash with here. Its CNN compiles without optimizations (the
  # rates are only checked positive), kept out of the compilation cache
  # as the fast_compiles fixture keeps them.
  result = subprocess.run(
      [sys.executable, '-m', 'recipes.bench.epoch',
       '--config=configs/fashion_mnist_pmap.py',
       f'--config.data_dir={tmp_path}', '--config.batch_size=32'],
      cwd=ROOT, env=command_env(
          JAX_DISABLE_MOST_OPTIMIZATIONS='1',
          JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='1e9'),
      capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert '4 steps per epoch' in result.stdout
  rows = {line.split('|')[1].strip(): float(line.split('|')[3])
          for line in result.stdout.splitlines()
          if line.startswith('| ') and 'images/s' not in line}
  assert set(rows) == {'bare jax.jit loop, 1 device',
                       'pmap recipe, 8 device(s)'}
  assert all(rate > 0 for rate in rows.values())


def test_an_empty_device_process_leaves_the_host_ops(tmp_path):
  # A CPU trace may name a device process and record nothing in it.
  events = [
      dict(ph='M', name='process_name', pid=1, tid=0,
           args=dict(name='/host:CPU')),
      dict(ph='M', name='process_name', pid=2, tid=0,
           args=dict(name='/device:CPU:0')),
      dict(ph='X', name='dot.3', pid=1, tid=7, ts=0, dur=50),
  ]
  path = tmp_path / 'perfetto_trace.json.gz'
  with gzip.open(path, 'wt') as f:
    json.dump(dict(traceEvents=events), f)
  lines = bench_step.largest_ops(str(path)).splitlines()
  assert lines[0].startswith('largest host ops of one step')
  assert lines[1].split()[-1] == 'dot.3'

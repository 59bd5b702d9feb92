"""Fixed short training runs and the hashes of their final checkpoints.

    python -m tests.fixed_runs [--out FILE] [--only NAME,...] [--keep DIR]

Trains a fixed set of 8-step runs with the real commands (`python -m
recipes.train`, `launch/local.sh` for two processes, `python -m
recipes.convert` for the fine-tuning run) on the real Fashion-MNIST files
(/usr/share/datasets/fashion-mnist, Debian's `dataset-fashion-mnist`), then
prints a Markdown table of the final checkpoint's hashes, one column per
item. Run it before and after a change that should leave training alone (a
refactor, a rework of the tests): the two tables must be equal, bit for bit.
It is a script, not a test module (pytest collects test_*.py only): the
hashes it prints are compared between two trees, not against constants,
since another version of JAX or XLA computes other bits.

To hash an older commit with the same script and environment:

    git worktree add /tmp/before COMMIT
    cp tests/fixed_runs.py /tmp/before/tests/
    cd /tmp/before && PYTHONPATH=/tmp/before python -m tests.fixed_runs

(each command runs with the tree it is started from as its working
directory and first on PYTHONPATH, so the tree's own `recipes` is the one
imported, not an editable install's; the table's first lines say which).

Every run: seed 0, 8 steps (`num_train_steps=8`), one checkpoint, at the
end; one evaluation, at the end, on `test[:256]` (it does not touch the
state). The runs and their flags are RUNS below; the CNN runs keep
configs/fashion_mnist_pmap.py's batch of 128, the larger models train on
32. The toolkit is mixup 0.8, cutmix 1.0, label smoothing 0.1, EMA 0.99,
gradient clipping at 1.0, 2 micro-batches, AdamW (1e-3, weight decay 0.05)
with warmup_cosine (2 warmup steps).

Hashes: the checkpoint is read as the recipes read one (recipes/checkpoint:
its checksums checked, every array restored whole, here onto one device);
each item's hash is SHA-256 over the bytes (`tobytes()`, C order) of each of
its arrays in `jax.tree_util` leaf order, the first 16 hex digits. The
`layout` column hashes every array's path, dtype and shape, of every item,
so that a renamed, reshaped or retyped array shows too. Items without
arrays (no batch statistics, no EMA, no loss scale) are left out.

On a quiet 2-core CPU the whole script takes about 10 minutes.
"""

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = '/usr/share/datasets/fashion-mnist'
STEPS = 8

# The config of the runs whose flags name none.
CONFIG = '--config=configs/fashion_mnist_pmap.py'
# Flags every run gets.
COMMON = [f'--config.num_train_steps={STEPS}',
          '--config.checkpoint_every_steps=0',
          '--config.eval_split=test[:256]',
          '--config.compilation_cache_dir=']
SHARDED_2X2X2 = ['--config.strategy=sharded', '--config.mesh.data=2',
                 '--config.mesh.fsdp=2', '--config.mesh.tensor=2']
# configs/cifar10_vit_s16_pmap.py (it lists the model_kwargs a command line
# may set) on Fashion-MNIST as it is, in float32.
VIT_S_PATCH_7 = ['--config=configs/cifar10_vit_s16_pmap.py',
                 '--config.dataset=fashion_mnist_idx',
                 f'--config.data_dir={DATA_DIR}', '--config.augment=none',
                 '--config.normalize=', '--config.half_precision=False',
                 '--config.model_kwargs.patch_size=7',
                 '--config.model_kwargs.image_size=28',
                 '--config.batch_size=32']
TOOLKIT = ['--config.mixup_alpha=0.8', '--config.cutmix_alpha=1.0',
           '--config.label_smoothing=0.1', '--config.ema_decay=0.99',
           '--config.grad_clip_norm=1.0', '--config.grad_accum_steps=2',
           '--config.optimizer=adamw', '--config.learning_rate=0.001',
           '--config.weight_decay=0.05', '--config.lr_schedule=warmup_cosine',
           '--config.warmup_steps=2']
# The converted run: configs/cifar10_vit_b16_finetune.py (SGD, clipping,
# the finetune preset) on Fashion-MNIST as RGB at 48x48, from a ViT-Ti/16
# .npz in Google's layout converted by `python -m recipes.convert` (its head
# has 7 classes: the run's 10-class head keeps its initialization).
FINE_TUNE = ['--config=configs/cifar10_vit_b16_finetune.py',
             '--config.dataset=fashion_mnist_idx',
             f'--config.data_dir={DATA_DIR}', '--config.model=vit_ti16',
             '--config.image_size=48', '--config.image_channels=3',
             '--config.batch_size=32', '--config.warmup_steps=2',
             '--config.eval_every_steps=0']

# name: (processes, devices per process, flags after CONFIG (unless they
# name a config) and COMMON).
RUNS = {
    'pmap, 1 process x 8': (1, 8, ['--config.strategy=pmap']),
    'shard_map, 1 x 8': (1, 8, ['--config.strategy=shard_map']),
    'sharded 2x2x2, 1 x 8': (1, 8, SHARDED_2X2X2),
    'pmap, 2 processes x 4': (2, 4, ['--config.strategy=pmap']),
    'shard_map, 2 x 4': (2, 4, ['--config.strategy=shard_map']),
    'sharded 2x2x2, 2 x 4': (2, 4, SHARDED_2X2X2),
    'resnet20, cross-device BN': (1, 8, [
        '--config.model=resnet20', '--config.cross_device_batch_norm=True',
        '--config.batch_size=32']),
    'ViT-S (patch 7) toolkit, sharded tensor=2': (1, 8, [
        *VIT_S_PATCH_7, *TOOLKIT, '--config.strategy=sharded',
        '--config.mesh.tensor=2']),
    'ViT-S toolkit, pmap': (1, 8, [
        *VIT_S_PATCH_7, *TOOLKIT, '--config.strategy=pmap']),
    'converted ViT-Ti .npz -> init_from (fine-tune config)': (
        1, 8, FINE_TUNE),
}

ITEM_NAMES = {'ema_params': 'ema'}


def _env(devices: int) -> dict[str, str]:
  """CPU only, `devices` simulated devices, this tree first on the path, no
  multi-process settings or compilation cache from outside."""
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(('JAX_COORDINATOR', 'JAX_PROCESS', 'JAX_NUM_PRO',
                              'JAX_COMPILATION_CACHE', 'JAX_PERSISTENT'))}
  path = [ROOT] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep)
                   if p]
  return {**env, 'JAX_PLATFORMS': 'cpu', 'JAX_NUM_CPU_DEVICES': str(devices),
          'PYTHON': sys.executable, 'PYTHONPATH': os.pathsep.join(path),
          'TF_CPP_MIN_LOG_LEVEL': '2',
          # As the tests set it: jax 0.12's YNNPACK fusion; 0.10 ignores it.
          'XLA_FLAGS': (env.get('XLA_FLAGS', '') +
                        ' --xla_cpu_experimental_ynn_fusion_type=').strip()}


def _run(command: list[str], log: str, devices: int = 8):
  with open(log, 'w', encoding='utf-8') as f:
    result = subprocess.run(command, cwd=ROOT, env=_env(devices), stdout=f,
                            stderr=subprocess.STDOUT, check=False)
  if result.returncode:
    with open(log, encoding='utf-8') as f:
      tail = f.read()[-3000:]
    raise RuntimeError(f'{" ".join(command)} exited with status '
                       f'{result.returncode}; the end of {log}:\n{tail}')


def _vit_ti_npz(path: str):
  """A ViT-Ti/16 for 48x48 images (3x3 patches) with 7 classes, in the
  layout of Google's vit_jax .npz files, random but fixed (seed 0)."""
  width, depth, heads, mlp, patch, grid, classes = 192, 12, 3, 768, 16, 3, 7
  rng = np.random.default_rng(0)

  def normal(*shape, std=None):
    std = std or (1 / np.sqrt(np.prod(shape[:-1])) if len(shape) > 1 else 0.2)
    return (std * rng.normal(size=shape)).astype(np.float32)

  def scale(n):
    return (0.5 + rng.random(n)).astype(np.float32)

  head_dim = width // heads
  t = {'embedding/kernel': normal(patch, patch, 3, width),
       'embedding/bias': normal(width), 'cls': normal(1, 1, width, std=0.5),
       'Transformer/posembed_input/pos_embedding': normal(
           1, grid**2 + 1, width, std=0.5)}
  for i in range(depth):
    block = f'Transformer/encoderblock_{i}/'
    attention = block + 'MultiHeadDotProductAttention_1/'
    t[block + 'LayerNorm_0/scale'] = scale(width)
    t[block + 'LayerNorm_0/bias'] = normal(width)
    for part in ('query', 'key', 'value'):
      t[f'{attention}{part}/kernel'] = normal(width, heads, head_dim)
      t[f'{attention}{part}/bias'] = normal(heads, head_dim)
    t[attention + 'out/kernel'] = normal(heads, head_dim, width,
                                         std=1 / np.sqrt(width))
    t[attention + 'out/bias'] = normal(width)
    t[block + 'LayerNorm_2/scale'] = scale(width)
    t[block + 'LayerNorm_2/bias'] = normal(width)
    t[block + 'MlpBlock_3/Dense_0/kernel'] = normal(width, mlp)
    t[block + 'MlpBlock_3/Dense_0/bias'] = normal(mlp)
    t[block + 'MlpBlock_3/Dense_1/kernel'] = normal(mlp, width)
    t[block + 'MlpBlock_3/Dense_1/bias'] = normal(width)
  t['Transformer/encoder_norm/scale'] = scale(width)
  t['Transformer/encoder_norm/bias'] = normal(width)
  t['head/kernel'] = normal(width, classes)
  t['head/bias'] = normal(classes)
  np.savez(path, **t)


def train(name: str, base: str) -> str:
  """Trains run `name` in a new workdir under `base`; returns the workdir."""
  processes, devices, flags = RUNS[name]
  slug = ''.join(c if c.isalnum() else '_' for c in name)[:40]
  workdir = os.path.join(base, slug)
  if flags is FINE_TUNE:
    npz, converted = os.path.join(base, 'vit_ti16.npz'), workdir + '_init'
    _vit_ti_npz(npz)
    _run([sys.executable, '-m', 'recipes.convert', '--source=big_vision',
          npz, converted], workdir + '_convert.log')
    flags = [*flags, f'--config.init_from={converted}']
  if not flags[0].startswith('--config='):
    flags = [CONFIG, *flags]
  flags = [flags[0], *COMMON, *flags[1:]]
  command = [sys.executable, '-m', 'recipes.train', f'--workdir={workdir}',
             *flags]
  if processes > 1:
    command = [os.path.join(ROOT, 'launch', 'local.sh'),
               f'--num_processes={processes}',
               f'--devices_per_process={devices}', '--', *command]
  _run(command, workdir + '.log', devices)
  return workdir


def _digest(chunks) -> str:
  h = hashlib.sha256()
  for chunk in chunks:
    h.update(chunk)
  return h.hexdigest()[:16]


def hashes(workdir: str) -> dict[str, str]:
  """{item: hash} of the workdir's latest checkpoint, plus 'layout'."""
  import jax  # pylint: disable=g-import-not-at-top
  from etils import epath  # pylint: disable=g-import-not-at-top
  from recipes import checkpoint  # pylint: disable=g-import-not-at-top
  from recipes.checkpoint import checksums  # pylint: disable=g-import-not-at-top

  one_device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  with checkpoint.manager(workdir) as mngr:
    step = mngr.latest_step()
    if step != STEPS:
      raise RuntimeError(f'{workdir}: the latest checkpoint is of step '
                         f'{step}, not {STEPS}')
    problem = checksums.problem(epath.Path(mngr.directory) / str(step) /
                                'default')
    if problem:
      raise RuntimeError(f'{workdir}: checkpoint {step} is damaged: {problem}')
    target = jax.tree.map(
        lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one_device),
        dict(mngr.item_metadata(step)))
    state = checkpoint.restore(mngr, target, step)
  found, layout = {}, []
  for item in sorted(state):
    if item == 'step':
      continue
    leaves = jax.tree_util.tree_flatten_with_path(state[item])[0]
    if not leaves:
      continue
    arrays = [(jax.tree_util.keystr(p), np.asarray(x)) for p, x in leaves]
    found[ITEM_NAMES.get(item, item)] = _digest(
        np.ascontiguousarray(a).tobytes() for _, a in arrays)
    layout += [f'{item}{p} {a.dtype} {a.shape}\n'.encode() for p, a in arrays]
  found['layout'] = _digest(layout)
  return found


def _describe_tree() -> list[str]:
  import jax  # pylint: disable=g-import-not-at-top
  import recipes  # pylint: disable=g-import-not-at-top
  commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT,
                          capture_output=True, text=True, check=False)
  dirty = subprocess.run(['git', 'status', '--porcelain',
                          '--untracked-files=no'], cwd=ROOT,
                         capture_output=True, text=True, check=False)
  state = commit.stdout.strip() or 'unknown'
  if dirty.stdout.strip():
    state += ' with uncommitted changes'
  return [f'Tree {ROOT} at {state}; recipes from '
          f'{os.path.dirname(recipes.__file__)}; Python '
          f'{platform.python_version()}, jax {jax.__version__}, '
          f'{platform.machine()} CPU.']


def table(rows: dict[str, dict[str, str] | str]) -> str:
  lines = ['| run | params | opt_state | other items | layout |',
           '|---|---|---|---|---|']
  for name, found in rows.items():
    if isinstance(found, str):
      lines.append(f'| {name} | {found} | | | |')
      continue
    others = ', '.join(f'{k} {v}' for k, v in found.items()
                       if k not in ('params', 'opt_state', 'layout'))
    lines.append(f'| {name} | {found["params"]} | {found["opt_state"]} | '
                 f'{others} | {found["layout"]} |')
  return '\n'.join(lines)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog='python -m tests.fixed_runs', description=__doc__.split('\n')[0])
  parser.add_argument('--out', help='also write the table to this file')
  parser.add_argument('--only', default='',
                      help='comma-separated beginnings of run names')
  parser.add_argument('--keep', default='',
                      help='train in this new directory and keep it')
  args = parser.parse_args(argv)
  os.environ['JAX_PLATFORMS'] = 'cpu'
  if not os.path.exists(os.path.join(DATA_DIR, 'train-images-idx3-ubyte.gz')):
    print(f'error: no Fashion-MNIST files in {DATA_DIR}; apt-get install '
          'dataset-fashion-mnist', file=sys.stderr)
    return 1
  names = [n for n in RUNS
           if not args.only or any(n.startswith(p.strip())
                                   for p in args.only.split(','))]
  if args.keep:
    os.makedirs(args.keep)
  base = args.keep or tempfile.mkdtemp(prefix='fixed-runs-')
  rows, failed = {}, False
  start = time.monotonic()
  try:
    for name in names:
      began = time.monotonic()
      try:
        rows[name] = hashes(train(name, base))
      except RuntimeError as e:
        print(e, file=sys.stderr)
        rows[name], failed = 'failed (see stderr)', True
      print(f'{name}: {time.monotonic() - began:.0f} s', file=sys.stderr,
            flush=True)
  finally:
    if not args.keep:
      shutil.rmtree(base, ignore_errors=True)
  minutes, seconds = divmod(round(time.monotonic() - start), 60)
  text = '\n'.join([*_describe_tree(),
                    f'{len(names)} runs of {STEPS} steps in {minutes} min '
                    f'{seconds:02d} s.', '', table(rows), ''])
  print(text, end='')
  if args.out:
    with open(args.out, 'w', encoding='utf-8') as f:
      f.write(text)
  return 1 if failed else 0


if __name__ == '__main__':
  sys.exit(main())

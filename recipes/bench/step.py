"""Times the recipes' training step on synthetic data: images/s, TFLOP/s, MFU.

    python -m recipes.bench --model=resnet50 --batch_size=256 \
        --strategy=sharded --dtype=bfloat16 --devices=1 --json=/tmp/r50.json

Strategies: `jit` is a bare single-device `jax.jit` of `steps.train_step`
with the state donated, the reference for the recipes' own overhead; `pmap`
runs `PmapStrategy`'s step on the state it replicates, `shard_map`
`ShardMapStrategy`'s; `sharded` runs `ShardedStrategy`'s on a mesh (`--mesh`,
default pure data parallel) with the model's default rules. Each comes from
the recipes' strategy registry (recipes/parallel/strategy.py). `--devices`
picks the first N local devices (default: all for the recipes' strategies,
one for jit).

One random batch is made on the host and put on the devices once, then
reused: the step is timed, not the host. The first call (tracing, compiling
and one step) is reported as the compile time; `--warmup` more steps are
run untimed, then each of `--steps` steps is timed to `block_until_ready`.

This path imports neither TensorFlow nor TFDS nor ml_collections, so it runs
where only jax, flax, optax (and clu, for the step's metrics) are installed.
`--input_only` instead measures the tf.data input pipeline
(recipes/bench/input.py), which does need TensorFlow.
"""

import argparse
import ast
import collections
import dataclasses
import functools
import glob
import gzip
import json
import os
import sys
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

import zoo
from recipes.core import state_spec, steps
from recipes.parallel import strategy as strategies
from recipes.runtime.dispatch import OneAhead
from recipes.runtime.errors import UserError, check_divisible

# jit: the bare step on one device, the reference for the recipes' overhead.
STRATEGIES = ('jit', *strategies.STRATEGIES)
DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16,
          'float16': jnp.float16}  # float16 with dynamic loss scaling.

# Dense bfloat16 peak TFLOP/s of one device, matched in order on the lower-case
# jax `device_kind` (TPU v5e reports 'TPU v5 lite', v5p 'TPU v5', v6e
# 'TPU v6 lite'). MFU is always taken against these, whatever --dtype.
PEAK_TFLOPS = (
    ('h100', 989.0), ('h200', 989.0), ('a100', 312.0),
    ('v5 lite', 197.0), ('v5e', 197.0), ('v5p', 459.0), ('tpu v5', 459.0),
    ('v6 lite', 918.0), ('v6e', 918.0), ('tpu v4', 275.0),
)


def peak_tflops(device_kind: str) -> float | None:
  """One device's dense bfloat16 peak, from PEAK_TFLOPS.

  Args:
    device_kind: jax's `device_kind`, e.g. 'NVIDIA H100 80GB HBM3'.

  Returns:
    TFLOP/s, or None for a device not in the table.
  """
  kind = device_kind.lower()
  return next((peak for key, peak in PEAK_TFLOPS if key in kind), None)


def parse_model_kwargs(text: str) -> dict[str, Any]:
  """'patch_size=4,attention_impl=cudnn' -> {'patch_size': 4, ...}.

  Args:
    text: key=value items separated by commas; values are Python literals,
      or else bare strings.

  Returns:
    The keyword arguments.

  Raises:
    UserError: for an item without '='.
  """
  kwargs = {}
  for item in filter(None, (s.strip() for s in text.split(','))):
    key, sep, value = item.partition('=')
    if not sep:
      raise UserError(f'bad --model_kwargs item {item!r}; write key=value, '
                      'separated by commas.')
    try:
      kwargs[key.strip()] = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
      kwargs[key.strip()] = value.strip()  # A bare string such as cudnn.
  return kwargs


def parse_args(argv: list[str] | None) -> argparse.Namespace:
  """The command line of `python -m recipes.bench`, checked.

  Args:
    argv: the arguments (without the program name); None: sys.argv's.

  Returns:
    The parsed arguments. Bad ones exit with argparse's usage message.
  """
  p = argparse.ArgumentParser(prog='python -m recipes.bench',
                              description=__doc__.split('\n')[0])
  p.add_argument('--model', default='cnn', help='a name from zoo.list_models()')
  p.add_argument('--batch_size', type=int, default=128, help='global batch')
  p.add_argument('--strategy', choices=STRATEGIES, default='jit')
  p.add_argument('--dtype', choices=tuple(DTYPES), default='float32',
                 help='computation dtype; parameters stay float32')
  p.add_argument('--steps', type=int, default=20, help='timed steps')
  p.add_argument('--warmup', type=int, default=2,
                 help='untimed steps after the compiling first call')
  p.add_argument('--devices', type=int, default=None,
                 help='use the first N local devices (jit: 1)')
  p.add_argument('--mesh', default='-1,1,1',
                 help='sharded: sizes of the data,fsdp,tensor mesh axes')
  p.add_argument('--num_classes', type=int, default=None,
                 help='default: the model\'s registered number')
  p.add_argument('--model_kwargs', default='',
                 help='extra zoo.create arguments, e.g. patch_size=4,'
                      'image_size=32')
  p.add_argument('--attention_impl', default=None,
                 choices=('auto', 'xla', 'cudnn'),
                 help="ViTs: jax.nn.dot_product_attention's implementation; "
                      "default: the model's ('auto': cuDNN on GPU where it "
                      "takes the shapes, else XLA)")
  p.add_argument('--seed', type=int, default=0)
  p.add_argument('--json', default=None, help='write the results here')
  p.add_argument('--profile', default=None,
                 help='after timing, trace one step into this directory '
                      '(jax.profiler) and print its largest ops')
  p.add_argument('--input_only', action='store_true',
                 help='measure the tf.data input pipeline instead '
                      '(recipes/bench/input.py; needs TensorFlow)')
  p.add_argument('--input_examples', type=int, default=50_000,
                 help='--input_only: examples in each synthetic split')
  p.add_argument('--input_batches', type=int, default=300,
                 help='--input_only: timed batches of each pipeline')
  args = p.parse_args(argv)
  if min(args.steps, args.batch_size, args.input_batches) < 1 or \
      args.warmup < 0:
    p.error('--steps, --batch_size and --input_batches must be positive, '
            '--warmup at least 0')
  if args.profile and '://' in args.profile:
    p.error('--profile must be a local directory: JAX writes its trace there '
            'with local file calls (--json may be a gs:// path)')
  return args


def log(message: str):
  """Prints a progress line to stderr, at once.

  Args:
    message: the line.
  """
  print(message, file=sys.stderr, flush=True)


def create_model(args) -> tuple[Any, dict[str, Any]]:
  """The model and the zoo.create keyword arguments beyond the dtype.

  Args:
    args: the command line (`parse_args`): model, dtype, model_kwargs,
      attention_impl and num_classes.

  Returns:
    (the model, the keyword arguments).

  Raises:
    UserError: for an unknown model or argument.
  """
  kwargs = parse_model_kwargs(args.model_kwargs)
  if args.attention_impl:
    kwargs['attention_impl'] = args.attention_impl
  if args.num_classes:
    kwargs['num_classes'] = args.num_classes
  try:
    return zoo.create(args.model, dtype=DTYPES[args.dtype], **kwargs), kwargs
  except (TypeError, ValueError) as e:
    raise UserError(str(e)) from None


def image_shape(name: str, kwargs: dict[str, Any]) -> tuple[int, ...]:
  """The shape of one input image of zoo model `name`.

  Args:
    name: a zoo model name.
    kwargs: its zoo.create keyword arguments.

  Returns:
    The shape, e.g. (224, 224, 3).
  """
  # The registry's, for these kwargs (e.g. a ViT's image_size).
  return zoo.input_shape(name, **kwargs)


def forward_flops_per_image(name: str, shape, kwargs) -> int:
  """The FLOPs of one image's forward pass, by the zoo's count.

  Args:
    name: a zoo model name.
    shape: the shape of one input image.
    kwargs: its zoo.create keyword arguments.

  Returns:
    FLOPs (a multiply-add counts as two).
  """
  # The zoo's count from the traced forward pass, not XLA's compiled cost
  # analysis: on GPU that misses convolutions and attention that become
  # library calls. cuDNN attention is one opaque call in the trace too, so
  # count the same math traced in float32, where 'auto' attention is XLA's
  # einsums.
  kwargs = {k: v for k, v in kwargs.items() if k != 'attention_impl'}
  return round(zoo.model_info(name, input_shape=shape, **kwargs).gflops * 1e9)


def select_devices(args) -> list:
  """The first `--devices` local devices (default: all; jit: one).

  Args:
    args: the command line (`parse_args`): devices and strategy.

  Returns:
    The devices.

  Raises:
    UserError: for more than one device with jit, or more than there are.
  """
  local = jax.local_devices()
  count = args.devices or (1 if args.strategy == 'jit' else len(local))
  if args.strategy == 'jit' and count != 1:
    raise UserError(f'--strategy=jit runs on one device, not {count}; use '
                    'a strategy of the recipes for more.')
  if not 1 <= count <= len(local):
    raise UserError(f'--devices={count}, but there are {len(local)} local '
                    'devices.')
  return local[:count]


def _mesh_sizes(text: str) -> dict[str, int]:
  try:
    data, fsdp, tensor = (int(s) for s in text.split(','))
  except ValueError:
    raise UserError(f'bad --mesh {text!r}; give three sizes data,fsdp,tensor '
                    '(one may be -1), e.g. -1,1,1.') from None
  return dict(data=data, fsdp=fsdp, tensor=tensor)


@dataclasses.dataclass
class Timed:
  """What the timing loop needs: a step, its inputs, a way to read metrics."""
  step: Callable
  state: Any
  batch: dict
  to_host: Callable
  batch_shards: int  # How many ways the batch is split.


def bare_train_step():
  """The shared train step under a plain `jax.jit`, the state donated: the
  reference the recipes' strategies are measured against.

  Returns:
    The jitted step, (state, batch) -> (new state, metrics); seed 0.
  """
  return jax.jit(functools.partial(steps.train_step, axis_name=None),
                 donate_argnums=(0,))


def _prepare(args, model, tx, shape, devices, batch) -> Timed:
  # The state as the recipes make it (recipes/experiment.py), with the plain
  # update (no mixing, accumulation or average); float16 as the recipes
  # train it, with flax's DynamicScale.
  spec = state_spec.make(model, tx, shape, seed=args.seed,
                         loss_scaling=args.dtype == 'float16')
  rng = jax.random.PRNGKey(args.seed)
  if args.strategy == 'jit':
    with jax.default_device(devices[0]):
      state = spec.create_state(rng)
    return Timed(bare_train_step(), state,
                 jax.device_put(batch, devices[0]), jax.device_get, 1)
  settings = strategies.ParallelSettings.for_model(
      args.model, args.strategy, _mesh_sizes(args.mesh))
  divisor, shards = strategies.batch_divisor(settings, len(devices))
  check_divisible('batch_size', args.batch_size, divisor, shards)
  strategy = strategies.create(spec, settings, devices)
  return Timed(strategy.train_step, strategy.create_state(rng),
               next(strategy.place_batches([batch])), strategy.to_host,
               divisor)


def time_steps(setup: Timed, warmup: int, num_steps: int):
  """(first call's seconds, each timed step's seconds, final state, metrics).

  Args:
    setup: the step and its inputs.
    warmup: untimed steps after the first call.
    num_steps: timed steps.

  Returns:
    As above; the first call includes tracing and compiling.
  """
  state = setup.state
  start = time.perf_counter()
  state, metrics = setup.step(state, setup.batch)
  jax.block_until_ready((state, metrics))
  first = time.perf_counter() - start
  one_ahead = OneAhead()
  for _ in range(warmup):
    state, metrics = setup.step(state, setup.batch)
    one_ahead(metrics)
  jax.block_until_ready((state, metrics))
  times = []
  for _ in range(num_steps):
    start = time.perf_counter()
    state, metrics = setup.step(state, setup.batch)
    jax.block_until_ready((state, metrics))
    times.append(time.perf_counter() - start)
  return first, times, state, metrics


def peak_memory_bytes(devices) -> int | None:
  """The largest peak of bytes in use over `devices`; None if unreported.

  Args:
    devices: the devices of the run.

  Returns:
    Bytes, or None where the platform reports no memory stats.
  """
  peaks = [(d.memory_stats() or {}).get('peak_bytes_in_use')
           for d in devices]
  peaks = [p for p in peaks if p is not None]
  return max(peaks) if peaks else None


def residual_bytes(model, shape, batch_size: int) -> int:
  """Bytes that one training forward pass over `batch_size` images keeps for
  the backward pass (the residuals of `jax.vjp`), without running it: the
  activation memory that `remat` trades for recomputation. It includes the
  weights the backward pass reads.

  Args:
    model: the Linen module.
    shape: the shape of one input image.
    batch_size: images in the pass (one device's share of the batch).

  Returns:
    The residuals' bytes.
  """
  images = jax.ShapeDtypeStruct((batch_size, *shape), jnp.float32)
  rng = jax.random.PRNGKey(0)
  variables = jax.eval_shape(
      lambda: model.init(rng, jnp.zeros((1, *shape)), train=False))
  mutable = ['batch_stats'] if 'batch_stats' in variables else False

  def backward_inputs(variables, images):
    def forward(params):
      out = model.apply({**variables, 'params': params}, images, train=True,
                        mutable=mutable, rngs={'dropout': rng})
      return (out[0] if mutable else out).astype(jnp.float32).sum()

    return jax.vjp(forward, variables['params'])[1]

  residuals = jax.eval_shape(backward_inputs, variables, images)
  return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(residuals))


def profile_one_step(setup: Timed, state, directory: str) -> str:
  """Traces one step into `directory`; returns a table of its largest ops.

  Args:
    setup: the step and its batch.
    state: the state to step from (donated where the step donates it).
    directory: a local directory for the jax.profiler trace.

  Returns:
    `largest_ops` of the trace, or a line saying none was written.
  """
  with jax.profiler.trace(directory, create_perfetto_trace=True):
    with jax.profiler.StepTraceAnnotation('train', step_num=0):
      state, metrics = setup.step(state, setup.batch)
    jax.block_until_ready((state, metrics))
  traces = sorted(glob.glob(os.path.join(directory, '**',
                                         'perfetto_trace.json.gz'),
                            recursive=True), key=os.path.getmtime)
  return largest_ops(traces[-1]) if traces else 'no perfetto trace written'


def largest_ops(path: str, top: int = 20) -> str:
  """Total time per (thread, op name) in a perfetto trace; only the device's
  threads (XLA ops, kernels on each stream) where there are any.

  Args:
    path: a gzipped perfetto trace (perfetto_trace.json.gz).
    top: how many ops to list.

  Returns:
    A heading line, then one line per op, the longest first.
  """
  with gzip.open(path) as f:
    trace = json.load(f)
  events = trace['traceEvents'] if isinstance(trace, dict) else trace
  names = {(e['name'], e['pid'], e.get('tid')): e['args']['name']
           for e in events
           if e.get('ph') == 'M' and 'name' in e.get('args', {})}
  # Device threads that recorded ops: a trace may name a device process
  # and leave it empty (the CPU's ops then run on host threads).
  timed = {e['pid'] for e in events if e.get('ph') == 'X'}
  device = {pid for (kind, pid, _), name in names.items()
            if kind == 'process_name' and name.startswith('/device:')
            and pid in timed}
  totals = collections.Counter()
  per_thread = collections.Counter()  # For each op's share of its thread.
  for e in events:
    if (e.get('ph') == 'X' and (not device or e['pid'] in device)
        and not e['name'].startswith('$')):  # '$file.py:line': Python frames.
      thread = names.get(('thread_name', e['pid'], e.get('tid')), '?')
      thread = thread.split('/')[0]  # One row for a pool's threads.
      totals[thread, e['name']] += e.get('dur', 0)
      per_thread[thread] += e.get('dur', 0)
  lines = [f'largest {"device" if device else "host"} ops of one step '
           '(total microseconds, share of their thread\'s time, thread, op):']
  lines += [f'{us:12.1f}  {us / (per_thread[thread] or 1):6.1%}  '
            f'{thread[:24]:24}  {name[:90]}'
            for (thread, name), us in totals.most_common(top)]
  return '\n'.join(lines)


def _fmt(value, spec: str, none: str = '-') -> str:
  return none if value is None else format(value, spec)


def table(r: dict) -> str:
  """The results as a one-row Markdown table.

  Args:
    r: what `measure` returns.

  Returns:
    The header, separator and row.
  """
  header = ('| model | strategy | devices | dtype | batch | compile s | '
            'step ms median / p90 | images/s | TFLOP/s | MFU | peak memory '
            '| residuals per device |')
  mem, kept = r['peak_memory_bytes'], r['residual_bytes_per_device']
  row = (f"| {r['model']} | {r['strategy']} | {r['devices']} | {r['dtype']} "
         f"| {r['batch_size']} | {r['compile_time_s']:.2f} "
         f"| {r['step_time_median_s'] * 1e3:.2f} / "
         f"{r['step_time_p90_s'] * 1e3:.2f} "
         f"| {r['images_per_sec']:,.0f} | {r['tflops_per_sec']:.3f} "
         f"| {_fmt(r['mfu'], '.1%')} "
         f"| {_fmt(mem and mem / 2**30, '.2f')}{' GiB' if mem else ''} "
         f"| {kept / 2**30:.3f} GiB |")
  return f"{header}\n|{'---|' * 12}\n{row}"


def measure(args) -> dict:
  """Benchmarks the train step as `args` say; returns the results.

  Args:
    args: the command line (`parse_args`).

  Returns:
    The results: settings, compile and step times, throughput, MFU,
    memory and the final loss.

  Raises:
    UserError: for a bad model, devices, mesh or batch size.
  """
  model, kwargs = create_model(args)
  shape = image_shape(args.model, kwargs)
  devices = select_devices(args)
  rng = np.random.default_rng(args.seed)
  batch = {'image': rng.standard_normal((args.batch_size, *shape),
                                        np.float32),
           'label': rng.integers(0, model.num_classes, args.batch_size,
                                 dtype=np.int32)}
  # The recipes' usual optimizer; its cost is part of the step.
  tx = optax.sgd(0.1, momentum=0.9)
  log(f'{args.model} {args.dtype}, batch {args.batch_size}, {args.strategy} '
       f'on {len(devices)} {devices[0].platform} device(s) '
       f'({devices[0].device_kind}); compiling...')
  setup = _prepare(args, model, tx, shape, devices, batch)
  first, times, state, metrics = time_steps(setup, args.warmup, args.steps)
  log(f'first call {first:.2f} s; timed {args.steps} steps.')
  loss = float(setup.to_host(metrics).compute()['loss'])

  median = float(np.median(times))
  # A training step costs about 3 forward passes (forward, plus the backward
  # pass's gradients with respect to activations and to weights).
  flops = 3 * forward_flops_per_image(args.model, shape, kwargs) * \
      args.batch_size
  peak = peak_tflops(devices[0].device_kind)
  achieved = flops / median / 1e12
  result = {
      'model': args.model, 'model_kwargs': kwargs,
      'strategy': args.strategy, 'dtype': args.dtype,
      'batch_size': args.batch_size, 'devices': len(devices),
      'batch_shards': setup.batch_shards,
      'platform': devices[0].platform, 'device_kind': devices[0].device_kind,
      'jax_version': jax.__version__, 'steps': args.steps,
      'warmup_steps': args.warmup,
      'compile_time_s': first,
      'step_time_median_s': median,
      'step_time_p90_s': float(np.percentile(times, 90)),
      'images_per_sec': args.batch_size / median,
      'flops_per_step': flops, 'tflops_per_sec': achieved,
      'peak_tflops_per_device': peak,
      'mfu': achieved / (peak * len(devices)) if peak else None,
      'peak_memory_bytes': peak_memory_bytes(devices),
      'residual_bytes_per_device': residual_bytes(
          model, shape, args.batch_size // setup.batch_shards),
      'final_loss': loss,
  }
  if args.profile:
    log(profile_one_step(setup, state, args.profile))
  return result

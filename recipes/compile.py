"""Compiles a config's steps for a TPU slice on a machine without TPUs:
`python -m recipes.compile --config=FILE --topology=v5e:4x4`.

The config's own train and eval steps, through its own strategy, mesh and
partition rules, at its global batch, are lowered with abstract inputs
(nothing is allocated) and compiled by libtpu for the slice's compile-only
devices (`pip install -e '.[tpu]'`). The report, per chip: the memory plan
against the chip's HBM and whether it fits, XLA's FLOPs and bytes beside
the zoo's FLOPs, the collectives by kind and the mesh axes they span, the
compile time, and a roofline estimate of the step time, images/s and MFU.
A language model (a decoder on tokens:PATH) compiles for sequences of
--config.seq_len tokens (or PATH's, where it is prepared: the data need not
exist), and the estimate gives tokens/s per chip and MFU by MaxText's count
of the model's FLOPs per token.
`--num_slices=N` compiles for N such slices (multislice, with
`--config.mesh.dcn_data=N`); `--find_max_batch` finds the largest global
batch that fits, by bisection over compiles; `--json=PATH` writes it all.
A config that does not fit ends with one line saying by how much and what
would help.
"""

import dataclasses
import json
import os
import sys
import time

# The devices compiled for are libtpu's compile-only ones; on a TPU VM the
# attached TPUs stay free for a run.
os.environ.setdefault('JAX_PLATFORMS', 'cpu')

# pylint: disable=wrong-import-position
from absl import app, flags, logging

from recipes.runtime import library_noise, startup

library_noise.import_tensorflow()  # Before anything else loads it.

import jax
import ml_collections
import numpy as np
import tensorflow_datasets as tfds

import zoo
from recipes import experiment
from recipes.aot import analysis, chips, topology
from recipes.config import command_line, validation
from recipes.data import datasets
from recipes.data.pipeline import dataset
from recipes.data.sources import array_records, labelled_texts, tfds_source
from recipes.parallel import strategy as strategies
from recipes.runtime import errors, progress, storage
from recipes.runtime.errors import UserError

# pylint: enable=wrong-import-position

TOPOLOGY = flags.DEFINE_string(
    'topology', None, 'The TPU slice, CHIP:SHAPE: v4:2x2x1 ... v4:16x16x16, '
    'v5e:2x2 ... v5e:16x16, v5p:2x2x1 ..., v6e:2x2 ... v6e:16x16.')
NUM_SLICES = flags.DEFINE_integer(
    'num_slices', 1, 'How many such slices (multislice: also set '
    '--config.mesh.dcn_data to it).')
FIND_MAX_BATCH = flags.DEFINE_bool(
    'find_max_batch', False, 'Also find the largest global batch whose '
    'train step fits, by bisection over compiles.')
JSON = flags.DEFINE_string('json', None, 'Also write the report here.')

# The schedule's constants (warmup and decay steps) are all that depends on
# the dataset's size; they do not change the compiled program's size.
STAND_IN_STEPS_PER_EPOCH = 1000


def input_shape(config: ml_collections.ConfigDict) -> tuple[int, tuple]:
  """(number of classes, the model's input shape) of the config's data,
  from the dataset's metadata: nothing is downloaded or read. For token
  sequences, (0, (seq_len,)) (`experiment.sequence_length`); for labelled
  text, the classes named by `classes` or the prepared manifest (else 2,
  which only the head's size depends on).

  Raises:
    UserError: for an unknown dataset, images of varying sizes that the
      preset keeps, or a sequence length not known or too long.
  """
  experiment.check_data_kind(config)
  if experiment.token_data(config):
    num_classes = 0
    if experiment.labelled_text(config):
      path = config.dataset.partition(':')[2]
      manifest = (None if config.tokenizer
                  else array_records.read_manifest(path))
      num_classes = len(labelled_texts.parse_classes(config.classes) or
                        (manifest or {}).get('class_names', ()) or (0, 1))
    return num_classes, (experiment.sequence_length(config),)
  preprocessing = experiment.preprocessing(config)
  name = config.dataset
  if name in datasets.OFFLINE_DATASETS:
    num_classes, stored = len(datasets.OFFLINE_DATASETS[name]), (28, 28, 1)
  elif datasets.encoded_prefix(name):
    source = datasets.open_encoded(name, experiment.encoded_options(config))
    num_classes = len(source.class_names)
    stored = (None, None, config.image_channels or 3)
  else:
    try:
      info = tfds_source.unprepared_builder(
          name, config.data_dir or None).info
    except tfds.core.registered.DatasetNotFoundError:
      raise datasets.unknown_dataset(name) from None
    num_classes = info.features['label'].num_classes
    stored = tuple(info.features['image'].shape)
  shape = preprocessing.image_shape(stored)
  if None in shape:
    raise UserError(f'dataset {name!r} has images of varying sizes, which '
                    f'augment={config.augment!r} keeps; compile with a preset '
                    'that crops to --config.image_size (e.g. '
                    '--config.augment=imagenet).')
  return num_classes, shape


class OutOfMemory(UserError):
  """XLA refused to compile a step: it needs more than the chip's HBM."""

  def __init__(self, step: str, batch_size: int, reason: str):
    super().__init__(f'the {step} step at batch {batch_size} does not fit '
                     f'({reason})')


@dataclasses.dataclass
class StepReport:
  """What the compiled step says about itself."""

  step: str
  batch_size: int
  compile_seconds: float
  memory: analysis.Memory
  cost: analysis.Cost
  collectives: list[analysis.Collective]
  # XLA counts one pass of each: see analysis.windowed_matmul_loops.
  windowed_matmul_loops: int


def _device_grid(strategy) -> tuple[np.ndarray, tuple[str, ...]]:
  """The strategy's devices shaped as its mesh, and the axis names."""
  mesh = getattr(strategy, 'mesh', None)
  if mesh is None:  # pmap: its devices in order, one axis.
    return np.array(strategy.devices), (strategy.batch_axis,)
  return mesh.devices, tuple(mesh.axis_names)


def compile_step(strategy, step: str, batch_size: int,
                 shape: tuple[int, ...]) -> StepReport:
  """Lowers and compiles one of the strategy's steps for a global batch.

  Args:
    strategy: the config's strategy, on compile-only devices.
    step: 'train' or 'eval'.
    batch_size: the global batch.
    shape: one image's shape, HWC; (seq_len,) for token sequences.

  Returns:
    The compiled step's report.
  """
  grid, axes = _device_grid(strategy)
  start = time.perf_counter()
  # Minutes for a large model: the log says what is compiling, and how long
  # it has taken so far.
  with progress.phase(f'Compiling the {step} step at batch {batch_size} for '
                      f'{grid.size} chips'):
    lowered = strategy.lower(step, dataset.batch_shapes(batch_size, shape,
                                                        step == 'eval'))
    try:
      compiled = lowered.compile()
    except jax.errors.JaxRuntimeError as e:
      if 'RESOURCE_EXHAUSTED' not in str(e):
        raise
      # XLA's own plan already exceeds the chip's memory.
      raise OutOfMemory(step, batch_size, str(e).split(
          'RESOURCE_EXHAUSTED: ')[-1].split('\n')[0]) from None
  seconds = time.perf_counter() - start
  hlo = compiled.as_text()
  return StepReport(step, batch_size, seconds, analysis.memory(compiled),
                    analysis.cost(compiled),
                    analysis.collectives(hlo, grid, axes),
                    analysis.windowed_matmul_loops(hlo))


def find_max_batch(strategy, unit: int, start: int, shape: tuple[int, ...],
                   chip: chips.Chip, tried: dict | None = None) -> int:
  """The largest global batch, a multiple of `unit`, whose train step fits
  the chip: doubling from `start`, then bisection. 0 if none does.

  `tried`, if given, receives {multiple of unit: whether it fit} of every
  compile."""
  tried = {} if tried is None else tried

  def fits(multiple: int) -> bool:
    if multiple not in tried:
      try:
        report = compile_step(strategy, 'train', multiple * unit, shape)
      except OutOfMemory as e:
        tried[multiple] = False
        logging.info('batch %d: %s', multiple * unit, e)
      else:
        tried[multiple] = report.memory.fits(chip)
        logging.info('batch %d: %s per chip, %s (compiled in %.0f s)',
                     multiple * unit, _gib(report.memory.total),
                     'fits' if tried[multiple] else 'does not fit',
                     report.compile_seconds)
    return tried[multiple]

  low, high = 0, max(start // unit, 1)
  while fits(high):  # Grow until it does not fit.
    low, high = high, high * 2
    if high > 1 << 20:
      return low * unit
  while high - low > 1:
    middle = (low + high) // 2
    if fits(middle):
      low = middle
    else:
      high = middle
  return low * unit


def _gib(n: float) -> str:
  return f'{n / chips.GiB:.2f} GiB'


def _what_helps(config) -> str:
  hints = []
  if config.strategy != 'sharded' or config.mesh.fsdp == 1:
    hints.append('--config.strategy=sharded --config.mesh.fsdp=-1 '
                 '--config.mesh.data=1 (splits parameters and optimizer '
                 'state)')
  if config.model_kwargs.get('remat') is False:
    hints.append('--config.model_kwargs.remat=True (recomputes activations)')
  elif 'remat' not in config.model_kwargs and hasattr(
      zoo.create(config.model, num_classes=1), 'remat'):
    hints.append("remat=True in the config file's model_kwargs (recomputes "
                 "activations)")
  hints.append('a smaller --config.batch_size (--find_max_batch finds the '
               'largest that fits)')
  return '; try ' + '; or '.join(hints) + '.'


def _too_big(total: int, chip: chips.Chip) -> str:
  over = total - chip.hbm_bytes * (1 - analysis.FIT_MARGIN)
  return (f'the train step needs {_gib(total)} per chip, '
          f'{_gib(over)} more than the {_gib(chip.hbm_bytes)} of a '
          f'{chip.name} chip less a {analysis.FIT_MARGIN:.0%} margin')


def table(result: dict) -> str:
  """The report as text."""
  seq_len = result.get('seq_len')
  if seq_len:
    flops = (f"{result['train_gflops_per_token']:.2f} GFLOPs per token to "
             f"train at {seq_len:,} tokens a sequence (MaxText's count).")
  else:
    flops = (f"the zoo counts {result['model_gflops_per_image']:.2f} "
             'GFLOPs per image forward (x3 to train).')
  lines = [f"{result['config']} on {result['topology']} x "
           f"{result['num_slices']} slice(s): {result['num_chips']} "
           f"chips, strategy {result['strategy']}, mesh {result['mesh']}",
           f"HBM per chip {_gib(result['hbm_bytes'])}; {flops}", '',
           '| step | batch | arguments | outputs | temporaries | aliased '
           '| total per chip | fits | XLA TFLOPs/chip | zoo TFLOPs/chip '
           '| HBM GB/chip | compile s |', '|' + '---|' * 12]
  for s in result['steps']:
    m = s['memory']
    lines.append(
        f"| {s['step']} | {s['batch_size']} | {_gib(m['arguments'])} | "
        f"{_gib(m['outputs'])} | {_gib(m['temporaries'])} | "
        f"{_gib(m['aliased'])} | {_gib(m['total'])} | "
        f"{'yes' if m['fits'] else 'NO'} | {s['cost']['flops'] / 1e12:.3f} | "
        f"{s['model_flops_per_chip'] / 1e12:.3f} | "
        f"{s['cost']['bytes_accessed'] / 1e9:.2f} | "
        f"{s['compile_seconds']:.1f} |")
  lines += ['', 'Collectives per step (per chip; axes the groups span, '
            'dcn = across slices):', '| step | kind | axes | ops | MB |',
            '|---|---|---|---|---|']
  for s in result['steps']:
    for c in s['collectives']:
      lines.append(f"| {s['step']} | {c['kind']} | "
                   f"{', '.join(c['axes']) or '-'} | {c['count']} | "
                   f"{c['bytes'] / 1e6:.2f} |")
  e = result['estimate']
  rate = (f"{e['tokens_per_second']:,.0f} tokens/s "
          f"({e['tokens_per_second_per_chip']:,.0f} per chip)" if seq_len
          else f"{e['images_per_second']:,.0f} images/s")
  lines += ['', f"Estimate (a roofline of XLA's costs at the chip's peak "
            f"{result['peak_tflops']:.0f} TFLOP/s and "
            f"{result['hbm_gbps']:.0f} GB/s, collectives not counted): "
            f"{e['step_seconds'] * 1e3:.1f} ms per step "
            f"({e['bound']}-bound), {rate}, MFU {e['mfu']:.0%}."]
  loops = {s['step']: s['windowed_matmul_loops'] for s in result['steps']
           if s['windowed_matmul_loops']}
  if loops:
    lines.append(
        'XLA counts one pass of each windowed matmul loop (' +
        ', '.join(f'{n} in the {step} step' for step, n in loops.items()) +
        "), so its FLOPs and bytes, and this estimate, leave out most of "
        'their work; LIBTPU_INIT_ARGS="--xla_tpu_enable_windowed_einsum_for_'
        'all_gather=false --xla_tpu_enable_windowed_einsum_for_reduce_'
        'scatter=false" compiles without them (docs/performance.md).')
  if 'max_batch_size' in result:
    lines.append(f"Largest global batch that fits: "
                 f"{result['max_batch_size']}.")
  return '\n'.join(lines)


def _as_dict(report: StepReport, chip) -> dict:
  out = dataclasses.asdict(report)
  out['memory'].update(total=report.memory.total,
                       fits=report.memory.fits(chip))
  return out


def compile_config(config, topology_name: str, num_slices: int = 1,
                   max_batch: bool = False, name: str = '') -> dict:
  """The report of `config` compiled for `num_slices` x `topology_name`.

  Raises:
    UserError: for a config, topology or mesh that does not fit.
  """
  validation.check(config)
  slice_ = chips.parse(topology_name)
  chip = slice_.chip
  logging.info('Compiling %s for %d x %s: the train step, then the eval '
               'step%s.', name or 'the config', num_slices, slice_.name,
               ', then the largest batch that fits' if max_batch else '')
  num_classes, shape = input_shape(config)  # Before libtpu starts.
  devices = topology.devices(slice_, num_slices)
  eval_batch_size = experiment.check_batch_sizes(config, len(devices))
  strategy = experiment.training(config, num_classes, shape,
                                 STAND_IN_STEPS_PER_EPOCH,
                                 STAND_IN_STEPS_PER_EPOCH, devices).strategy
  steps = [compile_step(strategy, 'train', config.batch_size, shape),
           compile_step(strategy, 'eval', eval_batch_size, shape)]
  tokens = experiment.token_data(config)
  if tokens:  # MaxText's count, per sequence; a forward is a third.
    per_token = analysis.train_flops_per_token(
        experiment.create_model(config, 0), shape[0])
    gflops = per_token * shape[0] / 3 / 1e9
  else:
    kwargs = {k: v for k, v in config.model_kwargs.items()
              if k != 'attention_impl'}
    gflops = zoo.model_info(config.model, input_shape=shape,
                            num_classes=num_classes, **kwargs).gflops
  train = steps[0]
  estimate = dataclasses.asdict(analysis.estimate(
      chip, len(devices), train.cost, train.batch_size,
      3 * gflops * 1e9 * train.batch_size))
  if tokens:
    estimate['tokens_per_second'] = estimate['images_per_second'] * shape[0]
    estimate['tokens_per_second_per_chip'] = (estimate['tokens_per_second']
                                              / len(devices))
  grid, axes = _device_grid(strategy)
  result = {
      'config': name, 'topology': slice_.name, 'num_slices': num_slices,
      'num_chips': len(devices), 'strategy': config.strategy,
      'mesh': dict(zip(axes, grid.shape)),
      'hbm_bytes': chip.hbm_bytes, 'peak_tflops': chip.peak_bf16_flops / 1e12,
      'hbm_gbps': chip.hbm_bytes_per_second / 1e9,
      'model_gflops_per_image': gflops,
      'steps': [dict(_as_dict(s, chip), model_flops_per_chip=(
          (3 if s.step == 'train' else 1) * gflops * 1e9 * s.batch_size
          / len(devices))) for s in steps],
      'estimate': estimate,
  }
  if tokens:
    result.update(seq_len=shape[0],
                  train_gflops_per_token=per_token / 1e9)
  if max_batch:
    unit, _ = strategies.batch_divisor(experiment.parallel_settings(config),
                                       len(devices))
    result['max_batch_size'] = find_max_batch(
        strategy, unit * max(config.grad_accum_steps, 1), config.batch_size,
        shape, chip)
  return result


def _writable(location: str):
  """The path of `location`, its folder made and a file written there once
  (then removed), so that a compile of minutes is not lost for want of it;
  UserError if it cannot be."""
  path = storage.path(location)
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
      raise IsADirectoryError(21, 'a directory')
    partial = path.parent / (path.name + storage.PARTIAL)
    partial.write_text('')  # Where write_whole writes the report first.
    partial.unlink()
  except OSError as e:
    raise _not_writable(location, e) from None
  return path


def _not_writable(location: str, error: OSError) -> UserError:
  if isinstance(error, FileExistsError):  # From mkdir: a file in the way.
    cause = f'{error.filename} is a file, not a folder'
  else:
    cause = error.strerror or str(error)
    if error.filename:
      cause = f'{cause}: {error.filename}'
  return UserError(f'cannot write --json={location!r} ({cause}); give a file '
                   'path that can be written.')


def main(argv):
  """The command."""
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if not logging.level_debug():
    library_noise.keep_out(logging.get_absl_handler())
  config = command_line.CONFIG.value
  name = command_line.CONFIG_FILE.path
  try:
    if JSON.value:  # A path that cannot be written fails before compiling.
      _writable(JSON.value)
    try:
      result = compile_config(config, TOPOLOGY.value, NUM_SLICES.value,
                              FIND_MAX_BATCH.value, name)
    except OutOfMemory as e:
      raise UserError(str(e) + _what_helps(config)) from None
    print(table(result), flush=True)
    if JSON.value:
      path = storage.path(JSON.value)
      try:
        storage.write_whole(path, json.dumps(result, indent=2))
      except OSError as e:  # The disk filled while compiling, say.
        raise _not_writable(JSON.value, e) from None
    train = result['steps'][0]['memory']
    if not train['fits']:
      raise UserError(_too_big(train['total'],
                               chips.parse(result['topology']).chip)
                      + _what_helps(config))
  except UserError as e:
    logging.debug('Details of the error below:', exc_info=True)
    sys.exit(f'error: {errors.shorten(str(e))}')


if __name__ == '__main__':
  startup.loaded()
  app.run(main, flags_parser=command_line.parser(
      'recipes.compile', __doc__,
      (command_line.CONFIG, TOPOLOGY, NUM_SLICES, FIND_MAX_BATCH, JSON),
      required=('config', 'topology')))

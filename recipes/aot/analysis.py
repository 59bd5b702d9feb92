"""What a compiled step says about itself: memory per chip, XLA's cost
analysis, the collectives in its optimized HLO, and a roofline estimate.

Everything is per chip: an SPMD program (jit, shard_map, pmap) is the one
program each device runs.
"""

import collections
import dataclasses
import math
import re

import numpy as np

from recipes.aot.chips import Chip

# A margin under the chip's HBM for what XLA's memory plan does not count
# (the runtime's own buffers, fragmentation).
FIT_MARGIN = 0.10


@dataclasses.dataclass(frozen=True)
class Memory:
  """Bytes per chip, from `compiled.memory_analysis()`."""

  arguments: int  # Parameters, optimizer state, batch.
  outputs: int
  temporaries: int
  aliased: int  # Outputs written into donated arguments.
  code: int

  @property
  def total(self) -> int:
    """What the step holds at its peak: outputs that reuse donated
    arguments' buffers are counted once."""
    return (self.arguments + self.outputs - self.aliased + self.temporaries
            + self.code)

  def fits(self, chip: Chip) -> bool:
    """Whether the total stays under the chip's HBM less FIT_MARGIN."""
    return self.total <= chip.hbm_bytes * (1 - FIT_MARGIN)


def memory(compiled) -> Memory:
  """The memory plan of a compiled step.

  Args:
    compiled: a jax.stages.Compiled.

  Returns:
    Its bytes per chip.
  """
  stats = compiled.memory_analysis()
  return Memory(arguments=stats.argument_size_in_bytes,
                outputs=stats.output_size_in_bytes,
                temporaries=stats.temp_size_in_bytes,
                aliased=stats.alias_size_in_bytes,
                code=stats.generated_code_size_in_bytes)


@dataclasses.dataclass(frozen=True)
class Cost:
  """XLA's cost analysis of one step on one chip."""

  flops: float
  bytes_accessed: float


def cost(compiled) -> Cost:
  """XLA's FLOPs and HBM bytes of one step, per chip.

  Args:
    compiled: a jax.stages.Compiled.

  Returns:
    The costs (0 where XLA gives none).
  """
  analysis = compiled.cost_analysis()
  if isinstance(analysis, list):  # Older JAX: one dict per program.
    analysis = analysis[0] if analysis else {}
  return Cost(float(analysis.get('flops', 0.0)),
              float(analysis.get('bytes accessed', 0.0)))


@dataclasses.dataclass(frozen=True)
class Collective:
  """The collectives of one kind over the same mesh axes."""

  kind: str  # all-reduce, all-gather, reduce-scatter, all-to-all, ...
  axes: tuple[str, ...]  # The mesh axes the groups span; 'dcn': slices.
  count: int
  bytes: int  # Output bytes per chip, summed over the ops.


_KINDS = ('all-reduce', 'all-gather', 'reduce-scatter', 'all-to-all',
          'collective-permute')
_INSTRUCTION = re.compile(
    r'=\s*(?P<result>.*?)\s(?P<op>' + '|'.join(_KINDS) +
    r')(?P<start>-start)?\(')
_ARRAY = re.compile(r'\b([a-z]+[0-9]*)\[([0-9,]*)\]')
_GROUPS = re.compile(r'replica_groups=(\{[{}0-9, ]*\}|\[[0-9,]+\]<=\[[0-9,]+\]'
                     r'(?:T\([0-9,]+\))?)')
# Multislice: what crosses slices goes over the data-center network as
# host transfers to the megascale runtime, named after the collective.
_DCN_SEND = re.compile(r'=\s*(?P<result>.*?)\ssend\(.*_xla_host_transfer_'
                       r'rendezvous="(?P<op>[a-z-]+).*_xla_megascale')
_DTYPE_BYTES = {'pred': 1, 's8': 1, 'u8': 1, 'f16': 2, 'bf16': 2, 's16': 2,
                'u16': 2, 'f32': 4, 's32': 4, 'u32': 4, 'f64': 8, 's64': 8,
                'u64': 8, 'c64': 8, 'c128': 16}


def _array_bytes(text: str) -> list[int]:
  sizes = []
  for dtype, dims in _ARRAY.findall(text):
    if dtype in _DTYPE_BYTES:
      count = math.prod(int(d) for d in dims.split(',') if d)
      sizes.append(count * _DTYPE_BYTES[dtype])
  return sizes


def replica_groups(text: str) -> list[list[int]]:
  """XLA's replica_groups attribute as lists of ids: the explicit form
  {{0,1},{2,3}} and the iota form [2,2]<=[4] or [2,2]<=[2,2]T(1,0).

  Args:
    text: the attribute's value.

  Returns:
    The groups; [] for {} (one group of every device).
  """
  if text.startswith('{'):
    return [[int(i) for i in group.split(',') if i.strip()]
            for group in re.findall(r'\{([0-9, ]*)\}', text[1:-1])]
  shape, reshape, transpose = re.fullmatch(
      r'\[([0-9,]+)\]<=\[([0-9,]+)\](?:T\(([0-9,]+)\))?', text).groups()
  ids = np.arange(math.prod(int(n) for n in reshape.split(',')))
  ids = ids.reshape([int(n) for n in reshape.split(',')])
  if transpose:
    ids = ids.transpose([int(n) for n in transpose.split(',')])
  return ids.reshape([int(n) for n in shape.split(',')]).tolist()


def _axes_spanned(groups: list[list[int]], coordinates: np.ndarray,
                  axis_names: tuple[str, ...]) -> tuple[str, ...]:
  """The mesh axes along which some group's members differ."""
  if not groups:  # One group of all devices.
    varying = np.ptp(coordinates, axis=0) > 0
  else:
    varying = np.zeros(len(axis_names), bool)
    for group in groups:
      if len(group) > 1:
        varying |= np.ptp(coordinates[group], axis=0) > 0
  return tuple(a for a, v in zip(axis_names, varying) if v)


def collectives(hlo: str, device_grid: np.ndarray,
                axis_names: tuple[str, ...]) -> list[Collective]:
  """The collectives of an optimized HLO module, by kind and mesh axes.

  Args:
    hlo: `compiled.as_text()`.
    device_grid: the mesh's devices, shaped as the mesh (for pmap, the
      devices in order, one axis); on several slices, the ids in the
      program are those of one slice's part of the mesh.
    axis_names: the mesh's axis names.

  Returns:
    One Collective per (kind, axes), in the order first seen.
  """
  slices = np.vectorize(lambda d: getattr(d, 'slice_index', 0) or 0)(
      device_grid)
  # The program's device ids number one slice's devices in mesh order.
  coordinates = np.argwhere(slices == slices.flat[0])
  found = collections.OrderedDict()

  def add(kind, axes, size):
    count, total = found.get((kind, axes), (0, 0))
    found[(kind, axes)] = (count + 1, total + size)

  for line in hlo.splitlines():
    match = _INSTRUCTION.search(line)
    if match:
      sizes = _array_bytes(match['result'])
      # An async start's result holds its operands beside its output.
      size = max(sizes, default=0) if match['start'] else sum(sizes)
      groups = _GROUPS.search(line)
      if match['op'] == 'collective-permute':
        pairs = re.search(r'source_target_pairs=\{([0-9,{} ]*)\}', line)
        members = [[int(i) for i in p.split(',')] for p in
                   re.findall(r'\{([0-9]+,[0-9]+)\}', pairs[1])] if pairs else []
      else:
        members = replica_groups(groups[1]) if groups else []
      add(match['op'], _axes_spanned(members, coordinates, axis_names), size)
      continue
    match = _DCN_SEND.search(line)
    if match:
      add(match['op'], ('dcn',), max(_array_bytes(match['result']),
                                     default=0))
  return [Collective(kind, axes, count, total)
          for (kind, axes), (count, total) in found.items()]


# A windowed (collective) matmul: the SPMD partitioner's loop that multiplies
# by one or two weight shards per step while the next ones arrive.
_WINDOWED_LOOP = re.compile(
    r'\swhile\(.*\bbody=%?[\w.-]*windowed_dot_general_body')


def windowed_matmul_loops(hlo: str) -> int:
  """How many windowed matmul loops an optimized HLO module holds.

  XLA's cost analysis counts a loop's body once, so the FLOPs and bytes of
  a step with such loops leave out most of their steps.

  Args:
    hlo: `compiled.as_text()`.

  Returns:
    The number of `while` instructions whose body is a windowed matmul.
  """
  return sum(1 for line in hlo.splitlines() if _WINDOWED_LOOP.search(line))


@dataclasses.dataclass(frozen=True)
class Estimate:
  """A roofline estimate of one step: the slower of compute at the chip's
  peak and HBM traffic at its bandwidth; collectives are not counted."""

  step_seconds: float
  images_per_second: float
  mfu: float  # The model's FLOPs (the zoo's count) over the peak.
  bound: str  # 'compute' or 'memory'.


def estimate(chip: Chip, num_chips: int, cost_per_chip: Cost,
             batch_size: int, model_flops_per_step: float) -> Estimate:
  """The roofline estimate of a step from XLA's per-chip costs.

  Args:
    chip: the chip (its peak and bandwidth).
    num_chips: the chips the step runs on.
    cost_per_chip: XLA's cost analysis of the step.
    batch_size: the global batch.
    model_flops_per_step: the model's training FLOPs for the global batch
      (3 x the forward pass, by the zoo's count).

  Returns:
    The estimate.
  """
  compute = cost_per_chip.flops / chip.peak_bf16_flops
  traffic = cost_per_chip.bytes_accessed / chip.hbm_bytes_per_second
  seconds = max(compute, traffic, 1e-12)
  return Estimate(
      step_seconds=seconds, images_per_second=batch_size / seconds,
      mfu=model_flops_per_step / (seconds * num_chips * chip.peak_bf16_flops),
      bound='compute' if compute >= traffic else 'memory')


def train_flops_per_token(model, seq_len: int) -> float:
  """The training FLOPs per token of a decoder (zoo/decoder.py) on
  sequences of `seq_len` tokens, as MaxText counts them for its MFU
  (`calculate_tflops_training_per_device` in its maxtext_utils.py): 3 x
  (forward and backward) the forward's 2 FLOPs per multiply-add of each
  weight matrix (attention's query, key, value and output projections, the
  MLP's, the output head), plus the attention's own products, halved for
  the causal mask; the embedding lookup, norms and biases not counted.

  Args:
    model: a zoo Decoder (its dimensions are read).
    seq_len: the tokens per sequence.

  Returns:
    FLOPs per token of one train step.
  """
  heads = model.num_heads
  kv_heads = model.num_kv_heads or heads
  head_dim = model.head_dim or model.hidden_size // heads
  width = model.hidden_size
  qkv = width * (heads + 2 * kv_heads) * head_dim
  projection = heads * head_dim * width
  mlp = (3 if model.mlp == 'swiglu' else 2) * width * model.mlp_dim
  weights = model.num_layers * (qkv + projection + mlp) + (
      width * model.vocab_size)
  # QK^T and the weighted values: 2 x 2 x seq_len x head_dim per head and
  # token, half of it under the causal mask.
  attention = model.num_layers * 4 * seq_len * heads * head_dim / 2
  return 3 * (2 * weights + attention)


"""The TPU chips a config can be compiled for, with their published figures.

Sources, Google Cloud's system architecture pages (cloud.google.com/tpu/docs/
v4, /v5e, /v5p, /v6e), "key chip specifications": peak dense bf16 compute,
HBM capacity and HBM bandwidth per chip. One chip is one JAX device on all of
them (v4 and v5p run their two TensorCores as one megacore).
"""

import dataclasses
import math
import re

from recipes.runtime.errors import UserError


@dataclasses.dataclass(frozen=True)
class Chip:
  """One TPU generation's chip.

  Attributes:
    name: the name in topology strings, e.g. 'v5e'.
    device_kind: what JAX's devices report as `device_kind`.
    hbm_bytes: HBM per chip.
    peak_bf16_flops: dense bf16 FLOP/s per chip.
    hbm_bytes_per_second: HBM bandwidth per chip.
    dims: how many numbers a topology of it has ('2x2' or '2x2x1').
    chip_config: libtpu's chip configuration as on a live host (v4: its two
      cores as one megacore device); None: libtpu's default.
  """

  name: str
  device_kind: str
  hbm_bytes: int
  peak_bf16_flops: float
  hbm_bytes_per_second: float
  dims: int
  chip_config: str | None = None


GiB = 1 << 30

CHIPS = {c.name: c for c in (
    Chip('v4', 'TPU v4', 32 * GiB, 275e12, 1200e9, 3, 'megacore'),
    Chip('v5e', 'TPU v5 lite', 16 * GiB, 197e12, 819e9, 2),
    Chip('v5p', 'TPU v5', 95 * GiB, 459e12, 2765e9, 3, 'megachip_tccontrol'),
    Chip('v6e', 'TPU v6 lite', 32 * GiB, 918e12, 1640e9, 2,
         'megachip_tccontrol'),
)}


@dataclasses.dataclass(frozen=True)
class Topology:
  """A slice's chip and shape, e.g. v5e:4x4 (16 chips)."""

  chip: Chip
  shape: tuple[int, ...]

  @property
  def name(self) -> str:
    return f'{self.chip.name}:{"x".join(map(str, self.shape))}'

  @property
  def num_chips(self) -> int:
    return math.prod(self.shape)


def parse(name: str) -> Topology:
  """'v5e:4x4' -> Topology(v5e, (4, 4)).

  Args:
    name: CHIP:AxB (v5e, v6e) or CHIP:AxBxC (v4, v5p).

  Returns:
    The topology.

  Raises:
    UserError: for an unknown chip or a malformed shape.
  """
  chip_name, _, shape = name.strip().partition(':')
  chip = CHIPS.get(chip_name.lower())
  example = {2: '4x4', 3: '2x2x4'}
  if chip is None:
    raise UserError(f'unknown TPU {chip_name!r} in --topology={name!r}; '
                    f'choose one of {", ".join(CHIPS)}, e.g. '
                    f'--topology=v5e:4x4.')
  if not re.fullmatch(r'[1-9]\d*(x[1-9]\d*)*', shape) or \
      shape.count('x') + 1 != chip.dims:
    raise UserError(f'bad --topology={name!r}: a {chip.name} slice is '
                    f'{chip.dims} sizes, e.g. {chip.name}:'
                    f'{example[chip.dims]}.')
  return Topology(chip, tuple(int(n) for n in shape.split('x')))

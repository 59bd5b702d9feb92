"""Compile-only devices of a TPU topology, from libtpu, on any machine.

`jax.experimental.topologies.get_topology_desc` asks libtpu for the devices
of a slice that is not attached: programs can be compiled for them (XLA's
real TPU compiler, its real memory plan) but not run. libtpu comes with the
`tpu` extra (`pip install -e '.[tpu]'`).
"""

import importlib.util
import os

import jax
from jax.experimental import topologies

from recipes.aot.chips import Topology
from recipes.runtime import library_noise
from recipes.runtime.errors import UserError


def have_libtpu() -> bool:
  """Whether libtpu is installed (it need not find a TPU)."""
  return importlib.util.find_spec('libtpu') is not None


def devices(topology: Topology, num_slices: int = 1) -> list:
  """The compile-only devices of `num_slices` slices of `topology`.

  Args:
    topology: the slice (recipes/aot/chips.py `parse`).
    num_slices: how many such slices, joined by the data-center network.

  Returns:
    One device per chip, slice after slice; each has `slice_index` where
    there are several slices.

  Raises:
    UserError: without libtpu, or for a shape libtpu does not offer.
  """
  if not have_libtpu():
    raise UserError("compiling for a TPU needs libtpu: pip install -e "
                    "'.[tpu]' (it runs on machines without a TPU).")
  if num_slices < 1:
    raise UserError(f'--num_slices={num_slices}: give 1 or more.')
  # libtpu's lock file keeps a second process off a machine's TPUs; nothing
  # here runs on a TPU, so compiles may run side by side.
  os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
  kwargs = {'num_slices': num_slices}
  if topology.chip.chip_config:
    kwargs['chip_config_name'] = topology.chip.chip_config
  try:
    with library_noise.stderr_without_no_tpu_notices():
      found = topologies.get_topology_desc(
          platform='tpu', topology_name=topology.name, **kwargs).devices
  except jax.errors.JaxRuntimeError as e:
    reason = str(e).split(': ', 1)[-1].split('\n')[0]
    raise UserError(f'libtpu does not offer --topology={topology.name} '
                    f'({reason}); see the chip\'s page of Cloud TPU\'s '
                    'documentation for its slice shapes.') from None
  return list(found)

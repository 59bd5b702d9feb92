"""The ('data', 'fsdp', 'tensor') device mesh of the sharded recipe: its axis
sizes from the config, the mesh itself, and a description for the log.

On several TPU slices (multislice) the data axis also spans the slices:
`mesh.dcn_data` of them, joined by the data-center network (DCN), each
holding a (data, fsdp, tensor) mesh of its own chips (ICI). Only the
gradient reduction then crosses the slower DCN; the checkpoint layout is
the same as on one slice, since the axes are.
"""

import math
from typing import Mapping

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh

from recipes.parallel.partition_rules import MESH_AXES
from recipes.runtime.errors import UserError


def _one_slice_shape(sizes: Mapping[str, int],
                     num_devices: int) -> tuple[int, ...]:
  """The axis sizes within one slice, in the order of MESH_AXES."""
  given = {axis: int(sizes[axis]) for axis in MESH_AXES}
  flag = ' '.join(f'--config.mesh.{a}={s}' for a, s in given.items())
  free = [a for a, s in given.items() if s == -1]
  if len(free) > 1 or any(s == 0 or s < -1 for s in given.values()):
    raise UserError(f'bad mesh {flag}: give each axis a positive size, and '
                    'at most one of them -1 (the devices left over).')
  fixed = math.prod(s for s in given.values() if s != -1)
  if free:
    if num_devices % fixed:
      raise UserError(f'mesh {flag} cannot use the {num_devices} devices: '
                      f'the fixed sizes multiply to {fixed}, which does not '
                      f'divide {num_devices}.')
    given[free[0]] = num_devices // fixed
  elif fixed != num_devices:
    raise UserError(f'mesh {flag} has {fixed} devices but there are '
                    f'{num_devices}; make the sizes multiply to {num_devices}'
                    ', or set one of them to -1.')
  return tuple(given[a] for a in MESH_AXES)


def _slices(sizes: Mapping[str, int]) -> int:
  slices = int(sizes.get('dcn_data', 1))
  if slices < 1:
    raise UserError(f'bad --config.mesh.dcn_data={slices}: the number of '
                    'slices is at least 1.')
  return slices


def mesh_shape(sizes: Mapping[str, int], num_devices: int) -> tuple[int, ...]:
  """Axis sizes in the order of MESH_AXES; one size -1 takes what is left.

  Args:
    sizes: a size for each of 'data', 'fsdp' and 'tensor' (config.mesh),
      within one slice; 'dcn_data' (default 1), the number of slices.
    num_devices: the devices the mesh must use, all of them.

  Returns:
    The sizes of the whole mesh as a tuple, multiplying to `num_devices`:
    the data axis is dcn_data times the one slice's.

  Raises:
    UserError: for sizes that are not positive (or one -1), or do not
      multiply to `num_devices`.
  """
  slices = _slices(sizes)
  if num_devices % slices:
    raise UserError(f'--config.mesh.dcn_data={slices} slices cannot share '
                    f'the {num_devices} devices equally.')
  data, fsdp, tensor = _one_slice_shape(sizes, num_devices // slices)
  return slices * data, fsdp, tensor


def slice_count(devices) -> int:
  """How many TPU slices `devices` span (1 for devices without slices)."""
  return len({getattr(d, 'slice_index', 0) for d in devices})


def make_mesh(sizes: Mapping[str, int], devices=None) -> Mesh:
  """The ('data', 'fsdp', 'tensor') mesh over `devices` (default: all).

  Args:
    sizes: the axis sizes, as for `mesh_shape`.
    devices: the devices, in order; None: jax.devices().

  Returns:
    The mesh, with Auto axis types; over several slices, the data axis
    spans the slices (mesh_utils.create_hybrid_device_mesh).

  Raises:
    UserError: for sizes that do not fit the devices, or a dcn_data that
      is not the number of slices.
  """
  devices = jax.devices() if devices is None else list(devices)
  slices, found = _slices(sizes), slice_count(devices)
  if slices != found:
    raise UserError(f'--config.mesh.dcn_data={slices}, but the devices are '
                    f'{found} slice{"s" if found > 1 else ""}: set it to '
                    f'{found}.')
  # Auto axes: Flax Linen's logical partitioning does not work with the
  # Explicit axes jax.make_mesh gives by default.
  axis_types = (AxisType.Auto,) * len(MESH_AXES)
  shape = mesh_shape(sizes, len(devices))
  if slices == 1:
    return jax.make_mesh(shape, MESH_AXES, axis_types=axis_types,
                         devices=devices)
  # jax.make_mesh refuses devices of several slices.
  in_slice = (shape[0] // slices, *shape[1:])
  grid = mesh_utils.create_hybrid_device_mesh(
      in_slice, (slices, 1, 1), devices)
  return Mesh(grid, MESH_AXES, axis_types=axis_types)


def describe_mesh(mesh: Mesh) -> str:
  """The mesh's axes and device ids, for the log.

  Args:
    mesh: the mesh.

  Returns:
    A few lines of text.
  """
  ids = np.vectorize(lambda d: d.id)(mesh.devices)
  shape = ', '.join(f'{a}={s}' for a, s in mesh.shape.items())
  return (f'mesh {shape}, axis names {mesh.axis_names}, device ids in mesh '
          f'order (data, fsdp, tensor):\n{ids}')

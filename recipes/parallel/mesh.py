"""The ('data', 'fsdp', 'tensor') device mesh of the sharded recipe: its axis
sizes from the config, the mesh itself, and a description for the log."""

import math
from typing import Mapping

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from recipes.parallel.partition_rules import MESH_AXES
from recipes.runtime.errors import UserError


def mesh_shape(sizes: Mapping[str, int], num_devices: int) -> tuple[int, ...]:
  """Axis sizes in the order of MESH_AXES; one size -1 takes what is left.

  Args:
    sizes: a size for each of 'data', 'fsdp' and 'tensor' (config.mesh).
    num_devices: the devices the mesh must use, all of them.

  Returns:
    The sizes as a tuple, multiplying to `num_devices`.

  Raises:
    UserError: for sizes that are not positive (or one -1), or do not
      multiply to `num_devices`.
  """
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


def make_mesh(sizes: Mapping[str, int], devices=None) -> Mesh:
  """The ('data', 'fsdp', 'tensor') mesh over `devices` (default: all).

  Args:
    sizes: the axis sizes, as for `mesh_shape`.
    devices: the devices, in order; None: jax.devices().

  Returns:
    The mesh, with Auto axis types.

  Raises:
    UserError: for sizes that do not fit the devices.
  """
  devices = jax.devices() if devices is None else list(devices)
  # Auto axes: Flax Linen's logical partitioning does not work with the
  # Explicit axes jax.make_mesh gives by default.
  return jax.make_mesh(mesh_shape(sizes, len(devices)), MESH_AXES,
                       axis_types=(AxisType.Auto,) * len(MESH_AXES),
                       devices=devices)


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

"""Workdir names users give: spaces, non-ASCII letters and glob characters
save and resume; a name orbax cannot assemble a checkpoint under ('[') is
never committed as complete (and the command refuses it up front,
tests/integration/test_bad_input.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from etils import epath

from recipes import checkpoint
from recipes.checkpoint import checksums
from recipes.runtime import storage
from recipes.runtime.errors import UserError

STATE = {'params': {'w': jnp.arange(8.0)}, 'step': jnp.asarray(3)}


def _target():
  one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=one), STATE)


@pytest.mark.parametrize('name', ['with space', 'naïve-ü', 'st*ar', 'q?m',
                                  'brace{1}'])
def test_checkpoints_save_and_restore_under_unusual_names(tmp_path, name):
  workdir = tmp_path / name
  with checkpoint.opened(str(workdir)) as mngr:
    checkpoint.save(mngr, 1, STATE)
  item = epath.Path(workdir) / 'checkpoints' / '1' / 'default'
  assert (item / 'manifest.ocdbt').exists()
  assert checksums.problem(item) is None
  with checkpoint.opened(str(workdir)) as mngr:
    restored, step = checkpoint.restore_latest(mngr, _target())
  assert step == 1
  np.testing.assert_array_equal(restored['params']['w'], STATE['params']['w'])


def test_an_incomplete_checkpoint_is_never_committed(tmp_path):
  workdir = tmp_path / 'lr[0.1]'
  with pytest.raises(UserError, match='the checkpoint is incomplete: orbax '
                     'did not merge ocdbt.process_0'):
    with checkpoint.opened(str(workdir)) as mngr:
      checkpoint.save(mngr, 1, STATE)
  with checkpoint.opened(str(workdir)) as mngr:
    assert mngr.all_steps() == []  # Not seen as a checkpoint.


def test_bracketed_names_are_refused_with_a_name_without_them():
  with pytest.raises(UserError) as error:
    storage.checkpoint_path('runs/lr[0.1]')
  assert str(error.value) == (
      "'runs/lr[0.1]' has '[' or ']' in it, which the checkpoint library "
      'reads as a pattern: its checkpoints would be written incomplete. '
      "Choose a directory without them, e.g. 'runs/lr-0.1'.")

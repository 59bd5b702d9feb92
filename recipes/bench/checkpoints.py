"""Times saving and restoring a train state, with and without checksums.

    python -m recipes.bench.checkpoints --model=resnet50 --dir=/tmp/ckpt_bench

The state is the model's with SGD momentum (ResNet-50: 25.6M parameters, the
momentum and the batch-norm statistics, about 205 MB), on one device. Each
repeat saves it into a fresh directory and restores it, twice: as plain
orbax (`StandardCheckpointHandler`), and as the recipes do it
(recipes/checkpoint/store.py: checksums written when the save completes, checked
before the restore). Prints a table of the medians:

- save returns: the training thread is blocked this long (orbax copies the
  arrays to the host, then writes in the background);
- save complete: until the checkpoint is committed, checksums included;
- restore: reading it back onto the device, checksums checked first.
"""

import argparse
import statistics
import time

import jax
import optax
import orbax.checkpoint as ocp
from etils import epath

import zoo
from recipes import checkpoint
from recipes.core import state_spec
from recipes.runtime import startup


def _state(model_name: str):
  model = zoo.create(model_name, num_classes=1000)
  tx = optax.sgd(0.1, momentum=0.9)
  return state_spec.make(model, tx, zoo.input_shape(model_name)).create_state()


def _plain_manager(directory: epath.Path) -> ocp.CheckpointManager:
  return ocp.CheckpointManager(
      directory / 'checkpoints', item_handlers=ocp.StandardCheckpointHandler(),
      options=ocp.CheckpointManagerOptions(create=True))


def _time_once(state, target, directory: epath.Path, checksummed: bool):
  """(save returns, save complete, restore) in seconds."""
  if checksummed:
    mngr = checkpoint.manager(directory)
    save = lambda: checkpoint.save(mngr, 1, state)
    restore = lambda: checkpoint.restore_latest(mngr, target)[0]
  else:
    mngr = _plain_manager(directory)
    save = lambda: mngr.save(1, args=ocp.args.StandardSave(state))
    restore = lambda: mngr.restore(1, args=ocp.args.StandardRestore(target))
  start = time.perf_counter()
  save()
  returned = time.perf_counter() - start
  mngr.wait_until_finished()
  complete = time.perf_counter() - start
  start = time.perf_counter()
  jax.block_until_ready(restore())
  restored = time.perf_counter() - start
  mngr.close()
  return returned, complete, restored


def main(argv=None):
  """Times both kinds of checkpoint and prints the table of medians.

  Args:
    argv: the arguments (without the program name); None: sys.argv's.
  """
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--model', default='resnet50')
  parser.add_argument('--dir', required=True,
                      help='where to write (a local path or gs://...)')
  parser.add_argument('--repeats', type=int, default=3)
  args = parser.parse_args(argv)
  state = _state(args.model)
  target = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
      state)
  size = sum(x.nbytes for x in jax.tree.leaves(state))
  root = epath.Path(args.dir)
  runs = {False: [], True: []}
  # Repeat 0 warms up (compilation, first writes) and is not counted; the
  # two kinds take turns, so that both see the same machine.
  for repeat in range(args.repeats + 1):
    for checksummed in (False, True):
      directory = root / f'{"with" if checksummed else "without"}-{repeat}'
      if directory.exists():
        directory.rmtree()
      timing = _time_once(state, target, directory, checksummed)
      if repeat:
        runs[checksummed].append(timing)
  rows = [(checksummed, [statistics.median(r) for r in zip(*timings)])
          for checksummed, timings in runs.items()]
  print(f'\n{args.model} train state, {size / 1e6:,.0f} MB, median of '
        f'{args.repeats}; JAX {jax.__version__} on {jax.devices()[0].platform}')
  print('| checksums | save returns s | save complete s | restore s |')
  print('|---|---|---|---|')
  for checksummed, (returned, complete, restored) in rows:
    print(f'| {"yes" if checksummed else "no"} | {returned:.2f} | '
          f'{complete:.2f} | {restored:.2f} |')


if __name__ == '__main__':
  startup.loaded()
  main()

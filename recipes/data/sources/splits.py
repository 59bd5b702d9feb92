"""TFDS split strings ('train[:90%]', 'test[:1000]', 'train+test') resolved
against the sizes of named splits, by TFDS's own ReadInstruction, so a slice
selects the same examples from every source."""

import types

import tensorflow_datasets as tfds

from recipes.runtime.errors import UserError


def resolve(split: str, sizes: dict[str, int], where: str
            ) -> list[tuple[str, int, int]]:
  """The parts of the named splits that `split` reads.

  Args:
    split: a TFDS split string.
    sizes: the examples in each named split.
    where: the dataset, for messages ("the folder /data/pets").

  Returns:
    (split name, from, to) for each part, in order.

  Raises:
    UserError: for a bad split string or a split that is not there.
  """
  try:
    instruction = tfds.core.ReadInstruction.from_spec(split)
    infos = {name: types.SimpleNamespace(num_examples=n, shard_lengths=[n])
             for name, n in sizes.items()}
    parts = instruction.to_absolute(infos)
  except (ValueError, NotImplementedError, KeyError) as e:
    message = ' '.join(str(e).split())
    if isinstance(e, KeyError):
      message = f'there is no split {e}'
    raise UserError(f'bad split {split!r} for {where} (splits '
                    f'{", ".join(sizes) or "none"}): {message}') from None
  return [(str(p.splitname), p.from_ or 0,
           sizes[str(p.splitname)] if p.to is None else p.to)
          for p in parts]

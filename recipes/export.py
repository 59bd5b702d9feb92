"""Writes a trained or converted zoo model as a timm, torchvision or
transformers state dict, the inverse of `python -m recipes.convert`.

    python -m recipes.export --to=timm WORKDIR model.safetensors
    python -m recipes.export --to=torchvision RUN/checkpoints/900 r50.safetensors
    python -m recipes.export --to=transformers GPT2_RUN FOLDER/model.safetensors

SRC is a run's workdir (its latest checkpoint), one of its checkpoints, or a
directory `python -m recipes.convert` wrote; the model and its arguments are
read from the run's config.json (the classes from class_names.json) or the
converted directory's model.json. The file is written with the
`safetensors` package and loads with `model.load_state_dict(
safetensors.torch.load_file(DST))` into the original library's model of
the same name (zoo/convert/export.py inverts the converter). A
transformers language model's file is the model.safetensors of a folder
whose config.json gives its sizes, for `from_pretrained(FOLDER)` (a tied
head is the token embedding, not in the file). DST must not exist: nothing
is overwritten. Mistakes end with one line and exit status 1 (2 for a usage
error).
"""

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import safetensors
import safetensors.numpy
from flax import traverse_util

from recipes.checkpoint import records, resume
from recipes.checkpoint.converted import MODEL_FILE
from recipes.runtime import library_noise, startup, storage
from recipes.runtime.errors import UserError, describe, shorten
from zoo import convert, registry
from zoo.convert import export
from zoo.convert.transfer import target_shapes

_TARGETS = ('timm', 'torchvision', 'transformers')


class _Parser(argparse.ArgumentParser):

  def error(self, message):
    self.exit(2, f'error: {message}; see python -m recipes.export --help.\n')


def _parser() -> argparse.ArgumentParser:
  parser = _Parser(
      prog='python -m recipes.export',
      description='Writes a zoo model of a run or a converted directory as '
      'a timm, torchvision or transformers state dict (.safetensors).')
  parser.add_argument('--to', required=True, choices=_TARGETS,
                      help='the library whose model the file is for')
  parser.add_argument('src', help='a workdir, one of its checkpoints, or a '
                      'directory python -m recipes.convert wrote')
  parser.add_argument('dst', help='a new .safetensors file')
  return parser


def model_of(src: str, num_classes: bool = True) -> tuple[str, dict]:
  """(zoo name, `zoo.create` arguments) of the model saved at `src`.

  Args:
    src: a workdir, a checkpoints directory or one step of it, or a
      converted directory.
    num_classes: read an image model's classes off its checkpoint; False:
      the arguments as recorded.

  Returns:
    The model's name and arguments, num_classes included for an image
    model (a run's config does not hold it: it is read off the checkpoint's
    head).

  Raises:
    UserError: no config.json or model.json at `src` or above it, or no
      checkpoint there.
  """
  path = storage.path(src)
  for directory in (path, path.parent, path.parent.parent):
    if (directory / MODEL_FILE).is_file():
      return _model_record(directory / MODEL_FILE)
    if (directory / 'config.json').is_file():
      name, kwargs = _model_record(directory / 'config.json')
      if not num_classes or _is_text(name):  # A text model's: its vocabulary.
        return name, kwargs
      return name, {**kwargs, 'num_classes': _num_classes(src, name, kwargs)}
  raise UserError(f'{src} is not a workdir, a checkpoint of one, or a '
                  f'directory python -m recipes.convert wrote (no '
                  f'config.json or {MODEL_FILE} there or above).')


def _is_text(name: str) -> bool:
  try:
    return registry.spec(name).modality == 'text'
  except ValueError:  # Not a zoo model: said where it is made.
    return False


def _model_record(file) -> tuple[str, dict]:
  """The 'model' and 'model_kwargs' of a run's config.json or a converted
  directory's model.json; a UserError naming the file if it is damaged."""
  try:
    record = records.read(
        file, _names_a_model,
        "a JSON object with the model's name and its model_kwargs",
        advice='restore it, or write {"model": NAME, "model_kwargs": {...}} '
        'into it as the model was made')
  except OSError as e:
    raise UserError(f'{file} cannot be read ({describe(e)}).') from None
  return record['model'], dict(record.get('model_kwargs') or {})


def _names_a_model(record) -> bool:
  return (isinstance(record, dict) and isinstance(record.get('model'), str)
          and isinstance(record.get('model_kwargs') or {}, dict))


def _num_classes(src: str, name: str, kwargs: dict) -> int:
  """The classes of the checkpoint at `src`: the size of the one array
  that changes with num_classes (the head's bias), as saved."""
  one, two = (target_shapes(name, {**kwargs, 'num_classes': n})
              for n in (1, 2))
  head = next(k for k in one if one[k] != two[k] and len(one[k]) == 1)
  saved = resume.saved_shapes(resume.step_directory(src))
  if head not in saved:
    raise UserError(f'the checkpoint at {src} has no {head}: not a '
                    f'{name}?')
  return saved[head][0]


def _variables(src: str, name: str, kwargs: dict) -> dict:
  """The model's variables as saved at `src`, as numpy arrays."""
  device = jax.sharding.SingleDeviceSharding(jax.devices('cpu')[0])
  shapes = target_shapes(name, kwargs)
  target = {k: jax.ShapeDtypeStruct(v, jnp.float32, sharding=device)
            for k, v in shapes.items()}
  loaded, missing = resume.load_params(
      src, traverse_util.unflatten_dict(target, sep='/'))
  if missing:
    first = missing[0]
    saved = resume.saved_shapes(resume.step_directory(src)).get(first)
    if saved is None:
      raise UserError(f'the checkpoint at {src} has no {first} of the '
                      f'shape {name} needs (and {len(missing) - 1} more): '
                      'another model?')
    needed = shapes[first]
    grey = len(saved) == 4 and saved[-2] == 1 and needed[-2] == 3
    why = (': the run trained on grey (1-channel) images and the original '
           'takes RGB; train with --config.image_channels=3 (grey images '
           'repeated to RGB) to export it.' if grey else
           ', so it cannot be written as one (other model options?).')
    raise UserError(f'the checkpoint at {src} holds {first} of shape {saved} '
                    f'where the original {name} has {needed}{why}')
  return traverse_util.unflatten_dict(
      {k: np.asarray(v) for k, v in loaded.items()}, sep='/')


def converter_for(library: str, name: str, kwargs: dict):
  """The converter of `library` whose files hold the zoo model `name`.

  Args:
    library: 'timm' or 'torchvision'.
    name: the zoo model.
    kwargs: its arguments.

  Returns:
    The converter module.

  Raises:
    UserError: no converter of `library` writes this model.
  """
  full = {**registry.spec(name).defaults, **kwargs}
  for module in convert.CONVERTERS:
    if module.SOURCE == library and hasattr(module, 'template'):
      try:
        module.template(name, full)
      except convert.ConversionError:  # Another family's converter.
        continue
      return module
  raise UserError(f'{name} has no {library} counterpart that it can be '
                  'written as; see the export table in docs/pretrained.md.')


def main(argv: list[str]) -> int:
  args = _parser().parse_args(argv)
  library_noise.keep_out()
  if not args.dst.endswith('.safetensors'):
    return _fail(f'{args.dst} must end in .safetensors.')
  if os.path.exists(args.dst):
    return _fail(f'{args.dst} exists; give a new file (nothing is '
                 'overwritten).')
  folder = os.path.dirname(os.path.abspath(args.dst))
  if not os.path.isdir(folder):
    return _fail(f'cannot write {args.dst}: there is no folder {folder}.')
  try:
    name, kwargs = model_of(args.src)
    module = converter_for(args.to, name, kwargs)
    tensors = export.state_dict(module, name, kwargs,
                                _variables(args.src, name, kwargs))
  except (UserError, ValueError) as e:  # ValueError: a ConversionError.
    return _fail(e)
  partial = f'{args.dst}.partial'
  try:
    safetensors.numpy.save_file(tensors, partial, metadata={'format': 'pt'})
    os.replace(partial, args.dst)
  except (OSError, safetensors.SafetensorError) as e:  # A full disk, say.
    if os.path.exists(partial):
      os.remove(partial)
    return _fail(f'cannot write {args.dst} ({getattr(e, "strerror", None) or e}'
                 '); make room or choose another file, then run the same '
                 'command again.')
  count = sum(int(t.size) for t in tensors.values())
  print(f'Wrote {name} as a {args.to} state dict: {len(tensors)} tensors, '
        f'{count:,} numbers, to {args.dst}.')
  return 0


def _fail(message) -> int:
  print(f'error: {shorten(str(message))}', file=sys.stderr)
  return 1


if __name__ == '__main__':
  startup.loaded()
  sys.exit(main(sys.argv[1:]))

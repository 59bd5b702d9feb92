"""Converts a pretrained checkpoint into one that the recipes fine-tune from.

    python -m recipes.convert --source=torchvision resnet50.pth /tmp/resnet50
    python -m recipes.train --config=CONFIG --workdir=DIR \\
        --config.model=resnet50 --config.init_from=/tmp/resnet50

--source: torchvision (ResNet-18/34/50/101/152 .pth/.safetensors), timm
(ViT-Ti/S/B/L .safetensors/.pth) or big_vision (Google's ViT .npz).
A transformers decoder's config.json beside SRC_FILE gives its heads, RoPE
and norm epsilon. --model picks the zoo model (default: the file's);
--image_size resizes a ViT's position embedding (default: the file's size).
DST_DIR must be new or empty. Mistakes end with one line and exit status 1
(2 for a usage error).
"""

import argparse
import logging
import sys

from recipes.checkpoint import converted as checkpoint
from recipes.runtime import library_noise, startup, storage
from recipes.runtime.errors import UserError, describe, root_cause, shorten
from zoo import convert


class _Parser(argparse.ArgumentParser):

  def error(self, message):
    self.exit(2, f'error: {message}; see python -m recipes.convert --help.\n')


def _parser() -> argparse.ArgumentParser:
  parser = _Parser(
      prog='python -m recipes.convert',
      description='Converts a torchvision, timm or big_vision checkpoint '
      'into an orbax checkpoint of a zoo model, for --config.init_from.')
  parser.add_argument('--source', required=True, choices=list(convert.SOURCES),
                      help='the library the file comes from')
  parser.add_argument('--model', default=None,
                      help='zoo model name (default: the file\'s)')
  parser.add_argument('--image_size', type=int, default=None,
                      help='ViTs: the fine-tuning image size; the position '
                      'embedding is resized to it (default: the file\'s)')
  parser.add_argument('src_file', help='.safetensors, .pth or .npz file')
  parser.add_argument('dst_dir', help='new or empty directory')
  return parser


def fine_tune_flags(record: dict) -> str:
  """The recipe flags that pick the converted model."""
  flags = [f'--config.model={record["model"]}']
  for key, value in record['model_kwargs'].items():
    if key != 'num_classes':
      flags.append(f'--config.model_kwargs.{key}={value}')
  return ' '.join(flags)


def main(argv: list[str]) -> int:
  args = _parser().parse_args(argv)
  # orbax logs a failed write with tracebacks, once per thread; our one line
  # says the same.
  logging.basicConfig(format='%(levelname)s: %(message)s')
  library_noise.keep_out(*logging.getLogger().handlers)
  try:
    # As init_from reads it.
    destination = str(storage.checkpoint_path(args.dst_dir))
  except UserError as e:  # A mistyped URL, a name orbax cannot write.
    return _fail(e)
  try:
    converted = convert.load(args.src_file, args.source, args.model,
                             image_size=args.image_size)
  except (ValueError, OSError) as e:  # A ConversionError, an unknown --model,
    return _fail(e)                   # an unreadable file.
  except MemoryError as e:  # e.g. a position embedding resized to a huge size.
    at_size = f' at image size {args.image_size}' if args.image_size else ''
    return _fail(f'not enough memory to convert {args.src_file}{at_size} '
                 f'({e}).')
  try:
    record = checkpoint.save(converted, destination, args.src_file)
  except convert.ConversionError as e:  # DST_DIR is a file or not empty.
    return _fail(e)
  except Exception as e:  # pylint: disable=broad-except
    return _fail(f'writing {args.dst_dir} failed ({describe(root_cause(e))}'
                 '). Make room or choose a writable directory, then run the '
                 'same command again (it replaces what this one left '
                 'unfinished).')
  counts = {name: sum(int(a.size) for a in _leaves(tree))
            for name, tree in converted.variables.items() if tree}
  print(f'Converted {args.src_file} ({args.source}) to '
        f'{converted.describe()}: {len(converted.reads)} tensors, '
        + ', '.join(f'{n:,} {k}' for k, n in counts.items())
        + f'; wrote {destination}.')
  for name, why in converted.ignored.items():
    if why != 'a step counter':
      print(f'Not carried over: {name} ({why}).')
  print('Fine-tune from it with these flags (a config must list each '
        'model_kwargs key, as configs/imagenet_vit_b16_finetune.py does):'
        f'\n  {fine_tune_flags(record)} --config.init_from={destination}')
  return 0


def _fail(message) -> int:
  print(f'error: {shorten(str(message))}', file=sys.stderr)
  return 1


def _leaves(tree):
  for value in tree.values():
    if isinstance(value, dict):
      yield from _leaves(value)
    else:
      yield value


if __name__ == '__main__':
  startup.loaded()
  sys.exit(main(sys.argv[1:]))

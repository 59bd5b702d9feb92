"""Zero-shot image classification with SigLIP: a folder of images ranked
against class names put into prompts, with no training.

    python -m recipes.zero_shot --weights=google/siglip-base-patch16-224 /data/pets
    python -m recipes.zero_shot --weights=siglip/ --classes=cat,dog \\
        --templates='a photo of a {}.|a blurry photo of a {}.' --output=p.csv photos/

--weights: a transformers SiglipModel (its save_pretrained folder, or the
model.safetensors / pytorch_model.bin file), or a Hugging Face Hub repository
such as google/siglip-base-patch16-224, downloaded once into Hugging Face's
cache (zoo/download.py). The tokenizer is the one beside the weights
(spiece.model or tokenizer.json), or --tokenizer.

The images: a folder of class folders (PATH/CLASS/..., or PATH/SPLIT/CLASS/...
with --split), the layout `--config.dataset=folder:PATH` trains on, whose
class names (with '_' as spaces) are the classes and whose accuracy is
counted; or a folder of images alone, labeled with --classes. Each image is
resized to the image tower's size and scaled to [-1, 1], as big_vision feeds
SigLIP; each text is canonicalized, ended with EOS and padded to the text
tower's 64 tokens (recipes/data/text/prompts.py). Several templates, split
by '|', are averaged per class (recipes/core/zero_shot.py).

Prints each image's top-k classes with sigmoid(logit), SigLIP's probability
that the image matches the text (or writes them to --output as CSV), then
the top-1 and top-5 accuracy where the folder has classes. Mistakes end with
one line and exit status 1 (2 for a usage error).
"""

import argparse
import csv
import os
import sys
import time

import numpy as np

from recipes.runtime import library_noise, startup

library_noise.import_tensorflow()  # Before anything else loads it.

# pylint: disable=wrong-import-position
from recipes.checkpoint import transformers_files
from recipes.core import zero_shot
from recipes.data.images import decoding
from recipes.data.images.preprocess import Preprocessing
from recipes.data.sources import image_folder
from recipes.data.text import prompts
from recipes.data.text import tokenizer as tokenizer_lib
from recipes.runtime.errors import UserError, shorten
from recipes.runtime.progress import Progress
from zoo import convert, download
from zoo.convert import transformers_siglip

# pylint: enable=wrong-import-position

# A Hub repository's tokenizer: SigLIP's SentencePiece model or SigLIP 2's
# tokenizer.json; tokenizer_config.json names its padding.
_HUB_TOKENIZER = ('tokenizer.json', 'spiece.model')
TOP = 5  # The accuracy counted beside top-1.


class _Parser(argparse.ArgumentParser):

  def error(self, message):
    self.exit(2, f'error: {message}; see python -m recipes.zero_shot '
              '--help.\n')


def _parser() -> argparse.ArgumentParser:
  parser = _Parser(
      prog='python -m recipes.zero_shot',
      description='Classifies a folder of images with SigLIP against class '
      'names in prompts, without training.')
  parser.add_argument('--weights', required=True,
                      help='a transformers SiglipModel folder or file, or '
                      'a Hub repository (google/siglip-base-patch16-224)')
  parser.add_argument('--tokenizer', default=None,
                      help="the model's tokenizer file or folder (default: "
                      "the weights')")
  parser.add_argument('--model', default=None,
                      help="the image tower's zoo name, e.g. siglip_b16 "
                      "(default: the file's); the text tower is NAME_text")
  parser.add_argument('--classes', default=None,
                      help='comma-separated class names (default: the '
                      "class folders', '_' as spaces)")
  parser.add_argument('--templates', default=prompts.DEFAULT,
                      help="prompt templates, '{}' for the class name, "
                      "several separated by '|' (default: %(default)r)")
  parser.add_argument('--split', default=None,
                      help='of a PATH/SPLIT/CLASS folder: the split, e.g. '
                      'val or val[:100] (default: the only one)')
  parser.add_argument('--top_k', type=int, default=5,
                      help='classes shown per image (default: %(default)s)')
  parser.add_argument('--batch_size', type=int, default=32,
                      help='images per batch (default: %(default)s)')
  parser.add_argument('--output', default=None,
                      help='a new CSV file for the predictions (default: '
                      'print them)')
  parser.add_argument('images', help='a folder of class folders, or of '
                      'images (folder:PATH too)')
  return parser


def main(argv: list[str]) -> int:
  args = _parser().parse_args(argv)
  library_noise.keep_out()
  try:
    return _run(args)
  except (UserError, convert.ConversionError, download.DownloadError) as e:
    print(f'error: {shorten(str(e))}', file=sys.stderr)
    return 1
  except KeyboardInterrupt:
    print('error: stopped; run the same command again for every image.',
          file=sys.stderr)
    return 130


def _run(args) -> int:
  for flag in ('top_k', 'batch_size'):
    if getattr(args, flag) < 1:
      raise UserError(f'--{flag}={getattr(args, flag)} must be 1 or more.')
  if args.output and os.path.exists(args.output):
    raise UserError(f'{args.output} exists; give a new file for --output '
                    '(nothing is overwritten).')
  templates = prompts.templates(args.templates)
  images, class_names, root = _images(args.images.removeprefix('folder:'),
                                      args.split, args.classes)
  weights, tokenizer_path = _weights(args.weights)
  model, variables = load_siglip(weights, args.model)
  tokenizer = tokenizer_lib.load(args.tokenizer or tokenizer_path)
  if tokenizer.vocab_size > model.text.vocab_size:
    raise UserError(
        f'tokenizer {tokenizer.path} has {tokenizer.vocab_size:,} tokens but '
        f"the text tower of {weights} embeds {model.text.vocab_size:,}: "
        "another model's tokenizer? Give the one saved with the weights.")
  tokens = prompts.token_ids(
      tokenizer, prompts.fill(templates, class_names), model.text.max_length)
  classifier = zero_shot.Classifier(
      model, variables,
      tokens.reshape(len(class_names), len(templates), -1), args.batch_size)
  _classify(classifier, model.image.image_size, images, class_names, root,
            args)
  return 0


def _images(path: str, split: str | None, classes: str | None):
  """(the images, the class names, the folder's path) of the folder."""
  names = [c.strip() for c in classes.split(',')] if classes else None
  if names is not None and not all(names):
    raise UserError(f'--classes={classes!r} has an empty class name; give '
                    'names separated by commas.')
  if '://' not in path:
    path = os.path.expanduser(path)
  files = image_folder.unlabeled(path)
  if files is not None:
    if names is None:
      raise UserError(f'the folder {path} holds images but no class folders; '
                      'name the classes to label them with, e.g. '
                      '--classes=cat,dog.')
    return files, names, files.root
  source = image_folder.open(path)
  if split is None:
    if len(source.splits) > 1:
      raise UserError(f'the folder {path} has splits {", ".join(source.splits)}'
                      '; choose one with --split, e.g. '
                      f'--split={sorted(source.splits)[0]}.')
    split = next(iter(source.splits))
  found = [n.replace('_', ' ') for n in source.class_names]
  if names is not None and len(names) != len(found):
    raise UserError(f'--classes names {len(names)} classes but the folder '
                    f'{path} has {len(found)} class folders '
                    f'({", ".join(source.class_names)}); name one for each, '
                    'in that order, or leave --classes out.')
  return source.select(split), names or found, path


def _weights(weights: str) -> tuple[str, str]:
  """(the weights file, where its tokenizer is): local, or downloaded from
  the Hub repository `weights`."""
  path = os.path.expanduser(weights)
  if os.path.isdir(path):
    file = transformers_files.weights_in(path)
    if not file:
      raise UserError(f'the folder {path} holds none of '
                      f'{", ".join(transformers_files.WEIGHTS)}'
                      "; give a transformers SiglipModel's folder or file.")
    return file, path
  if os.path.exists(path) or not transformers_files.names_a_repository(
      weights):
    return path, os.path.dirname(os.path.abspath(path))
  return transformers_files.fetch(weights, _HUB_TOKENIZER)


def load_siglip(file: str, image: str | None = None):
  """The SigLIP module and its variables converted from `file`."""
  tensors = convert.files.read(file)
  if not transformers_siglip.matches(tensors):
    raise UserError(f'{file} holds no transformers SigLIP weights (no '
                    'text_model. and vision_model. towers); give a '
                    "SiglipModel's model.safetensors.")
  converted = transformers_siglip.convert_model(
      tensors, file, image=image, text=image and f'{image}_text')
  return converted.model, converted.variables


def batches(images, image_size: int, batch_size: int):
  """(indices, labels, pixels) of `images`, batch_size at a time: each image
  resized whole to image_size (bilinear, as big_vision's resize), RGB, in
  [-1, 1]: SigLIP's input."""
  preprocessing = Preprocessing(augment='finetune',
                                normalize='minus_one_to_one',
                                image_size=image_size, channels=3)
  function = decoding.batch_function(preprocessing, 3, (None, None, 3),
                                     train=False)
  for start in range(0, len(images), batch_size):
    indices = range(start, min(start + batch_size, len(images)))
    encoded, labels = images.read(indices)
    yield indices, labels, decoding.run(
        function, images, indices, encoded,
        np.zeros((len(indices), 2), np.int64), channels=3, stored_shape=None)


def _classify(classifier, image_size: int, images, class_names, root,
              args):
  """Each batch of images classified; the predictions printed or written,
  then the accuracy where labeled."""
  shown = min(args.top_k, len(class_names))
  top = max(shown, min(TOP, len(class_names)))
  hits, labeled = np.zeros(2, np.int64), True  # Top-1, top-5.
  progress = Progress(len(images), label='image', unit='images',
                      write=lambda line: print(line, file=sys.stderr))
  out = (open(args.output, 'w', newline='', encoding='utf-8')
         if args.output else None)
  began = time.monotonic()
  try:
    writer = csv.writer(out) if out else None
    if writer:
      writer.writerow(['file', 'class'] + [
          f'{what}_{i + 1}' for i in range(shown)
          for what in ('prediction', 'score')])
    for indices, labels, pixels in batches(images, image_size,
                                           args.batch_size):
      logits = classifier(pixels)
      best = zero_shot.ranked(logits, top)
      labeled = labeled and bool((labels >= 0).all())
      hits += [(best[:, 0] == labels).sum(),
               (best[:, :TOP] == labels[:, None]).any(axis=1).sum()]
      # sigmoid(logit): SigLIP's probability that the image matches.
      scores = 1 / (1 + np.exp(-np.take_along_axis(logits, best, axis=1)))
      for i, index in enumerate(indices):
        file = _relative(images.describe(index), root)
        truth = class_names[labels[i]] if labels[i] >= 0 else ''
        predicted = [(class_names[c], float(p))
                     for c, p in zip(best[i, :shown], scores[i, :shown])]
        if writer:
          writer.writerow([file, truth] + [
              v for c, p in predicted for v in (c, f'{p:.6f}')])
        else:
          print(f'{file}: ' + ', '.join(f'{c} {p:.3f}' for c, p in predicted))
      progress.update(indices[-1] + 1)
  finally:
    if out:
      out.close()
  # Over the whole folder, the first batch's compilation included.
  n, seconds = len(images), time.monotonic() - began
  speed = f'{n / seconds:,.1f} images/s'
  if labeled:
    print(f'top-1 accuracy {100 * hits[0] / n:.2f}% ({hits[0]:,}/{n:,}), '
          f'top-{min(TOP, len(class_names))} {100 * hits[1] / n:.2f}% '
          f'({hits[1]:,}/{n:,}) over {n:,} images of {len(class_names)} '
          f'classes; {speed}.')
  else:
    print(f'Labeled {n:,} images with {len(class_names)} classes; {speed}.')
  if args.output:
    print(f'Wrote the predictions to {args.output}.')


def _relative(file: str, root: str) -> str:
  """`file`'s path under the images' folder."""
  root = root.rstrip('/') + '/'
  return file[len(root):] if file.startswith(root) else file


if __name__ == '__main__':
  startup.loaded()
  sys.exit(main(sys.argv[1:]))

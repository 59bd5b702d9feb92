"""What --config.pretrained=TAG sets: the run's inputs as the weights were
trained on them (their mean, std, channels and size in zoo/weights.py, as
timm's pretrained_cfg), and the model options they fix, written into the
config itself so that the logged config and config.json hold the values the
run uses (and `python -m recipes.export` rebuilds the model trained).
`apply` runs in validation.check, before anything is written; `warn_size`
once the data's image size is known.

A language model's weights fix only model options; for text that the run
tokenizes, the weights' own tokenizer.json is downloaded and becomes
config.tokenizer, unless one is given.

- image_channels 0 becomes the weights' 3: grey images are repeated to RGB.
  1 is an error: the weights' first layer takes RGB, so it would be trained
  from scratch.
- normalize '' becomes the preset of the weights' mean and std. Another
  preset is an error: the weights would see inputs of other statistics
  (timm lets --mean/--std override; here the mismatch is one line).
- The image size is the user's to choose: fine-tuning at another size than
  the weights' is common (a ViT at 384 from 224, its position embedding
  resampled, as big_vision and timm do), so it is a warning only
  (`warn_size`). A model whose weights fix its `image_size` (a ViT) gets
  config.image_size when the augmentation resizes to it.
"""

import ml_collections
import numpy as np
from absl import logging

import zoo
from recipes.checkpoint import transformers_files
from recipes.data.images import preprocess
from recipes.runtime.errors import UserError


def weights(config: ml_collections.ConfigDict) -> zoo.weights.Weights:
  """The table entry of `config.pretrained` (zoo/weights.py)."""
  try:
    return zoo.weights.find(config.model, config.pretrained)
  except ValueError as e:
    raise UserError(str(e)) from None


def converted(config: ml_collections.ConfigDict):
  """The converted weights `config.pretrained` names (downloaded the first
  time), at the image size of config.model_kwargs where it sets one.

  Args:
    config: the run's config: model, model_kwargs, pretrained.

  Returns:
    The zoo.convert.Converted weights.

  Raises:
    UserError: an unknown tag, a failed download (one line saying what to
      download by hand) or conversion.
  """
  try:
    return zoo.pretrained.published(
        config.model, config.pretrained,
        image_size=config.model_kwargs.to_dict().get('image_size'))
  except ValueError as e:
    raise UserError(str(e)) from None


def normalization(entry: zoo.weights.Weights) -> str:
  """The MEAN_STD preset of the weights' mean and std."""
  for name, (mean, std) in preprocess.MEAN_STD.items():
    if (np.allclose(np.broadcast_to(mean, entry.channels), entry.mean)
        and np.allclose(np.broadcast_to(std, entry.channels), entry.std)):
      return name
  raise UserError(f'the weights {entry.name} take inputs normalized with '
                  f'mean {entry.mean} and std {entry.std}, which no '
                  '--config.normalize preset has.')


def apply(config: ml_collections.ConfigDict):
  """Sets config's image_channels, normalize and model_kwargs as the
  weights of config.pretrained need them, where the config leaves them open;
  nothing without config.pretrained. Runs again without change.

  Args:
    config: the run's config, checked; changed in place.

  Raises:
    UserError: a tag the model does not have, or a setting that contradicts
      the weights (one line: what, why, and what to set).
  """
  if not config.pretrained:
    return
  entry = weights(config)
  if entry.tokenizer_url:
    _apply_text(config, entry)
    return
  flag = f'--config.pretrained={config.pretrained}'
  if config.image_channels not in (0, entry.channels):
    raise UserError(
        f'image_channels={config.image_channels} does not fit {flag}: the '
        f'first layer of {entry.name} takes {entry.channels} channels (RGB) '
        'and would be trained from scratch; leave --config.image_channels=0 '
        '(grey images are then repeated to RGB) or set 3.')
  config.image_channels = entry.channels
  wanted = normalization(entry)
  if config.normalize not in ('', wanted):
    raise UserError(
        f'normalize={config.normalize!r} does not fit {flag}: {entry.name} '
        f"was trained on inputs normalized as {wanted!r}, and other "
        "statistics shift every input of its first layer; leave "
        f"--config.normalize='' (then {wanted!r}) or set {wanted}.")
  config.normalize = wanted
  fixed = converted(config).kwargs
  with config.model_kwargs.unlocked():
    if ('image_size' in fixed and 'image_size' not in config.model_kwargs
        and preprocess.AUGMENTATIONS[config.augment].resizes):
      config.model_kwargs.image_size = config.image_size
  _fix_model_kwargs(config, fixed)


def _apply_text(config: ml_collections.ConfigDict, entry: zoo.weights.Weights):
  """A language model's: the options its weights fix, and, for text the
  run tokenizes (no tokens: data, no tokenizer given), the weights' own
  tokenizer, downloaded beside them."""
  _fix_model_kwargs(config, converted(config).kwargs)
  if config.tokenizer or config.dataset.startswith('tokens:'):
    return
  repository = entry.tokenizer_url.removeprefix('hf://').rsplit('/', 1)[0]
  try:
    config.tokenizer = transformers_files.fetch_tokenizer(
        repository, ['tokenizer.json'])
  except ValueError as e:  # zoo.download.DownloadError: one line.
    raise UserError(str(e)) from None


def _fix_model_kwargs(config: ml_collections.ConfigDict, fixed: dict):
  """The model options the weights fix, where model_kwargs leaves them."""
  with config.model_kwargs.unlocked():
    for key, value in fixed.items():
      if key != 'num_classes' and key not in config.model_kwargs:
        config.model_kwargs[key] = value


def warn_size(config: ml_collections.ConfigDict,
              image_shape: tuple[int, ...]):
  """A warning when the model sees images of another size than the weights
  of config.pretrained were trained on (nothing without them).

  Args:
    config: the run's config.
    image_shape: the model's input shape, HWC.
  """
  if not config.pretrained:
    return
  entry = weights(config)
  if entry.tokenizer_url:  # A language model's: it sees no images.
    return
  if tuple(image_shape[:2]) != (entry.input_size,) * 2:
    logging.warning(
        f'The model sees {image_shape[0]}x{image_shape[1]} images; '
        f'{entry.name} was trained on {entry.input_size}x'
        f'{entry.input_size}: fine-tuning at another size works (a ViT\'s '
        'position embedding is resampled) but usually needs more steps; '
        '--config.augment=finetune --config.image_size='
        f'{entry.input_size} resizes to theirs.')

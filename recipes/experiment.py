"""What a run is built from: data, schedule, model, optimizer, the state's
spec and the strategy, all from the config, with every mismatch found before
anything is trained. This is the one place that reads the config's fields
into the typed settings of the layers below (UpdateRules, ParallelSettings,
Preprocessing)."""

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from absl import logging

import zoo
from recipes.checkpoint import resume
from recipes.config import pretrained
from recipes.core import optimizers, state_spec
from recipes.core.state_spec import StateSpec
from recipes.core.train_state import UpdateRules
from recipes.data import datasets, prepared_text
from recipes.data.images.preprocess import Preprocessing
from recipes.data.pipeline import in_memory
from recipes.data.pipeline.dataset import Dataset
from recipes.data.sources import array_records
from recipes.data.text import labelled_records
from recipes.data.text import tokenizer as tokenizer_lib
from recipes.parallel import strategy as strategies
from recipes.parallel.strategy import ParallelSettings
from recipes.runtime.errors import UserError, check_divisible

# The summary prefix of config.eval_split; extra_eval_splits get eval_<name>.
MAIN_EVAL = 'eval'


@dataclasses.dataclass(frozen=True)
class Experiment:
  """The parts of a run; `create_state()` makes its initial state."""

  data: Dataset
  steps_per_epoch: int
  num_steps: int
  eval_batch_size: int
  eval_splits: dict[str, str]  # Summary prefix -> split, MAIN_EVAL first.
  schedule: optax.Schedule
  model: nn.Module
  tx: optax.GradientTransformation
  spec: StateSpec
  strategy: strategies.Strategy

  def create_state(self):
    """The initial state from the seed, placed by the strategy.

    Returns:
      The TrainState, as the strategy's steps take it.
    """
    return self.strategy.create_state(jax.random.PRNGKey(self.spec.seed))


def is_language_model(config: ml_collections.ConfigDict) -> bool:
  """Whether config.model takes token ids (a registered text model).

  Raises:
    UserError: for an unknown model.
  """
  try:
    return zoo.spec(config.model).modality == 'text'
  except ValueError as e:
    raise UserError(str(e)) from None


def is_encoder(config: ml_collections.ConfigDict) -> bool:
  """Whether config.model is a text encoder (BERT, RoBERTa), which
  classifies labelled text.

  Raises:
    UserError: for an unknown model.
  """
  return is_language_model(config) and zoo.spec(config.model).family == (
      'encoder')


def create_model(config: ml_collections.ConfigDict, num_classes: int,
                 batch_axis: str | None = None):
  """The config's model; `batch_axis`: the strategy's (see
  `Strategy.batch_axis`), over which cross-device batch norm reduces.

  Args:
    config: the run's config: model, model_kwargs, half precision and
      cross_device_batch_norm.
    num_classes: the number of output classes (not given to a decoder,
      whose vocabulary sets its outputs; an encoder's masked-LM head with
      0).
    batch_axis: as above; None: batch norm over the batch it is given.

  Returns:
    The Linen module.

  Raises:
    UserError: for an unknown model or argument, or cross-device batch
      norm on a model without batch norm.
  """
  dtype = (jnp.dtype(config.half_precision_dtype) if config.half_precision
           else jnp.float32)
  kwargs = dict(config.model_kwargs)
  if config.cross_device_batch_norm and batch_axis:
    kwargs['batch_norm_axis_name'] = batch_axis
  try:
    if config.pretrained:  # What the weights fix, unless the config says.
      fixed = {k: v for k, v in pretrained_weights(config).kwargs.items()
               if k != 'num_classes'}
      for key in sorted(set(fixed) & set(kwargs)):
        if fixed[key] != kwargs[key]:
          _warn_once(f'model_kwargs.{key} is {kwargs[key]!r}, and the weights '
                     f'{config.pretrained} were made with {fixed[key]!r}: the '
                     'model will compute something else than they did.')
      kwargs = {**fixed, **kwargs}
    if not is_language_model(config) or (is_encoder(config) and
                                         num_classes):
      kwargs['num_classes'] = num_classes
    return zoo.create(config.model, dtype=dtype, **kwargs)
  except TypeError as e:
    if 'batch_norm_axis_name' in str(e):
      raise UserError(f'cross_device_batch_norm needs a model with batch '
                      f'norm; {config.model!r} has none: set '
                      '--config.cross_device_batch_norm=False.') from None
    raise UserError(str(e)) from None
  except ValueError as e:
    raise UserError(str(e)) from None


@functools.cache
def _warn_once(message: str):  # create_model runs more than once a run.
  logging.warning(message)


# The converted weights config.pretrained names (recipes/config/).
pretrained_weights = pretrained.converted


def given_weights(config: ml_collections.ConfigDict, strategy, state):
  """`state` with the weights `config.init_from` (a checkpoint) or
  `config.pretrained` (published weights) names; `state` itself when
  neither is set.

  Raises:
    UserError: as resume.init_from and resume.init_from_weights.
  """
  if config.init_from:
    return resume.init_from(config.init_from, strategy, state)
  if config.pretrained:
    return resume.init_from_weights(
        pretrained_weights(config).variables,
        f'{config.model}.{config.pretrained}', strategy, state)
  return state


def update_rules(config: ml_collections.ConfigDict) -> UpdateRules:
  """What the shared step does besides the optimizer's update.

  Args:
    config: the run's config.

  Returns:
    The config's fields of the same names.
  """
  return UpdateRules(
      label_smoothing=config.label_smoothing, mixup_alpha=config.mixup_alpha,
      cutmix_alpha=config.cutmix_alpha, mix_prob=config.mix_prob,
      cutmix_switch_prob=config.cutmix_switch_prob,
      grad_accum_steps=config.grad_accum_steps, ema_decay=config.ema_decay,
      skip_nonfinite_updates=config.skip_nonfinite_updates)


def parallel_settings(config: ml_collections.ConfigDict) -> ParallelSettings:
  """The strategy, mesh and rules; the model's default logical rules when
  the config gives none.

  Args:
    config: the run's config: strategy, mesh, partition_rules, path_rules
      and model.

  Returns:
    The settings, the logical rules checked.

  Raises:
    UserError: for a malformed logical rule.
  """
  return ParallelSettings.for_model(config.model, config.strategy,
                                   config.mesh, config.partition_rules,
                                   config.path_rules)


def eval_splits(config: ml_collections.ConfigDict) -> dict[str, str]:
  """Summary prefix -> split: eval_split under MAIN_EVAL, then the extra
  ones under eval_<name>.

  Args:
    config: the run's config: eval_split and extra_eval_splits.

  Returns:
    The prefixes and split strings, MAIN_EVAL first.
  """
  return {MAIN_EVAL: config.eval_split,
          **{f'{MAIN_EVAL}_{name}': split
             for name, split in config.extra_eval_splits.items()}}


def _num_train_steps(config, per_epoch: int) -> int:
  steps = config.num_train_steps or int(config.num_epochs * per_epoch)
  if steps <= 0:
    raise UserError('nothing to train: set --config.num_epochs or '
                    '--config.num_train_steps to a positive value.')
  optimizers.check_warmup(config, steps)
  return steps


def check_batch_sizes(config: ml_collections.ConfigDict,
                      num_devices: int) -> int:
  """The global batches fit the strategy on `num_devices` devices.

  Args:
    config: the run's config: strategy, mesh, model, batch sizes and
      grad_accum_steps.
    num_devices: the devices the run uses, over all processes.

  Returns:
    The eval batch size (config.eval_batch_size, or else batch_size).

  Raises:
    UserError: for an unknown strategy or model, a mesh that does not fit,
      or a batch the shards (or micro-batches) do not divide.
  """
  strategy_class = strategies.get(config.strategy)
  # A bad name or argument fails before the data loads.
  create_model(config, 1, strategy_class.batch_axis)
  settings = parallel_settings(config)
  divisor, shards = strategies.batch_divisor(settings, num_devices)
  eval_batch_size = config.eval_batch_size or config.batch_size
  check_divisible('batch_size', config.batch_size, divisor, shards)
  check_divisible('eval_batch_size', eval_batch_size, divisor, shards)
  if config.grad_accum_steps > 1:  # Each shard splits into micro-batches.
    check_divisible('batch_size', config.batch_size,
                    divisor * config.grad_accum_steps,
                    f'(= {divisor} {shards} x grad_accum_steps='
                    f'{config.grad_accum_steps})')
  return eval_batch_size


def preprocessing(config: ml_collections.ConfigDict) -> Preprocessing:
  """The config's preset and its settings."""
  return Preprocessing(
      config.augment, config.normalize, config.image_size,
      randaugment_layers=config.randaugment_layers,
      randaugment_magnitude=config.randaugment_magnitude,
      crop_area_min=config.crop_area_min, channels=config.image_channels)


def encoded_options(config: ml_collections.ConfigDict
                    ) -> datasets.EncodedOptions:
  """How one's own images are read (folder:, hf:, records:)."""
  return datasets.EncodedOptions(
      config.image_channels, config.skip_bad_images, config.image_column,
      config.label_column, config.data_threads)


@dataclasses.dataclass(frozen=True)
class Training:
  """What trains, given the data's classes and image shape: the parts of a
  run that do not read the data."""

  schedule: optax.Schedule
  model: nn.Module
  tx: optax.GradientTransformation
  spec: StateSpec
  strategy: strategies.Strategy


def training(config: ml_collections.ConfigDict, num_classes: int,
             image_shape: tuple[int, ...], steps_per_epoch: int,
             num_steps: int, devices=None) -> Training:
  """The model, optimizer, state spec and strategy of `config`.

  Args:
    config: the run's config, its batch sizes already checked.
    num_classes: the data's number of classes.
    image_shape: the model's input shape, HWC ((seq_len,) for a language
      model).
    steps_per_epoch: steps in one epoch (the schedule's epochs).
    num_steps: the run's length in steps.
    devices: the devices to run on; None: all of them. (Compile-only
      devices of a TPU topology for recipes/compile.py.)

  Returns:
    The parts; the state is not created.

  Raises:
    UserError: for settings that do not fit the model or the devices.
  """
  model = create_model(config, num_classes,
                       strategies.get(config.strategy).batch_axis)
  schedule = optimizers.learning_rate_schedule(config, steps_per_epoch,
                                               num_steps)
  tx = optimizers.create_optimizer(config, schedule)
  spec = state_spec.make(
      model, tx, image_shape, seed=config.seed,
      input_dtype=zoo.spec(config.model).input_dtype,
      loss_scaling=(config.half_precision
                    and config.half_precision_dtype == 'float16'),
      update_rules=update_rules(config))
  strategy = strategies.create(spec, parallel_settings(config), devices)
  return Training(schedule, model, tx, spec, strategy)


def resolved(config: ml_collections.ConfigDict, exp: Experiment) -> dict:
  """The values the run uses for the fields that leave theirs to the data
  or to other fields (num_train_steps=0: from num_epochs...), for the
  config a run logs and TensorBoard's hparams.

  Args:
    config: the run's config.
    exp: the Experiment built from it.

  Returns:
    {field: value used}; image_size is the data's own side where the
    preset keeps the images' size (e.g. 28 for Fashion-MNIST), 'HxW' if
    they are not square.
  """
  values = {'num_train_steps': exp.num_steps,
            'eval_batch_size': exp.eval_batch_size,
            'eval_every_steps': config.eval_every_steps or exp.steps_per_epoch}
  if len(exp.data.image_shape) == 1:  # Token sequences.
    return {**values, 'seq_len': exp.data.image_shape[0]}
  height, width = exp.data.image_shape[:2]
  return {**values,
          'image_size': height if height == width else f'{height}x{width}'}


def tokens_per_step(config: ml_collections.ConfigDict, exp: Experiment
                    ) -> int | None:
  """The tokens of one global batch of a language model; None for
  images."""
  shape = exp.data.image_shape
  return config.batch_size * shape[0] if len(shape) == 1 else None


def token_data(config: ml_collections.ConfigDict) -> bool:
  """Whether the run's data is token sequences: prepared (tokens:PATH), or
  text that `tokenizer` makes into them."""
  return datasets.is_tokens(config.dataset) or bool(config.tokenizer)


def labelled_text(config: ml_collections.ConfigDict) -> bool:
  """Whether the run's data is labelled text for a classifier: text with a
  tokenizer and a label column, or tokens:PATH prepared from such text."""
  if config.tokenizer:
    return bool(config.label_column)
  if not datasets.is_tokens(config.dataset):
    return False
  path = config.dataset.partition(':')[2]
  return bool(path) and labelled_records.is_labelled(
      array_records.read_manifest(path))


def token_dataset(config: ml_collections.ConfigDict) -> str:
  """The dataset the run reads: `tokens:DIR` for text with a tokenizer,
  prepared into DIR first where no run has (recipes/data/prepared_text.py),
  else `config.dataset`."""
  if not config.tokenizer:
    return config.dataset
  if datasets.is_tokens(config.dataset):
    raise UserError(f'dataset {config.dataset!r} is tokenized already; set '
                    "--config.tokenizer='' to read it, or name the text "
                    'itself (jsonl:PATH, fortune:PATH, ...).')
  # Before the text is prepared, which may take long.
  _check_tokens_fit(config, tokenizer_lib.load(config.tokenizer).vocab_size,
                    config.seq_len)
  return prepared_text.tokens_dataset(config.dataset, config.tokenizer,
                                      config.seq_len, config.text_column,
                                      config.data_dir, config.label_column,
                                      config.classes)


def check_data_kind(config: ml_collections.ConfigDict):
  """A language model trains on token sequences, and an image model on
  images (known from the names, before the data loads).

  Raises:
    UserError: naming which is which.
  """
  tokens = token_data(config)
  if is_language_model(config) != tokens:
    if tokens:
      raise UserError(f'dataset {config.dataset!r} holds token sequences, '
                      f'and {config.model!r} is not a language model; train '
                      'a decoder on it (e.g. --config.model=smollm2_135m), '
                      'or give images to this model.')
    if config.dataset.partition(':')[0] in prepared_text.TEXT_ONLY:
      raise UserError(f'dataset {config.dataset!r} is text, which '
                      f'{config.model!r} reads as tokens: give the model\'s '
                      'tokenizer with --config.tokenizer=FILE (or bytes) and '
                      'the sequence length with --config.seq_len=N.')
    raise UserError(f'{config.model!r} is a language model, and dataset '
                    f'{config.dataset!r} holds images; give it token '
                    'sequences: --config.dataset=tokens:DIR, from python -m '
                    'recipes.data.prepare SRC DIR --tokenizer=FILE '
                    '--seq_len=N, or text with --config.tokenizer=FILE.')
  if config.classes and not (tokens and config.label_column):
    raise UserError(f'classes={config.classes!r} picks classes of labelled '
                    'text; name its label column with --config.label_column '
                    '(and the tokenizer with --config.tokenizer), or set '
                    "--config.classes=''.")
  if not tokens:
    if config.seq_len:
      raise UserError(f'seq_len is for token sequences, and dataset '
                      f'{config.dataset!r} holds images; set --config.'
                      'seq_len=0.')
    return
  labelled = labelled_text(config)
  if labelled != is_encoder(config):
    if labelled:
      raise UserError(f'dataset {config.dataset!r} is labelled text (label '
                      f'column {config.label_column or "prepared"}), which '
                      f'an encoder classifies, and {config.model!r} is a '
                      'decoder; train an encoder on it (e.g. --config.model='
                      "bert_base), or set --config.label_column='' for text "
                      'to model.')
    raise UserError(f'{config.model!r} is an encoder, which classifies '
                    f'labelled text, and dataset {config.dataset!r} has no '
                    'labels; name the label column with --config.'
                    'label_column=C (collection for fortune:), or train a '
                    'decoder on it.')
  if labelled:  # Its labels smooth as images' do; mixing blends images.
    for field in ('mixup_alpha', 'cutmix_alpha'):
      if config[field]:
        raise UserError(f'{field} mixes images, and {config.model!r} '
                        f'classifies text; set --config.{field}=0.')
    return
  for field in ('label_smoothing', 'mixup_alpha', 'cutmix_alpha'):
    if config[field]:
      raise UserError(f'{field} is for image classes, and {config.model!r} '
                      'learns next tokens; set --config.'
                      f'{field}=0.')


def check_data_fits_model(config: ml_collections.ConfigDict, data: Dataset):
  """Token sequences fit the language model: its vocabulary holds every id
  and its positions cover the sequences.

  Raises:
    UserError: naming what does not fit.
  """
  if not token_data(config):
    return
  vocab, (seq_len,) = data.vocab_size, data.image_shape
  if config.seq_len and config.seq_len != seq_len:
    raise UserError(f'{config.dataset} holds sequences of {seq_len:,} '
                    f'tokens, not the seq_len={config.seq_len:,} of the '
                    'config; set --config.seq_len='
                    f'{seq_len} (or 0), or prepare the text with --seq_len='
                    f'{config.seq_len}.')
  _check_tokens_fit(config, vocab, seq_len)


def _check_tokens_fit(config: ml_collections.ConfigDict, vocab: int | None,
                      seq_len: int):
  """Ids below `vocab` in sequences of `seq_len` fit the model.

  Raises:
    UserError: naming what does not fit.
  """
  model = create_model(config, 0)
  # RoBERTa's positions start after its padding id.
  pad = getattr(model, 'pad_token_id', None)
  positions = model.max_length - (0 if pad is None else pad + 1)
  if vocab is not None and vocab > model.vocab_size:
    raise UserError(f'the tokenizer of {config.dataset} has {vocab:,} ids, '
                    f'more than the {model.vocab_size:,} of {config.model}\'s '
                    'vocabulary; prepare the text with the model\'s own '
                    'tokenizer, or set --config.model_kwargs.vocab_size.')
  if seq_len > positions:
    raise UserError(f'{config.dataset} holds sequences of {seq_len:,} '
                    f'tokens, more than the {positions:,} positions '
                    f'of {config.model}; prepare it with --seq_len='
                    f'{positions} or less (--config.seq_len for text '
                    'the run prepares), or set '
                    '--config.model_kwargs.max_length.')


def sequence_length(config: ml_collections.ConfigDict) -> int:
  """The tokens per sequence of a language model's data, without reading
  it: `seq_len` of the config, or of the manifest of tokens:PATH where PATH
  is prepared already (for recipes/compile.py).

  Raises:
    UserError: when neither gives it, when they differ, or for more tokens
      than the model's positions.
  """
  path = config.dataset.partition(':')[2]
  manifest = array_records.read_manifest(path) if path else None
  prepared = (manifest or {}).get('tokens', {}).get('seq_len')
  seq_len = config.seq_len or prepared
  if not seq_len:
    raise UserError(f'the sequence length of {config.dataset} is not known '
                    'before it is prepared: set --config.seq_len=N (the '
                    '--seq_len of python -m recipes.data.prepare).')
  if prepared and seq_len != prepared:
    raise UserError(f'{config.dataset} holds sequences of {prepared:,} '
                    f'tokens, not the seq_len={seq_len:,} of the config; '
                    f'set --config.seq_len={prepared} (or 0).')
  max_length = create_model(config, 0).max_length
  if seq_len > max_length:
    raise UserError(f'seq_len={seq_len:,} is more than the {max_length:,} '
                    f'positions of {config.model}; set --config.seq_len='
                    f'{max_length} or less, or --config.model_kwargs.'
                    'max_length.')
  return seq_len


def build(config: ml_collections.ConfigDict) -> Experiment:
  """Checks the config against the devices, loads the data, makes the rest.

  Args:
    config: the run's config (recipes/config/).

  Returns:
    The experiment, its state not yet created.

  Raises:
    UserError: for whatever in the config does not fit the devices, the
      data or the model (batch sizes, dataset, model, mesh, rules, ...).
  """
  eval_batch_size = check_batch_sizes(config, jax.device_count())
  check_data_kind(config)
  splits = eval_splits(config)
  data = datasets.load(token_dataset(config), config.data_dir or None,
                       config.train_split, list(splits.values()),
                       preprocessing(config), config.data_source,
                       encoded_options(config))
  check_data_fits_model(config, data)
  per_epoch = in_memory.steps_per_epoch(data.num_train, config.batch_size)
  if per_epoch == 0:
    raise UserError(f'batch_size {config.batch_size} is larger than the '
                    f'{data.num_train} training examples.')
  num_steps = _num_train_steps(config, per_epoch)
  parts = training(config, data.num_classes, data.image_shape, per_epoch,
                   num_steps)
  logging.info('Strategy %s:\n%s', parts.strategy.name,
               parts.strategy.describe())
  return Experiment(data, per_epoch, num_steps, eval_batch_size, splits,
                    parts.schedule, parts.model, parts.tx, parts.spec,
                    parts.strategy)

"""Every config field, declared once: its default, the values it allows and
what it does, in sections.

The defaults (defaults.py), the checks (validation.py), `--help`
(command_line.py) and the field table of docs/config.md all come from FIELDS.
Nested fields are dotted ('mesh.data'); the sections group the fields in the
help and the docs, and a field's name on the command line is the same
whatever its section: `--config.batch_size=256`, `--config.mesh.tensor=2`.
"""

import dataclasses
from typing import Any

import ml_collections

from recipes.config.rules import (BOOLEAN, EVAL_SPLITS, FRACTION, MESH_SIZE,
                                  PROBABILITY, Rule, choice, int_choice,
                                  integer, number, text)
from recipes.core import optimizers
from recipes.data import datasets
from recipes.data.images import image_codec, preprocess
from recipes.parallel.strategy import STRATEGIES
from recipes.runtime import compilation_cache, startup, wandb_writer

MODES = ('train', 'eval')
HALF_PRECISION_DTYPES = ('bfloat16', 'float16')
ADAM_MU_DTYPES = ('', 'bfloat16', 'float16', 'float32')
# Seeds feed both JAX and tf.data's stateless ops: a non-negative int32.
MAX_SEED = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Field:
  """One config field.

  Attributes:
    name: its name, dotted when nested ('mesh.data').
    default: its value in defaults.get_config().
    rule: the values it allows; None for a field whose entries the module
      that reads it checks (`checked_by`).
    help: what it does, one or a few sentences.
    checked_by: where a field without a rule is checked.
  """

  name: str
  default: Any
  rule: Rule | None
  help: str
  checked_by: str = ''


SECTIONS: dict[str, tuple[Field, ...]] = {
    'run': (
        Field('mode', 'train', choice(*MODES),
              'train, or eval: evaluate the workdir\'s latest checkpoint, '
              'write its eval/ summaries and stop (as python -m '
              'recipes.evaluate does).'),
        Field('seed', 0, integer(0, MAX_SEED),
              'Seeds the initialization, the data order, augmentation and '
              'dropout.'),
        Field('stall_timeout_seconds', 300.0, number(0),
              'When no train step, eval batch or checkpoint save completes '
              'for this long (time spent compiling not counted, up to an '
              'hour per compilation), every process writes its threads\' '
              'stacks and the run stops saying where it stalled; 0 = never.'),
        Field('compilation_cache_dir', compilation_cache.DEFAULT_DIR,
              text(),
              'Compiled steps are kept here (local or gs://) and reused by '
              'the next run of the same steps, a resumed one included; '
              "'' = off, and off for a run of several CPU processes. "
              'JAX_COMPILATION_CACHE_DIR, where set, wins.'),
    ),
    'tracking': (
        Field('wandb_project', '',
              Rule(wandb_writer.usable, wandb_writer.PROJECT_ALLOWED),
              'Also log the scalars and the config to this Weights & Biases '
              "project; '' = off. The W&B run's id is kept in "
              'WORKDIR/wandb_run_id, so a resumed run continues it; '
              'WANDB_MODE=offline logs without an account.'),
        Field('wandb_entity', '', text(),
              "The W&B user or team the project belongs to; '' = your "
              'default entity.'),
        Field('wandb_run_name', '', text(),
              "The W&B run's name; '' = the workdir's name."),
        Field('wandb_tags', '',
              Rule(wandb_writer.valid_tags, wandb_writer.TAGS_ALLOWED),
              'Tags of the W&B run, comma-separated, e.g. '
              '--config.wandb_tags=baseline,resnet.'),
    ),
    'model': (
        Field('model', 'cnn', text(non_empty=True),
              "A name from zoo.list_models(), or a Linen Module of your own "
              "as 'package.module:ClassName' (it takes num_classes and "
              "dtype)."),
        Field('model_kwargs', ml_collections.ConfigDict(), None,
              'Extra arguments of zoo.create(), e.g. '
              '--config.model_kwargs.drop_path_rate=0.1.',
              checked_by='the model'),
        Field('half_precision', False, BOOLEAN,
              'Compute in half_precision_dtype; parameters, optimizer state '
              'and loss stay float32.'),
        Field('half_precision_dtype', 'bfloat16',
              choice(*HALF_PRECISION_DTYPES),
              'bfloat16 suits TPUs and recent GPUs; float16 (GPUs) adds '
              'dynamic loss scaling, skipping overflowing updates.'),
        Field('init_from', '', text(),
              "Start from another run's parameters (its workdir, checkpoints "
              "directory or one step's) or converted weights; those whose "
              "name or shape differ (a new head) keep their initialization. "
              "Ignored when resuming."),
        Field('pretrained', '', text(),
              "Start from the model's published weights: one of its tags "
              "(python -m zoo lists them), downloaded once and kept "
              "converted in ~/.cache/jax-model-zoo/weights. The options the "
              "weights fix (e.g. a ViT's GELU) are set unless model_kwargs "
              "sets them, and image_channels and normalize as they were "
              "trained; a new head keeps its initialization. Ignored when "
              "resuming; not with init_from."),
    ),
    'data': (
        Field('dataset', 'mnist', text(non_empty=True),
              'A TFDS name; fashion_mnist_idx for the offline Debian files; '
              'or your own images: folder:PATH (PATH/SPLIT/CLASS/*.jpg or '
              'PATH/CLASS/*.png), hf:NAME_OR_PATH (a Hugging Face dataset), '
              'records:PATH (made by python -m recipes.data.prepare); for a '
              'language model, tokens:PATH (packed token sequences made by '
              'python -m recipes.data.prepare --tokenizer=FILE --seq_len=N).'),
        Field('tokenizer', '', text(),
              "For a language model on text: the model's tokenizer file or "
              "folder, or bytes (UTF-8 bytes, 257 ids). The dataset is then "
              'text, jsonl:PATH, parquet:PATH, hf:NAME_OR_PATH or '
              'fortune:PATH, tokenized and packed into seq_len-token '
              'sequences once, in data_dir (default '
              '~/.cache/jax-model-zoo/tokens), as python -m '
              'recipes.data.prepare does; later runs read them.'),
        Field('seq_len', 0, integer(0),
              'For a language model, the tokens per sequence: what python '
              '-m recipes.compile compiles for when tokens:PATH is not '
              'prepared yet, and what a run checks PATH was prepared with; '
              '0 = as PATH was prepared (its manifest).'),
        Field('data_dir', '', text(),
              "Where the data is; '' = TFDS's default directory (for text "
              "with a tokenizer, ~/.cache/jax-model-zoo/tokens)."),
        Field('train_split', 'train', text(non_empty=True),
              "The split trained on; TFDS slicing works for every dataset, "
              "e.g. 'train[:99%]'."),
        Field('eval_split', 'test', text(non_empty=True),
              'The split evaluated under eval/.'),
        Field('extra_eval_splits', ml_collections.ConfigDict(), EVAL_SPLITS,
              "More splits evaluated, {name: split}, each under "
              "eval_<name>/, e.g. {'minival': 'train[99%:]'}."),
        Field('data_source', 'auto', choice(*datasets.DATA_SOURCES),
              'How the data is read: auto = by its name (IDX files and small '
              'TFDS datasets in memory, ImageNet-size ones streamed; your own '
              'images in memory when small and the preset keeps their size); '
              'memory or stream force it.'),
        Field('image_channels', 0, int_choice(*image_codec.CHANNELS),
              'Images become 1 (grey) or 3 (RGB) channels, whatever their '
              'mode; 0 = as stored (your own images: grey if the first '
              "training image is grey, else RGB); with pretrained, the "
              "weights' (3: grey images repeated)."),
        Field('allow_changed_data', False, BOOLEAN,
              'Resume or evaluate a workdir although the files of its image '
              'folder were added, removed or changed size since they were '
              'recorded in WORKDIR/data_files.json (the data order then '
              'differs from the first run\'s); they are recorded anew.'),
        Field('skip_bad_images', False, BOOLEAN,
              'Your own images: leave out (and count in the log) those that '
              'do not decode, checked before training; false = stop, naming '
              'the first.'),
        Field('image_column', '', text(),
              "hf: the image column; '' = the column of Image type."),
        Field('label_column', '', text(),
              "hf: the label column; '' = the ClassLabel column. Text with "
              'a tokenizer: the column of labels, which makes it labelled '
              'text for an encoder classifier (fortune: has collection, the '
              "file of each entry); '' = text for a language model."),
        Field('classes', '', text(),
              'Labelled text: the classes kept, comma-separated (e.g. '
              "computers,zippy); '' = all of them."),
        Field('text_column', '', text(),
              "Text with a tokenizer (jsonl:, parquet:, hf:): the column of "
              "text; '' = 'text'."),
        Field('data_threads', 0, integer(0, 256, note=' (0 = automatic)'),
              'Streamed own images: batches decoded at once; 0 = two per '
              'core, up to 16.'),
        Field('augment', 'none', choice(*preprocess.AUGMENTATIONS),
              'Training augmentation: none | cifar (pad, crop, flip) | '
              'imagenet (random-resized crop of the JPEGs, flip) | finetune '
              '(random crop of decoded images resized to image_size).'),
        Field('normalize', '', choice('', *preprocess.MEAN_STD),
              "'' | cifar10 | imagenet (per-channel mean/std) | "
              "minus_one_to_one (values in [-1, 1]); with pretrained, '' "
              "is the weights' own."),
        Field('image_size', 224, integer(1),
              'The side of the images the imagenet and finetune presets '
              'produce.'),
        Field('randaugment_layers', 0, integer(0, note=' (0 = off)'),
              'RandAugment (Cubuk et al. 2019): this many random operations '
              'per training image; 0 = off.'),
        Field('randaugment_magnitude', 10, integer(0, 10),
              "RandAugment's magnitude on the 0-10 scale."),
        Field('crop_area_min', 0.0, number(0, 1),
              "imagenet, finetune: the random crop's smallest area, a "
              "fraction of the image's, up to all of it (aspect 0.75-1.33), "
              "as big_vision's inception_crop draws it; 0 = the preset's "
              "own: imagenet 10% (the Flax ImageNet example's), finetune "
              "5%."),
    ),
    'schedule': (
        Field('batch_size', 128, integer(1),
              'The global batch, over all devices and processes.'),
        Field('eval_batch_size', 0, integer(0, note=' (0 = batch_size)'),
              'The global eval batch; 0 = batch_size.'),
        Field('num_epochs', 10.0, number(0),
              'Training length in epochs.'),
        Field('num_train_steps', 0, integer(0, note=' (0 = from num_epochs)'),
              'Training length in steps; wins over num_epochs when > 0.'),
        Field('lr_schedule', 'constant', choice(*optimizers.SCHEDULES),
              'constant | exponential (learning_rate * decay_rate ** (step / '
              'decay_steps)) | warmup_cosine (linear warmup, cosine decay to '
              'zero).'),
        Field('decay_rate', 0.1, number(0, low_open=True),
              'exponential: the factor per decay_steps.'),
        Field('decay_steps', 1000, integer(1),
              'exponential: the steps over which the rate falls by '
              'decay_rate.'),
        Field('staircase', False, BOOLEAN,
              'exponential: decay in steps rather than smoothly.'),
        Field('warmup_epochs', 0.0, number(0),
              'warmup_cosine: epochs of linear warmup from zero.'),
        Field('warmup_steps', 0, integer(0, note=' (0 = from warmup_epochs)'),
              'warmup_cosine: the warmup in steps; wins over warmup_epochs '
              'when > 0, and must be fewer than the training steps.'),
    ),
    'optim': (
        Field('optimizer', 'sgd', choice(*optimizers.OPTIMIZERS),
              'sgd | adam | adamw; weight decay applies to kernels only.'),
        Field('learning_rate', 0.1, number(0), 'The peak learning rate.'),
        Field('momentum', 0.9, FRACTION, 'sgd: momentum; 0 = none.'),
        Field('nesterov', False, BOOLEAN, 'sgd: Nesterov momentum.'),
        Field('b1', 0.9, FRACTION, "adam, adamw: the first moment's decay."),
        Field('b2', 0.999, FRACTION,
              "adam, adamw: the second moment's decay."),
        Field('weight_decay', 0.0, number(0),
              'L2 on kernels (sgd, adam) or decoupled decay (adamw).'),
        Field('weight_decay_scale', 'learning_rate',
              choice(*optimizers.WEIGHT_DECAY_SCALES),
              "adamw: what the decay is multiplied by: learning_rate (optax "
              "and PyTorch: p -= lr_t * wd * p) or schedule, the schedule's "
              "factor only (big_vision: p -= (lr_t / lr) * wd * p)."),
        Field('adam_mu_dtype', '', choice(*ADAM_MU_DTYPES),
              "dtype of Adam's first moment; '' = the parameters'; bfloat16 "
              "halves its memory, as big_vision does."),
        Field('grad_clip_norm', 0.0, number(0),
              'Clip gradients to this global norm before the optimizer; 0 = '
              'off.'),
    ),
    'update': (
        Field('label_smoothing', 0.0, FRACTION,
              'The target is (1 - s) * one_hot + s / num_classes.'),
        Field('mixup_alpha', 0.0, number(0),
              'Mixup (Zhang et al. 2018): a batch mixed with itself rolled by '
              'one example, by a ratio from Beta(alpha, alpha); 0 = off.'),
        Field('cutmix_alpha', 0.0, number(0),
              'CutMix (Yun et al. 2019), likewise; 0 = off.'),
        Field('mix_prob', 1.0, PROBABILITY,
              'The probability that a batch is mixed.'),
        Field('cutmix_switch_prob', 0.5, PROBABILITY,
              'With both alphas > 0: the probability of cutmix over mixup.'),
        Field('grad_accum_steps', 1, integer(1),
              "Split each batch into this many micro-batches whose gradients "
              "are summed before one update: the whole batch's update in "
              "less memory."),
        Field('ema_decay', 0.0, FRACTION,
              'Keep an exponential moving average of the parameters with '
              'this decay (e.g. 0.9999), evaluated under eval_ema/ and '
              'checkpointed; 0 = none.'),
        Field('cross_device_batch_norm', False, BOOLEAN,
              "pmap, shard_map: batch-norm statistics over the whole global "
              "batch instead of each device's share (sharded always does)."),
        Field('skip_nonfinite_updates', False, BOOLEAN,
              'A non-finite loss or gradient norm stops the run naming the '
              'step; with this, that update is skipped and counted '
              '(train/skipped_steps).'),
    ),
    'parallel': (
        Field('strategy', 'sharded', choice(*STRATEGIES),
              'sharded: jax.jit on a device mesh, with the fields below '
              '(which the others ignore) | shard_map: the state replicated on '
              'every device, each step one jax.shard_map | pmap: the same '
              'with jax.pmap, the classic recipe (the *_pmap configs).'),
        Field('mesh.data', -1, MESH_SIZE,
              'Mesh axis sizes; one may be -1 (the devices left over). The '
              'batch is split over data x fsdp.'),
        Field('mesh.fsdp', 1, MESH_SIZE,
              'Also splits parameters and optimizer state.'),
        Field('mesh.tensor', 1, MESH_SIZE,
              "Splits large matrices (a ViT's MLP, its heads)."),
        Field('mesh.dcn_data', 1, integer(1),
              'Multislice: the number of TPU slices, joined by the data-'
              'center network; the data axis spans them (data parallel '
              'across slices), the sizes above are within one slice.'),
        Field('partition_rules', (), None,
              "Flax logical-axis rules, ((logical name, mesh axes), ...); () "
              "= the defaults of the model's family. First match wins.",
              checked_by='recipes/parallel/partition_rules.py'),
        Field('path_rules', (), None,
              "((regex on the parameter path, spec per dimension), ...), "
              "checked before the logical rules, e.g. "
              "(('Dense_0/kernel$', (None, 'tensor')),). Parameters no rule "
              "matches are replicated.",
              checked_by='recipes/parallel/partition_rules.py'),
    ),
    'checkpoint': (
        Field('checkpoint_every_steps', 1000,
              integer(-1, note=' (0 = only at the end, -1 = never)'),
              'Save every this many steps in WORKDIR/checkpoints; a '
              'restarted run resumes from the latest. 0 = only at the end; '
              '-1 = save none (existing ones are still resumed from).'),
        Field('keep_checkpoints', 3, integer(0, note=' (0 = keep all)'),
              'How many of the newest checkpoints to keep; 0 = all.'),
    ),
    'log': (
        Field('log_every_steps', 100, integer(1),
              'Train metrics (loss, accuracy, steps/s) every this many '
              'steps; the progress line (ETA) comes every 20 s.'),
        Field('eval_every_steps', 0, integer(0, note=' (0 = once per epoch)'),
              'Evaluate every this many steps; 0 = once per epoch.'),
        Field('profile_steps', 0, integer(0, note=' (0 = no trace)'),
              "Trace this many steps into WORKDIR/summaries/plugins/profile "
              "for TensorBoard's profile tab (the profile extra); 0 = none."),
        Field('profile_start_step', 10, integer(1),
              'The step after which the trace starts.'),
    ),
}

FIELDS: dict[str, Field] = {field.name: field
                            for fields in SECTIONS.values()
                            for field in fields}


def value(config: ml_collections.ConfigDict, name: str) -> Any:
  """The value of field `name` ('batch_size', 'mesh.data') in `config`.

  Raises:
    KeyError, AttributeError: when the config has no such field.
  """
  for key in name.split('.'):
    config = config[key]
  return config


def markdown_table() -> str:
  """The fields as the Markdown table of docs/config.md, by section."""
  lines = []
  for section, fields in SECTIONS.items():
    lines += [f'### {section}', '', '| field | default | allowed | what it '
              'does |', '|---|---|---|---|']
    for field in fields:
      default = field.default
      if isinstance(default, ml_collections.ConfigDict):
        default = default.to_dict()
      allowed = (field.rule.allowed if field.rule else
                 f'checked by {field.checked_by}')
      cells = [f'`{field.name}`', f'`{default!r}`', allowed, field.help]
      lines.append('| ' + ' | '.join(c.replace('|', '\\|') for c in cells)
                   + ' |')
    lines.append('')
  return '\n'.join(lines)



if __name__ == '__main__':
  startup.loaded()
  # python -m recipes.config.fields > table.md: the table of docs/config.md.
  print(markdown_table(), end='')

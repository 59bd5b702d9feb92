"""Checks every config field before anything is loaded or written.

One rule per field of recipes/config/defaults.py: what values it allows, written once
so that the error and the check cannot disagree. A bad value ends the run with
one line naming the field, the value and what is allowed. What depends on the
devices or the data (the mesh against the device count, the batch against the
number of devices, labels against the classes) is checked where those are
known, also before training starts.
"""

import dataclasses
import math
from typing import Any, Callable

import ml_collections

from recipes.core import optimizers
from recipes.data import datasets, preprocess
from recipes.parallel.strategy import STRATEGIES
from recipes.runtime.errors import UserError

MODES = ('train', 'eval')
HALF_PRECISION_DTYPES = ('bfloat16', 'float16')
# Seeds feed both JAX and tf.data's stateless ops: a non-negative int32.
MAX_SEED = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Rule:
  allows: Callable[[Any], bool]
  allowed: str  # What `allows` accepts, as the error says it.


def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value))


def integer(low: int, high: int | None = None, note: str = '') -> Rule:
  bounds = f'>= {low}' if high is None else f'from {low} to {high}'
  return Rule(lambda v: _is_int(v) and low <= v and (high is None or
                                                     v <= high),
              f'an int {bounds}{note}')


def number(low: float, high: float | None = None, low_open: bool = False,
           high_open: bool = False) -> Rule:
  """A finite float (or int) between the bounds."""

  def allows(v):
    return _is_number(v) and (v > low if low_open else v >= low) and (
        high is None or (v < high if high_open else v <= high))

  bounds = f'{">" if low_open else ">="} {low:g}'
  if high is not None:
    bounds += f' and {"<" if high_open else "<="} {high:g}'
  return Rule(allows, f'a finite number {bounds}')


def choice(*options: str) -> Rule:
  return Rule(lambda v: v in options,
              f'one of {", ".join(repr(o) for o in options)}')


def text(non_empty: bool = False) -> Rule:
  return Rule(lambda v: isinstance(v, str) and bool(v or not non_empty),
              'a non-empty string' if non_empty else 'a string')


BOOLEAN = Rule(lambda v: isinstance(v, bool), 'True or False')
FRACTION = number(0, 1, high_open=True)
PROBABILITY = number(0, 1)
ADAM_MU_DTYPES = ('', 'bfloat16', 'float16', 'float32')


def _are_eval_splits(value) -> bool:
  # Not 'ema' or '*_ema': eval_<name>_ema/ holds the EMA's results.
  return isinstance(value, (dict, ml_collections.ConfigDict)) and all(
      isinstance(k, str) and k.isidentifier() and k != 'ema'
      and not k.endswith('_ema') and isinstance(v, str) and v
      for k, v in value.items())


EVAL_SPLITS = Rule(_are_eval_splits,
                   "a dict of {name: split} whose names are identifiers, "
                   "neither 'ema' nor ending in '_ema', e.g. "
                   "{'minival': 'train[99%:]'}")

RULES = {
    'strategy': choice(*STRATEGIES),
    'mode': choice(*MODES),
    'model': text(non_empty=True),
    'half_precision': BOOLEAN,
    'half_precision_dtype': choice(*HALF_PRECISION_DTYPES),
    'init_from': text(),
    'dataset': text(non_empty=True),
    'data_dir': text(),
    'train_split': text(non_empty=True),
    'eval_split': text(non_empty=True),
    'extra_eval_splits': EVAL_SPLITS,
    'data_source': choice(*datasets.DATA_SOURCES),
    'augment': choice(*preprocess.AUGMENTATIONS),
    'normalize': choice('', *preprocess.MEAN_STD),
    'image_size': integer(1),
    'randaugment_layers': integer(0, note=' (0 = off)'),
    'randaugment_magnitude': integer(0, 10),
    'label_smoothing': FRACTION,
    'mixup_alpha': number(0),
    'cutmix_alpha': number(0),
    'mix_prob': PROBABILITY,
    'cutmix_switch_prob': PROBABILITY,
    'batch_size': integer(1),
    'eval_batch_size': integer(0, note=' (0 = batch_size)'),
    'num_epochs': number(0),
    'num_train_steps': integer(0, note=' (0 = from num_epochs)'),
    'optimizer': choice(*optimizers.OPTIMIZERS),
    'learning_rate': number(0),
    'momentum': FRACTION,
    'nesterov': BOOLEAN,
    'b1': FRACTION,
    'b2': FRACTION,
    'weight_decay': number(0),
    'weight_decay_scale': choice(*optimizers.WEIGHT_DECAY_SCALES),
    'adam_mu_dtype': choice(*ADAM_MU_DTYPES),
    'grad_clip_norm': number(0),
    'grad_accum_steps': integer(1),
    'ema_decay': FRACTION,
    'cross_device_batch_norm': BOOLEAN,
    'lr_schedule': choice(*optimizers.SCHEDULES),
    'decay_rate': number(0, low_open=True),
    'decay_steps': integer(1),
    'staircase': BOOLEAN,
    'warmup_epochs': number(0),
    'checkpoint_every_steps': integer(
        -1, note=' (0 = only at the end, -1 = never)'),
    'keep_checkpoints': integer(0, note=' (0 = keep all)'),
    'skip_nonfinite_updates': BOOLEAN,
    'stall_timeout_seconds': number(0),
    'seed': integer(0, MAX_SEED),
    'log_every_steps': integer(1),
    'eval_every_steps': integer(0, note=' (0 = once per epoch)'),
    'profile_steps': integer(0, note=' (0 = no trace)'),
    'profile_start_step': integer(1),
    'mesh.data': Rule(lambda v: _is_int(v) and (v >= 1 or v == -1),
                      'an int >= 1, or -1 for the devices left over'),
}
RULES['mesh.fsdp'] = RULES['mesh.tensor'] = RULES['mesh.data']
# Checked by their own modules, which know what a valid entry is: the rules
# by recipes/parallel/partition_rules.py, the model's arguments by the model.
CHECKED_ELSEWHERE = ('partition_rules', 'path_rules', 'model_kwargs')


def _value(config, name: str):
  for key in name.split('.'):
    config = config[key]
  return config


def check(config: ml_collections.ConfigDict):
  """Raises a UserError for the first field whose value is not allowed."""
  if not isinstance(config, ml_collections.ConfigDict):
    raise UserError(f'the config is a {type(config).__name__}, not an '
                    'ml_collections.ConfigDict: make get_config() start from '
                    'recipes/defaults.get_config() and return it.')
  for name, rule in RULES.items():
    try:
      value = _value(config, name)
    except (KeyError, AttributeError):
      raise UserError(f'the config has no field {name}: make get_config() '
                      'start from recipes/defaults.get_config().') from None
    if not rule.allows(value):
      if isinstance(value, ml_collections.ConfigDict):  # Its repr is YAML.
        value = value.to_dict()
      raise UserError(f'config field {name} is {value!r}; it must be '
                      f'{rule.allowed}.')
  if (config.grad_accum_steps > 1 and config.half_precision
      and config.half_precision_dtype == 'float16'):
    raise UserError('grad_accum_steps > 1 does not work with float16 loss '
                    'scaling; use --config.half_precision_dtype=bfloat16 or '
                    '--config.grad_accum_steps=1.')

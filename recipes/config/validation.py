"""Checks every config field before anything is loaded or written.

Each field's rule is declared with it (recipes/config/fields.py), written
once so that the error and the check cannot disagree. A bad value ends the
run with one line naming the field, the value and what is allowed. What
depends on the devices or the data (the mesh against the device count, the
batch against the number of devices, labels against the classes) is checked
where those are known, also before training starts.
"""

import ml_collections

from recipes.config import fields, pretrained
from recipes.config.fields import FIELDS
from recipes.core import optimizers
from recipes.runtime.errors import UserError

RULES = {name: field.rule for name, field in FIELDS.items() if field.rule}
# Checked by the modules that read them, which know what a valid entry is:
# the rules by recipes/parallel/partition_rules.py, the model's arguments by
# the model.
CHECKED_ELSEWHERE = tuple(name for name, field in FIELDS.items()
                          if not field.rule)


def check(config: ml_collections.ConfigDict):
  """Checks every field of `config`, and the fields that go together.

  With config.pretrained, also sets the fields its weights fix where the
  config leaves them open (recipes/config/pretrained.py), so that what is
  logged and saved is what the run uses.

  Args:
    config: the run's config, as a config file and overrides made it.

  Raises:
    UserError: naming the first field whose value is not allowed, the value
      and what is allowed.
  """
  if not isinstance(config, ml_collections.ConfigDict):
    raise UserError(f'the config is a {type(config).__name__}, not an '
                    'ml_collections.ConfigDict: make get_config() start from '
                    'recipes/config/defaults.py get_config() and return it.')
  for name, rule in RULES.items():
    try:
      value = fields.value(config, name)
    except (KeyError, AttributeError):
      raise UserError(f'the config has no field {name}: make get_config() '
                      'start from recipes/config/defaults.py '
                      'get_config().') from None
    if not rule.allows(value):
      if isinstance(value, ml_collections.ConfigDict):  # Its repr is YAML.
        value = value.to_dict()
      raise UserError(f'config field {name} is {value!r}; it must be '
                      f'{rule.allowed}.')
  if config.pretrained and config.init_from:
    raise UserError('pretrained and init_from both name weights to start '
                    'from; set one of them.')
  if (config.grad_accum_steps > 1 and config.half_precision
      and config.half_precision_dtype == 'float16'):
    raise UserError('grad_accum_steps > 1 does not work with float16 loss '
                    'scaling; use --config.half_precision_dtype=bfloat16 or '
                    '--config.grad_accum_steps=1.')
  # A length in epochs (num_train_steps=0) is checked once the data's size
  # is known (recipes/experiment.py).
  optimizers.check_warmup(config, config.num_train_steps)
  pretrained.apply(config)  # Last: it may download the weights.

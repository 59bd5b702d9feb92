"""Learning-rate schedules and optimizers built from the config."""

import flax
import ml_collections
import optax

from recipes.runtime.errors import UserError

SCHEDULES = ('constant', 'exponential', 'warmup_cosine')
OPTIMIZERS = ('sgd', 'adam', 'adamw')
WEIGHT_DECAY_SCALES = ('learning_rate', 'schedule')


def learning_rate_schedule(config: ml_collections.ConfigDict,
                           steps_per_epoch: int,
                           num_train_steps: int) -> optax.Schedule:
  """`config.lr_schedule`; step counts are given in epochs where noted.

  Args:
    config: the run's config: `lr_schedule`, `learning_rate` and the
      chosen schedule's fields (`decay_steps`, `warmup_steps` or
      `warmup_epochs`, ...).
    steps_per_epoch: updates per epoch, to turn epochs into steps.
    num_train_steps: the run's length in updates; the cosine decays to 0
      at its end.

  Returns:
    The learning rate as a function of the step.

  Raises:
    UserError: for a schedule not in SCHEDULES.
  """
  lr = config.learning_rate
  if config.lr_schedule == 'constant':
    return optax.constant_schedule(lr)
  if config.lr_schedule == 'exponential':
    # lr * decay_rate ** (step / decay_steps), optionally in whole intervals.
    return optax.exponential_decay(
        lr, transition_steps=max(1, config.decay_steps),
        decay_rate=config.decay_rate, staircase=config.staircase)
  if config.lr_schedule == 'warmup_cosine':
    warmup = warmup_steps(config, steps_per_epoch)
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=lr, warmup_steps=warmup,
        decay_steps=max(num_train_steps, warmup + 1), end_value=0.0)
  raise UserError(f'unknown lr_schedule {config.lr_schedule!r}; '
                  f'choose one of {", ".join(SCHEDULES)}.')


def warmup_steps(config: ml_collections.ConfigDict,
                 steps_per_epoch: int) -> int:
  """The warmup's length in steps: `warmup_steps`, or where that is 0,
  `warmup_epochs` whole steps."""
  return config.warmup_steps or int(config.warmup_epochs * steps_per_epoch)


def check_warmup(config: ml_collections.ConfigDict, num_train_steps: int):
  """UserError if `warmup_steps` leaves no step of the run after it. A run
  of one step (a trial) is let through, as big_vision does; a warmup in
  epochs longer than the run is kept too (the rate rises through it).

  Args:
    config: the run's config: `lr_schedule` and `warmup_steps`.
    num_train_steps: the run's length in updates.

  Raises:
    UserError: for a warmup_cosine warmup_steps >= num_train_steps > 1.
  """
  if (config.lr_schedule == 'warmup_cosine'
      and config.warmup_steps >= num_train_steps > 1):
    raise UserError(f'warmup_steps={config.warmup_steps} is not shorter than '
                    f'the run\'s {num_train_steps} training steps; set '
                    '--config.warmup_steps lower (0 = from warmup_epochs).')


def decay_mask(params):
  """Decay weight matrices and kernels only: not biases, norm scales, nor a
  ViT's class token and position embedding (as timm and big_vision).

  Args:
    params: the parameters tree.

  Returns:
    The same tree with True for each parameter to decay, else False.
  """
  return flax.traverse_util.path_aware_map(
      lambda path, p: path[-1] == 'kernel' and p.ndim > 1, params)


def _optimizer(config, schedule) -> optax.GradientTransformation:
  """`config.optimizer` with `config.weight_decay` (decoupled for adamw)."""
  wd = config.weight_decay
  mu_dtype = config.adam_mu_dtype or None
  if config.optimizer == 'sgd':
    step = optax.sgd(schedule, momentum=config.momentum or None,
                     nesterov=config.nesterov)
  elif config.optimizer == 'adam':
    step = optax.adam(schedule, b1=config.b1, b2=config.b2, mu_dtype=mu_dtype)
  elif config.optimizer == 'adamw':
    if config.weight_decay_scale == 'schedule':
      # optax decays by lr_t * wd * p; big_vision by (lr_t / lr) * wd * p,
      # which is the same with wd / lr in place of wd.
      wd = wd / config.learning_rate if config.learning_rate else 0.0
    return optax.adamw(schedule, b1=config.b1, b2=config.b2, weight_decay=wd,
                       mask=decay_mask, mu_dtype=mu_dtype)
  else:
    raise UserError(f'unknown optimizer {config.optimizer!r}; '
                    f'choose one of {", ".join(OPTIMIZERS)}.')
  if not wd:
    return step
  # L2 regularization: the decay goes through momentum and the schedule.
  return optax.chain(optax.add_decayed_weights(wd, mask=decay_mask), step)


def create_optimizer(config: ml_collections.ConfigDict,
                     schedule: optax.Schedule) -> optax.GradientTransformation:
  """The optimizer, after clipping the gradients' global norm if asked.

  Args:
    config: the run's config: `optimizer`, `weight_decay`,
      `grad_clip_norm` (0: no clipping) and the optimizer's own fields.
    schedule: the learning rate by step (`learning_rate_schedule`).

  Returns:
    The optax transformation that turns gradients into updates.

  Raises:
    UserError: for an optimizer not in OPTIMIZERS.
  """
  tx = _optimizer(config, schedule)
  if config.grad_clip_norm:
    return optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), tx)
  return tx

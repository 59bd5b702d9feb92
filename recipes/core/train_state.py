"""The train state: parameters, optimizer state, batch-norm statistics, step.

Plus how updates are made: float16 loss scaling (a flax `DynamicScale`), an
average of the parameters (EMA), and the `UpdateRules` the shared step
follows (recipes/core/steps.py).
"""

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct
from flax.training import dynamic_scale as dynamic_scale_lib
from flax.training import train_state


@dataclasses.dataclass(frozen=True)
class UpdateRules:
  """What the shared step does besides the optimizer's update; the defaults
  change nothing. The fields are the config's (recipes/config/defaults.py)."""

  label_smoothing: float = 0.0
  mixup_alpha: float = 0.0
  cutmix_alpha: float = 0.0
  mix_prob: float = 1.0
  cutmix_switch_prob: float = 0.5
  grad_accum_steps: int = 1
  ema_decay: float = 0.0
  skip_nonfinite_updates: bool = False

  @property
  def mixes(self) -> bool:
    return self.mixup_alpha > 0 or self.cutmix_alpha > 0

  @property
  def soft_targets(self) -> bool:
    """Whether the loss needs probability targets rather than class ids."""
    return self.mixes or self.label_smoothing > 0


class TrainState(train_state.TrainState):
  # Mutable model state such as batch-norm statistics; {} for models without.
  batch_stats: Any = None
  # float16 only: the loss scale, saved and restored with the rest.
  dynamic_scale: dynamic_scale_lib.DynamicScale | None = None
  # The exponential moving average of `params` when its decay is > 0.
  ema_params: Any = None
  update_rules: UpdateRules = struct.field(pytree_node=False,
                                          default=UpdateRules())

  @property
  def skips_nonfinite_updates(self) -> bool:
    """Whether an update with a non-finite loss or gradient is skipped: when
    asked, and always under float16 loss scaling, which expects overflows."""
    return (self.update_rules.skip_nonfinite_updates
            or self.dynamic_scale is not None)


def _init_fn(model: nn.Module, tx: optax.GradientTransformation,
             image_shape: tuple[int, ...], loss_scaling: bool = False,
             update_rules: UpdateRules = UpdateRules()):
  """rng -> initial TrainState, from the model run on one dummy example."""

  def init(rng):
    variables = model.init(rng, jnp.zeros((1, *image_shape), jnp.float32),
                           train=False)
    # Plain arrays: logical-axis annotations are read from the model when a
    # strategy needs them (`logical_names`), not carried in the state.
    variables = nn.meta.unbox(variables)
    params = variables['params']
    return TrainState.create(
        apply_fn=model.apply, params=params, tx=tx,
        batch_stats=variables.get('batch_stats', {}),
        dynamic_scale=dynamic_scale_lib.DynamicScale() if loss_scaling
        else None,
        ema_params=jax.tree.map(jnp.copy, params) if update_rules.ema_decay
        else None, update_rules=update_rules)

  return init


def options(config) -> dict:
  """The update options `create` takes, from the config."""
  update_rules = UpdateRules(**{field.name: getattr(config, field.name)
                                for field in dataclasses.fields(UpdateRules)})
  return dict(loss_scaling=bool(config.half_precision)
              and config.half_precision_dtype == 'float16',
              update_rules=update_rules)


def create(model: nn.Module, tx: optax.GradientTransformation,
           image_shape: tuple[int, ...], rng: jax.Array,
           shardings: Any = None, **options) -> TrainState:
  """Initializes the state; on the default device unless `shardings` is given.

  `shardings` (a TrainState of shardings, as `abstract` returns shapes) makes
  each array come out of the initialization already split across the devices:
  no device ever holds the whole state. `options`: see `options(config)`.
  """
  return jax.jit(_init_fn(model, tx, image_shape, **options),
                 out_shardings=shardings)(rng)


def abstract(model: nn.Module, tx: optax.GradientTransformation,
             image_shape: tuple[int, ...], **options) -> TrainState:
  """The state's shapes and dtypes (jax.ShapeDtypeStruct), computing nothing."""
  return jax.eval_shape(_init_fn(model, tx, image_shape, **options),
                        jax.random.PRNGKey(0))


def logical_names(model: nn.Module, image_shape: tuple[int, ...]):
  """The params tree with a PartitionSpec of logical axis names per leaf.

  Leaves the model does not annotate get an empty PartitionSpec.
  """
  variables = jax.eval_shape(
      lambda rng: model.init(rng, jnp.zeros((1, *image_shape), jnp.float32),
                             train=False), jax.random.PRNGKey(0))
  return nn.get_partition_spec(variables)['params']

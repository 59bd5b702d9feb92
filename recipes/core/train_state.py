"""The train state: parameters, optimizer state, batch-norm statistics, step.

Plus how updates are made: float16 loss scaling (a flax `DynamicScale`), an
average of the parameters (EMA), and the `UpdateRules` the shared step
follows (recipes/core/steps.py). A state is made from its spec
(recipes/core/state_spec.py).
"""

import dataclasses
from typing import Any

from flax import struct
from flax.training import dynamic_scale as dynamic_scale_lib
from flax.training import train_state


@dataclasses.dataclass(frozen=True)
class UpdateRules:
  """What the shared step does besides the optimizer's update; the defaults
  change nothing. Each field is the config field of the same name
  (recipes/config/fields.py), set by recipes/experiment.py."""

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
    """Whether batches are mixed (mixup or cutmix)."""
    return self.mixup_alpha > 0 or self.cutmix_alpha > 0

  @property
  def soft_targets(self) -> bool:
    """Whether the loss needs probability targets rather than class ids."""
    return self.mixes or self.label_smoothing > 0


class TrainState(train_state.TrainState):
  """flax's TrainState plus batch statistics, the loss scale, the
  parameters' average and the rules of the update."""

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

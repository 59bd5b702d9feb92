"""What the strategies with a replicated state share (pmap, shard_map): they
are made from the config alike, every device takes an equal share of each
batch, and the log shows the parameters and where their copies live."""

from clu import parameter_overview

from recipes.core import train_state


class DataParallel:
  """Base of PmapStrategy and ShardMapStrategy. Subclasses set
  `abstract_state` (the state's shapes) and `placement` (a line for the
  log)."""

  abstract_state = None
  placement = ''

  @classmethod
  def from_config(cls, config, model, tx, image_shape, devices=None):
    return cls(model, tx, image_shape, seed=config.seed, devices=devices,
               **train_state.options(config))

  @staticmethod
  def batch_divisor(config, num_devices: int) -> tuple[int, str]:
    del config  # Every device gets an equal share.
    return num_devices, 'devices'

  def describe(self) -> str:
    overview = parameter_overview.get_parameter_overview(
        self.abstract_state.params, include_stats=False)
    return f'{overview}\n{self.placement}'

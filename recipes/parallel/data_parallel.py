"""What the strategies with a replicated state share (pmap, shard_map): they
are made from a state spec and a list of devices alike, every device takes an
equal share of each batch, and the log shows the parameters and where their
copies live."""

from clu import parameter_overview


class DataParallel:
  """Base of PmapStrategy and ShardMapStrategy. Subclasses set
  `abstract_state` (the state's shapes) and `placement` (a line for the
  log)."""

  abstract_state = None
  placement = ''

  @classmethod
  def from_settings(cls, spec, settings, devices=None):
    """See `Strategy.from_settings`; the settings are not used."""
    del settings  # Only the sharded strategy has settings of its own.
    return cls(spec, devices=devices)

  @staticmethod
  def batch_divisor(settings, num_devices: int) -> tuple[int, str]:
    """See `Strategy.batch_divisor`: the number of devices."""
    del settings  # Every device gets an equal share.
    return num_devices, 'devices'

  def describe(self) -> str:
    """The parameters and where their copies live, for the log."""
    overview = parameter_overview.get_parameter_overview(
        self.abstract_state.params, include_stats=False)
    return f'{overview}\n{self.placement}'

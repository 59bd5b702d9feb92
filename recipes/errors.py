"""The one exception type for mistakes a user can fix, and a check that
several commands share."""


class UserError(Exception):
  """Bad input (config, data, flags): printed as one line, without traceback.

  The message says what was wrong and what to do about it.
  """


def check_divisible(name: str, batch_size: int, num_devices: int,
                    devices: str = 'devices'):
  if batch_size <= 0:
    raise UserError(f'{name} is {batch_size}; it must be a positive multiple '
                    f'of the {num_devices} {devices}, e.g. {num_devices}.')
  if batch_size % num_devices:
    below = max(num_devices, batch_size // num_devices * num_devices)
    above = (batch_size // num_devices + 1) * num_devices
    nearest = f'{below} or {above}' if below != above else f'{above}'
    raise UserError(
        f'{name} {batch_size} is not divisible by the {num_devices} {devices}; '
        f'use a multiple of {num_devices}, e.g. {nearest}.')

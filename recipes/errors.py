"""The one exception type for mistakes a user can fix."""


class UserError(Exception):
  """Bad input (config, data, flags): printed as one line, without traceback.

  The message says what was wrong and what to do about it.
  """

"""The base config: every field any recipe reads, with its default.

Configs (configs/*.py) start from `get_config()` here and change what they
need, so any field can be overridden on any config's command line. What each
field does and allows is declared in recipes/config/fields.py (and listed by
`python -m recipes.train --help` and docs/config.md).
"""

import copy

import ml_collections

from recipes.config.fields import FIELDS


def get_config() -> ml_collections.ConfigDict:
  """A new ConfigDict holding every field at its default.

  Returns:
    The config; nested fields ('mesh.data') are nested ConfigDicts.
  """
  config = ml_collections.ConfigDict()
  for name, field in FIELDS.items():
    *parents, key = name.split('.')
    node = config
    for parent in parents:
      if parent not in node:
        node[parent] = ml_collections.ConfigDict()
      node = node[parent]
    node[key] = copy.deepcopy(field.default)
  return config

"""The base config every config here starts from: `recipes/defaults.py`,
which lists every field with its default and what it does."""

from recipes.defaults import get_config  # pylint: disable=unused-import

"""Flax Linen models behind one registry: `create(name, **kwargs)`, `list_models(pattern)`."""

from zoo.registry import create, list_models, register

# Importing the model modules registers them.
from zoo import cnn, mlp  # pylint: disable=g-bad-import-order

__all__ = ['create', 'list_models', 'register']

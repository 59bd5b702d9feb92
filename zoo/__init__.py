"""Flax Linen models behind one registry: `create(name, **kwargs)`, `list_models(pattern)`.

`model_info(name)` gives a model's default input shape, parameter count and
forward FLOPs; `default_rules(name)` its logical-axis rules for sharding.
"""

from zoo.registry import (create, default_rules, input_shape, list_models,
                          register)
from zoo.info import ModelInfo, model_info

# Importing the model modules registers them.
from zoo import cnn, mlp, resnet, vit, wide_resnet  # pylint: disable=g-bad-import-order

__all__ = ['create', 'list_models', 'register', 'input_shape', 'default_rules',
           'model_info', 'ModelInfo']

"""Flax Linen models behind one registry: `create(name, **kwargs)`, `list_models(pattern)`.

`spec(name)` is a variant's metadata (family, input shape, test kwargs,
published counts), `input_shape(name, **kwargs)` the shape of one example, and
`model_info(name)` its parameter count and forward FLOPs, computed from shapes,
`feature_info(name)` the shapes and strides of its `features=True` outputs;
`create(name, pretrained=TAG)` the model bound to published weights
(zoo/weights.py lists the tags) and `load_pretrained(name, path)` a model with
converted weights of a file (torchvision, timm, big_vision; see zoo/convert/).
"""

import importlib
import pkgutil

from zoo.info import Feature, ModelInfo, feature_info, model_info, num_params
from zoo.pretrained import create, list_models, load_pretrained
from zoo.registry import ModelSpec, input_shape, register, spec

# Importing a module registers its models, and every module is imported: a
# new model is one new file. All but nnx_models, which registers nothing and
# loads flax.nnx (a third of a second): `from zoo import nnx_models` where it
# is used.
for _module in pkgutil.iter_modules(__path__):
  if not _module.name.startswith('_') and _module.name != 'nnx_models':
    importlib.import_module(f'{__name__}.{_module.name}')

__all__ = ['create', 'list_models', 'register', 'spec', 'ModelSpec',
           'input_shape', 'model_info', 'num_params', 'ModelInfo',
           'feature_info', 'Feature', 'load_pretrained']

"""Flax NNX and the zoo, both ways, through `flax.nnx.bridge`.

A zoo model, with converted or trained variables, as an NNX module:

    model, variables = zoo.load_pretrained('resnet50', 'resnet50.safetensors')
    net = nnx_models.to_nnx(model, variables, images)  # an nnx.bridge.ToNNX
    logits = net(images, train=False)

An NNX module class of your own as a Linen model that the recipes train
(`zoo.create('my_models:SmallNet', ...)`, `--config.model=my_models:SmallNet`
take an nnx.Module class as they take a Linen one: `linen_class`). The class
is built as `Class(num_classes=..., dtype=..., **model_kwargs, rngs=rngs)`
and called as `model(images, train=...)`:

- `nnx.Param`s are the 'params' collection; `nnx.BatchStat`s (nnx.BatchNorm's
  running averages) 'batch_stats', which the recipes update with
  `use_running_average=not train`, average across devices and checkpoint.
  Other state (RNG streams, counters) is not kept between steps.
- `rngs` has a 'params' stream to initialize and, in training, a 'dropout'
  stream (a function of the run's seed and step, so a resumed run draws the
  same masks): `nnx.Dropout(rate, rngs=rngs)`, called with
  `deterministic=not train`.
- A parameter's `out_sharding` names (`nnx.with_partitioning(init, names)`
  or `kernel_metadata={'out_sharding': names}`) are logical axis names, as
  a Linen model's `nn.with_logical_partitioning`: the recipes' partition
  rules map them to mesh axes.
"""

import functools
import inspect
from typing import Any, Mapping

import flax.linen as nn
import jax
from flax import nnx, traverse_util
from flax.core import FrozenDict
from flax.nnx import bridge

# The fields of bridge.ToLinen, which Linen passes back when it copies a
# module; any other keyword argument is the NNX class's.
_LINEN_FIELDS = ('nnx_class', 'args', 'kwargs', 'skip_rng', 'metadata_fn',
                 'parent', 'name')


@functools.cache
def linen_class(nnx_class: type[nnx.Module]) -> type[nn.Module]:
  """A Linen Module class whose instances are `nnx_class` (bridge.ToLinen).

  `linen_class(C)(**kwargs)` is a Linen module that builds `C(**kwargs,
  rngs=...)` and calls it; the arguments are checked against `C.__init__`
  right away. One class per NNX class, so equal arguments give equal
  modules (jit caches, train states compared).

  Args:
    nnx_class: an nnx.Module class, taking its arguments by keyword.

  Returns:
    The Linen Module class, named as `nnx_class`.
  """
  build = functools.partial(_build, nnx_class)
  signature = inspect.signature(nnx_class.__init__)

  class Model(bridge.ToLinen):
    pass

  def __init__(self, **kwargs):
    fields = {k: kwargs.pop(k) for k in _LINEN_FIELDS if k in kwargs}
    if 'kwargs' not in fields:
      try:
        signature.bind(None, **_with_rngs(signature, kwargs, None))
      except TypeError as e:
        raise TypeError(f'{nnx_class.__name__}: {e}') from None
      fields['kwargs'] = FrozenDict(kwargs)
    bridge.ToLinen.__init__(
        self, **{'nnx_class': build, 'metadata_fn': _boxed, **fields})

  Model.__init__ = __init__
  Model.__name__ = Model.__qualname__ = nnx_class.__name__
  Model.__doc__ = f'{nnx_class.__name__} (NNX) as a Linen module.'
  return Model


def _with_rngs(signature: inspect.Signature, kwargs: Mapping[str, Any], rngs):
  """`kwargs` and `rngs`, where the class takes them."""
  takes = 'rngs' in signature.parameters or any(
      p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
  return {**kwargs, 'rngs': rngs} if takes else dict(kwargs)


def _build(nnx_class: type[nnx.Module], *, rngs: nnx.Rngs, **kwargs):
  """The NNX module, as bridge.ToLinen builds it at each init and apply."""
  if 'default' not in rngs:
    # Linen's init gives the 'params' key alone; layers that take a key when
    # built (nnx.Dropout(rate, rngs=rngs)) fall back to it.
    rngs = nnx.Rngs(rngs['params'], **dict(rngs.items()))
  # No sharding while building: placing the state is the caller's (the
  # recipes' strategy), and the names need a mesh and rules to mean axes.
  with nnx.use_eager_sharding(False):
    return nnx_class(**_with_rngs(inspect.signature(nnx_class.__init__),
                                  kwargs, rngs))


def _boxed(variable: nnx.Variable):
  """A variable's value for Linen: with its `out_sharding` names as logical
  partitioning, which the recipes read as a zoo model's."""
  names = variable.get_metadata().get('out_sharding')
  if not names:
    return variable.get_value()
  return nn.LogicallyPartitioned(variable.get_value(),
                                 tuple(getattr(names, 'spec', names)))


def to_nnx(model: nn.Module, variables: Mapping[str, Any],
           inputs: jax.Array) -> bridge.ToNNX:
  """The Linen `model` with `variables` as an NNX module.

  Call it as the model, `net(images, train=False)`; in training, let it
  update its batch statistics and give it the dropout key:
  `net(images, train=True, mutable=['batch_stats'], rngs=key)`.

  Args:
    model: a zoo model (a Linen module called as `model(x, train=...)`).
    variables: its {'params': ...} (and 'batch_stats'), e.g. from
      `zoo.load_pretrained`.
    inputs: an example batch (only its shape and dtype are used).

  Returns:
    The flax.nnx.bridge.ToNNX module holding `variables`.
  """
  # Built from shapes only: the variables replace every initial value. No
  # eager sharding: the zoo's logical names mean mesh axes only under a mesh
  # and rules.
  with nnx.use_eager_sharding(False):
    net = nnx.eval_shape(lambda: bridge.ToNNX(model).lazy_init(
        inputs, train=False, rngs=jax.random.key(0)))
  # NNX keeps every collection in one tree, by module path.
  flat = {}
  for collection in variables.values():
    flat.update(traverse_util.flatten_dict(dict(collection)))
  nnx.update(net, traverse_util.unflatten_dict(flat))
  return net

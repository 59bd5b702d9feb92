"""What a model costs: parameter count and forward FLOPs, computed without running it.

    zoo.model_info('resnet50')
    ModelInfo(name='resnet50', input_shape=(224, 224, 3),
              num_params=25557032, gflops=8.18...)

Shapes come from `jax.eval_shape` and FLOPs from the traced jaxpr of one
forward pass on one example (`jax.make_jaxpr`): nothing is initialized or
computed, so this is cheap even for ViT-L.

FLOPs count the multiply-adds of every convolution and matrix product
(`conv_general_dilated`, `dot_general`, attention's einsums included), two
FLOPs each, padded positions included: the convention behind the published
4.1 GMACs of ResNet-50 and 17.6 GMACs of ViT-B/16. Normalization,
activations, softmax, pooling and additions are not counted (about 1% more).
XLA's compiled cost analysis is not used: on GPU it misses convolutions and
attention that become library calls.
"""

import dataclasses
import math

import flax.linen as nn
import jax

from zoo import registry


@dataclasses.dataclass(frozen=True)
class ModelInfo:
  name: str
  input_shape: tuple[int, ...]
  num_params: int  # Trainable parameters; batch-norm statistics excluded.
  gflops: float  # Forward pass of one example, 1e9 FLOPs.


def model_info(name: str, input_shape: tuple[int, ...] | None = None,
               **kwargs) -> ModelInfo:
  """Info on `zoo.create(name, **kwargs)` for one input of `input_shape`.

  `input_shape` defaults to the registered one for these `kwargs` (e.g. a
  ViT's `image_size`); a model of your own needs it given.

  Args:
    name: a registered name or 'package.module:ClassName' (see `zoo.spec`).
    input_shape: one example's shape, HWC, without the batch dimension;
      None: the registered one.
    **kwargs: the keyword arguments of `zoo.create`.

  Returns:
    The ModelInfo: the name, input shape, trainable parameter count (batch
    statistics excluded) and forward GFLOPs of one example.

  Raises:
    ValueError: the model is unknown, or is of your own and `input_shape`
      is not given.
  """
  model, x = _model_and_input(name, input_shape, kwargs)
  variables = _abstract_variables(model, x)
  jaxpr = jax.make_jaxpr(lambda v, x: model.apply(v, x, train=False))(
      variables, x)
  return ModelInfo(name, x.shape[1:], _count_params(variables),
                   count_flops(jaxpr.jaxpr) / 1e9)


@dataclasses.dataclass(frozen=True)
class Feature:
  """One output of a model created with `features=True`."""
  shape: tuple[int, ...]  # One example's, HWC.
  stride: int  # Input pixels per feature pixel, along each side.


def feature_info(name: str, input_shape: tuple[int, ...] | None = None,
                 **kwargs) -> list[Feature]:
  """The shape and stride of each output of `zoo.create(name,
  features=True, **kwargs)` for one input of `input_shape`, from shapes
  alone (as timm's `feature_info`).

  Args:
    name: a registered name whose model takes `features=True`.
    input_shape: one example's shape, HWC; None: the registered one.
    **kwargs: the keyword arguments of `zoo.create`.

  Returns:
    One Feature per stage (conv nets) or block (ViT, Mixer), first to last.

  Raises:
    ValueError: the model is unknown, or is of your own and `input_shape`
      is not given.
    TypeError: the model has no `features` option.
  """
  model, x = _model_and_input(name, input_shape, {**kwargs, 'features': True})
  outputs = jax.eval_shape(
      lambda x: model.init_with_output(jax.random.PRNGKey(0), x)[0], x)
  return [Feature(tuple(out.shape[1:]), x.shape[1] // out.shape[1])
          for out in outputs]


def num_params(name: str, input_shape: tuple[int, ...] | None = None,
               **kwargs) -> int:
  """`model_info(...).num_params` from shapes alone, without tracing the
  forward pass: cheap for every model.

  Args:
    name: a registered name or 'package.module:ClassName' (see `zoo.spec`).
    input_shape: one example's shape, HWC; None: the registered one.
    **kwargs: the keyword arguments of `zoo.create`.

  Returns:
    The number of trainable parameters (batch-norm statistics excluded).

  Raises:
    ValueError: as `model_info`.
  """
  model, x = _model_and_input(name, input_shape, kwargs)
  return _count_params(_abstract_variables(model, x))


def _model_and_input(name, input_shape, kwargs):
  input_shape = tuple(input_shape or registry.input_shape(name, **kwargs))
  return (registry.create(name, **kwargs),
          jax.ShapeDtypeStruct((1, *input_shape),
                               registry.spec(name).input_dtype))


def _abstract_variables(model, x):
  return jax.eval_shape(
      lambda x: nn.meta.unbox(model.init(jax.random.PRNGKey(0), x)), x)


def _count_params(variables) -> int:
  return sum(p.size for p in jax.tree.leaves(variables['params']))


def count_flops(jaxpr) -> int:
  """2 x the multiply-adds of the convolutions and dot products in `jaxpr`.

  Args:
    jaxpr: an open Jaxpr (`jax.make_jaxpr(f)(...).jaxpr`); nested jaxprs
      (jit, remat, custom derivatives) are counted too, a scan body once per
      iteration.

  Returns:
    The FLOPs: 2 per multiply-add, padded positions included.
  """
  flops = 0
  for eqn in jaxpr.eqns:
    out = eqn.outvars[0].aval.shape
    if eqn.primitive.name == 'dot_general':
      (lhs_contract, _), _ = eqn.params['dimension_numbers']
      lhs = eqn.invars[0].aval.shape
      flops += 2 * math.prod(out) * math.prod(lhs[d] for d in lhs_contract)
    elif eqn.primitive.name == 'conv_general_dilated':
      # Each output element takes one kernel's worth of multiply-adds:
      # spatial size x input features per group.
      kernel = eqn.invars[1].aval.shape
      out_features = kernel[eqn.params['dimension_numbers'].rhs_spec[0]]
      flops += 2 * math.prod(out) * math.prod(kernel) // out_features
    # Nested jaxprs (jit, custom_jvp/vjp, remat); a scan body runs `length`
    # times.
    repeats = eqn.params.get('length', 1) if eqn.primitive.name == 'scan' else 1
    for sub in _sub_jaxprs(eqn.params):
      flops += repeats * count_flops(sub)
  return flops


def _sub_jaxprs(params):
  for value in params.values():
    for item in value if isinstance(value, (tuple, list)) else (value,):
      item = getattr(item, 'jaxpr', item)  # ClosedJaxpr -> Jaxpr.
      if hasattr(item, 'eqns'):
        yield item

"""Zoo models used from Flax NNX (flax.nnx.bridge.ToNNX through
zoo/nnx_models.py `to_nnx`) with weights converted from a file compute what
the Linen model computes with them, in evaluation and in a training step."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from flax.nnx import bridge

import zoo
from tests.convert_helpers import (torchvision_resnet18_state_dict,
                                   write_safetensors)
from zoo import nnx_models
from zoo.convert import export, timm_vit
from tests.helpers import slow_after


def _vit_file_tensors() -> dict:
  """A timm ViT-Ti/16 state dict of random values (at 32x32 pixels), made
  by running the converter backwards."""
  kwargs = dict(num_classes=10, gelu='exact', image_size=32)
  shapes = jax.eval_shape(lambda: zoo.create('vit_ti16', **kwargs).init(
      jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3)), train=False))
  rng = np.random.default_rng(0)
  variables = jax.tree.map(
      lambda s: rng.normal(size=s.shape).astype(np.float32) * 0.2,
      nn.meta.unbox(shapes))
  return export.state_dict(timm_vit, 'vit_ti16', kwargs, variables)


# No `fast_compiles` here: the training step's two programs (Linen's and
# NNX's) are compared bit for bit, and jaxlib 0.10's CPU compiler without its
# optimizations, with the suite's older loop emitters (tests/conftest.py),
# rounds the batch statistics of two examples differently in each.
FILES = {'resnet18': lambda: torchvision_resnet18_state_dict(num_classes=10),
         'vit_ti16': _vit_file_tensors}


@pytest.mark.parametrize('name', slow_after(1, list(FILES)))
def test_to_nnx_computes_what_the_linen_model_does(name, tmp_path):
  path = tmp_path / f'{name}.safetensors'
  write_safetensors(path, FILES[name]())
  model, variables = zoo.load_pretrained(name, path)
  images = jax.random.normal(jax.random.PRNGKey(1), (2, 32, 32, 3))
  net = nnx_models.to_nnx(model, variables, images)
  assert isinstance(net, bridge.ToNNX)

  expected = jax.jit(lambda v, x: model.apply(v, x, train=False))(
      variables, images)
  got = nnx.jit(lambda net, x: net(x, train=False))(net, images)
  np.testing.assert_array_equal(got, expected)
  if 'batch_stats' not in variables:
    return
  # A training step updates the statistics the NNX module holds.
  expected, updates = jax.jit(lambda v, x: model.apply(
      v, x, train=True, mutable=['batch_stats']))(variables, images)
  got = nnx.jit(lambda net, x: net(x, train=True, mutable=['batch_stats']))(
      net, images)
  np.testing.assert_array_equal(got, expected)
  mean = updates['batch_stats']['BatchNorm_0']['mean']
  assert not np.array_equal(mean, variables['batch_stats']['BatchNorm_0'][
      'mean'])
  np.testing.assert_array_equal(net.BatchNorm_0['mean'].get_value(), mean)

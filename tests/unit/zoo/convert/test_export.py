"""zoo/convert/export.py without the original libraries: a converter traced
backwards gives the file it read, element for element; a model the
original cannot be is refused. Each family's export loads into timm or
torchvision in its test_convert_*.py."""

import numpy as np
import pytest

import zoo
from tests.convert_helpers import torchvision_resnet18_state_dict
from zoo import convert
from zoo.convert import export, torchvision_resnet


def test_a_converted_file_exports_to_itself():
  state = torchvision_resnet18_state_dict()
  converted = convert.convert(state, 'torchvision')
  back = export.state_dict(torchvision_resnet, 'resnet18', converted.kwargs,
                           converted.variables)
  assert list(back) == list(state)  # torchvision's order.
  for name, value in state.items():
    if name.endswith('num_batches_tracked'):  # A step counter: 0.
      assert back[name].dtype == np.int64 and back[name] == 0
    else:
      np.testing.assert_array_equal(back[name], value, err_msg=name)


def test_every_element_must_come_from_the_file():
  """A converter that set a variable twice from one element (a bug) is
  caught, not written."""
  state = torchvision_resnet18_state_dict()
  converted = convert.convert(state, 'torchvision')

  class Twice:  # torchvision_resnet, with conv1 read into two variables.
    SOURCE = 'torchvision'
    template = staticmethod(torchvision_resnet.template)

    @staticmethod
    def convert(tensors, *args):
      done = torchvision_resnet.convert(tensors, *args)
      params = done.variables['params']
      params['BasicBlock_0']['Conv_0']['kernel'] = (
          params['Conv_0']['kernel'][:3, :3, :1].repeat(64, 2))
      return done

  with pytest.raises(AssertionError, match="elements of 'conv1.weight' were "
                     'written 1 to 65 times'):
    export.state_dict(Twice, 'resnet18', converted.kwargs,
                      converted.variables)


def test_a_model_the_original_cannot_be_is_refused():
  model = zoo.create('vit_ti16', num_classes=10, patch_size=8, image_size=32)
  variables = jax_init(model, (1, 32, 32, 3))
  with pytest.raises(convert.ConversionError,
                     match="holds vit_ti16 with gelu='exact', and this "
                     "vit_ti16 has gelu='tanh'"):
    export.state_dict(convert.timm_vit, 'vit_ti16',
                      dict(num_classes=10, patch_size=8, image_size=32),
                      variables)
  with pytest.raises(convert.ConversionError, match='cannot export'):
    export.state_dict(convert.big_vision_vit, 'vit_ti16', {}, variables)


def jax_init(model, shape):
  import flax.linen as nn  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  return nn.meta.unbox(jax.eval_shape(
      model.init, jax.random.PRNGKey(0), np.zeros(shape, np.float32)))

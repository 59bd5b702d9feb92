"""--config.pretrained=TAG sets the inputs its weights were trained on
(recipes/config/pretrained.py): RGB and their normalization unless the
config says otherwise, and one line where the config contradicts them."""

import pytest

import zoo
from recipes.config import pretrained, validation
from recipes.runtime.errors import UserError
from tests.helpers import tiny_config
from tests.hub_server import serve_resnet18


@pytest.fixture(name='hub')
def _hub(tmp_path, monkeypatch):
  hub, _ = serve_resnet18(tmp_path, monkeypatch)
  yield hub
  hub.stop()


def test_a_tag_sets_rgb_and_the_weights_normalization(hub):
  del hub
  config = tiny_config(model='resnet18', pretrained='tv_in1k',
                       dataset='fashion_mnist_idx')
  validation.check(config)
  assert (config.image_channels, config.normalize) == (3, 'imagenet')
  validation.check(config)  # Again: nothing changes, nothing contradicts.
  assert (config.image_channels, config.normalize) == (3, 'imagenet')
  # What the user set to the weights' own values stays.
  config = tiny_config(model='resnet18', pretrained='tv_in1k',
                       image_channels=3, normalize='imagenet')
  validation.check(config)
  assert (config.image_channels, config.normalize) == (3, 'imagenet')


@pytest.mark.parametrize('overrides, said', [
    ({'image_channels': 1},
     'image_channels=1 does not fit --config.pretrained=tv_in1k: the first '
     'layer of resnet18.tv_in1k takes 3 channels (RGB) and would be trained '
     'from scratch; leave --config.image_channels=0 (grey images are then '
     'repeated to RGB) or set 3.'),
    ({'normalize': 'cifar10'},
     "normalize='cifar10' does not fit --config.pretrained=tv_in1k: "
     "resnet18.tv_in1k was trained on inputs normalized as 'imagenet', and "
     'other statistics shift every input of its first layer; leave '
     "--config.normalize='' (then 'imagenet') or set imagenet.")])
def test_a_setting_that_contradicts_the_weights_is_one_line(overrides, said):
  with pytest.raises(UserError) as error:  # Before any download.
    validation.check(tiny_config(model='resnet18', pretrained='tv_in1k',
                                 **overrides))
  assert str(error.value) == said


@pytest.mark.parametrize('model, tag, preset', [
    ('resnet50', 'tv2_in1k', 'imagenet'),
    ('convnext_tiny', 'fb_in1k', 'imagenet'),
    ('dinov2_s14', 'lvd142m', 'imagenet'),
    ('vit_b16', 'augreg2_in21k_ft_in1k', 'minus_one_to_one'),
    ('vit_b16', 'google_in21k', 'minus_one_to_one'),
    ('mixer_b16', 'goog_in21k_ft_in1k', 'minus_one_to_one'),
    ('bit_r50x1', 'goog_in21k_ft_in1k', 'minus_one_to_one'),
    ('siglip_b16', 'webli', 'minus_one_to_one')])
def test_each_family_normalizes_as_its_weights_were_trained(model, tag,
                                                            preset):
  """torchvision's and Meta's weights take ImageNet's mean and std,
  Google's [-1, 1] (timm's pretrained_cfg of the same files)."""
  assert pretrained.normalization(zoo.weights.find(model, tag)) == preset

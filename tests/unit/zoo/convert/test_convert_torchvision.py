"""torchvision ResNets converted to the zoo's, verified against torchvision.

Each test builds torchvision's model with random weights (every BatchNorm
scale, bias and running statistic random too), saves its state dict,
converts the file and compares float32 logits: the largest difference
relative to the largest logit must be at most 1e-5 (measured: about 1e-6).
Needs torch and torchvision (the convert-test extra); skipped without them.
"""

import numpy as np
import pytest

from tests.convert_helpers import originals

torch, torchvision, safetensors_torch = originals(
    'torch', 'torchvision', 'safetensors.torch')
# Compared with the originals: the whole suite's tier, not the fast one.
pytestmark = pytest.mark.slow

# pylint: disable=wrong-import-position
import jax

import zoo
from tests.convert_helpers import (RTOL, all_sizes_only, assert_exactly_once,
                                   images, randomize_torch,
                                   relative_difference, torch_logits,
                                   zoo_logits)
from zoo import convert
from zoo.convert import export


def _reference(name: str, tmp_path, fmt: str = 'safetensors', seed: int = 0,
               **kwargs):
  model = randomize_torch(getattr(torchvision.models, name)(**kwargs), seed)
  path = tmp_path / f'{name}.{fmt}'
  if fmt == 'safetensors':
    safetensors_torch.save_file(model.state_dict(), str(path))
  else:
    torch.save(model.state_dict(), path)
  return model, path


def _check(name, tmp_path, fmt):
  model, path = _reference(name, tmp_path, fmt)
  converted = convert.load(path, 'torchvision')
  assert converted.name == name
  assert converted.kwargs == {'num_classes': 1000}
  assert_exactly_once(converted, model.state_dict(), name, converted.kwargs)
  x = images(2, 64)
  difference = relative_difference(
      zoo_logits(name, converted.kwargs, converted.variables, x),
      torch_logits(model, x))
  assert difference <= RTOL, difference


@pytest.mark.parametrize('name,fmt', [('resnet18', 'safetensors'),
                                      pytest.param('resnet50', 'pth',
                                                   marks=pytest.mark.slow)])
def test_resnets_give_torchvisions_logits(name, fmt, tmp_path):
  _check(name, tmp_path, fmt)


# Deeper nets: the same code as ResNet-18 (basic blocks) and ResNet-50
# (bottlenecks), 10-60 s each to compile; each found from its file in
# test_template_is_torchvisions_state_dict.
@pytest.mark.slow
@pytest.mark.parametrize('name', [
    pytest.param(n, marks=all_sizes_only)
    for n in ('resnet34', 'resnet101', 'resnet152')])
def test_deeper_resnets_give_torchvisions_logits(name, tmp_path):
  _check(name, tmp_path, 'safetensors')


def test_statistics_and_scales_matter(tmp_path):
  """The comparison can fail: a BatchNorm's running variance or scale off by
  a little changes the logits by far more than the tolerance."""
  model, path = _reference('resnet18', tmp_path)
  converted = convert.load(path)
  x = images(2, 64)
  reference = torch_logits(model, x)
  for variable in (('batch_stats', 'BasicBlock_3', 'BatchNorm_1', 'var'),
                   ('params', 'BasicBlock_3', 'BatchNorm_1', 'scale')):
    tree = converted.variables
    for key in variable[:-1]:
      tree = tree[key]
    tree[variable[-1]] = tree[variable[-1]] * 1.01
    assert relative_difference(
        zoo_logits('resnet18', converted.kwargs, converted.variables, x),
        reference) > 100 * RTOL
    tree[variable[-1]] = tree[variable[-1]] / 1.01


def test_another_number_of_classes_reinitializes_the_head(tmp_path, caplog):
  model, path = _reference('resnet18', tmp_path, num_classes=7)
  with caplog.at_level('WARNING'):
    net, variables = zoo.load_pretrained('resnet18', path, num_classes=10)
  assert 'Dense_0/kernel' in caplog.text and '7 classes, not 10' in caplog.text
  assert variables['params']['Dense_0']['kernel'].shape == (512, 10)
  # The model's own initialization (seed 0), as a fresh model has it: a
  # fresh model's whole init, of which the program keeps the head's draws
  # alone (XLA drops what no output needs; the rest took 10-15 s to
  # compile, and a head's values depend only on the seed and its path).
  fresh_head = jax.jit(lambda rng: net.init(rng, np.zeros(
      (1, 224, 224, 3), np.float32))['params']['Dense_0']['kernel'].value)
  np.testing.assert_array_equal(variables['params']['Dense_0']['kernel'],
                                fresh_head(jax.random.PRNGKey(0)))
  # Everything else is torchvision's.
  np.testing.assert_array_equal(
      variables['batch_stats']['BatchNorm_0']['var'],
      model.bn1.running_var.numpy())
  _, same = zoo.load_pretrained('resnet18', path)
  assert same['params']['Dense_0']['kernel'].shape == (512, 7)


def test_a_file_of_another_model_names_the_first_tensor_that_does_not_fit(
    tmp_path):
  model, path = _reference('resnet18', tmp_path)
  with pytest.raises(ValueError, match=r"tensor 'layer1\.0\.conv1\.weight' "
                     r'has shape \(64, 64, 3, 3\) where resnet50 needs '
                     r'\(64, 64, 1, 1\)'):
    zoo.load_pretrained('resnet50', path)
  state = {k: v.numpy() for k, v in model.state_dict().items()}
  missing = {k: v for k, v in state.items() if k != 'layer2.1.bn2.bias'}
  with pytest.raises(ValueError, match=r"no tensor 'layer2\.1\.bn2\.bias'"):
    convert.convert(missing, 'torchvision')
  extra = {**state, 'layer2.1.extra.weight': np.zeros(3, np.float32)}
  with pytest.raises(ValueError, match=r"'layer2\.1\.extra\.weight' has no "
                     'place in resnet18'):
    convert.convert(extra, 'torchvision')
  wide = {k: v.numpy() for k, v in
          torchvision.models.resnet34().state_dict().items()
          if not k.startswith('layer4.2')}
  with pytest.raises(ValueError, match=r'not a torchvision ResNet-18/34/50/'
                     r'101/152: its stages have \(3, 4, 6, 2\) basic'):
    convert.convert(wide, 'torchvision')


def test_features_are_torchvisions_stage_outputs(tmp_path):
  model, path = _reference('resnet18', tmp_path)
  converted = convert.load(path, 'torchvision')
  x = images(2, 64)
  stages = {}
  for i in range(1, 5):
    getattr(model, f'layer{i}').register_forward_hook(
        lambda module, inputs, out, i=i: stages.__setitem__(i, out))
  torch_logits(model, x)
  ours = zoo.create('resnet18', features=True).apply(
      converted.variables, np.asarray(x).transpose(0, 2, 3, 1))
  assert len(ours) == 4
  for i, feature in enumerate(ours, 1):
    theirs = stages[i].detach().numpy().transpose(0, 2, 3, 1)
    assert feature.shape == theirs.shape
    assert relative_difference(feature, theirs) <= RTOL, i


@pytest.mark.parametrize('name', ['resnet18', 'resnet34', 'resnet50',
                                  'resnet101', 'resnet152'])
def test_template_is_torchvisions_state_dict(name):
  """And the file's architecture is found from its tensors."""
  with torch.device('meta'):  # Names and shapes, no memory.
    theirs = getattr(torchvision.models, name)().state_dict()
  assert convert.torchvision_resnet.template(
      name, zoo.spec(name).defaults) == {
          k: tuple(v.shape) for k, v in theirs.items()}
  assert convert.torchvision_resnet.architecture(theirs, 'f') == name


def test_export_gives_torchvision_the_same_model(tmp_path):
  model, path = _reference('resnet18', tmp_path)
  converted = convert.load(path, 'torchvision')
  tensors = export.state_dict(convert.torchvision_resnet, 'resnet18',
                              converted.kwargs, converted.variables)
  fresh = torchvision.models.resnet18().eval()
  fresh.load_state_dict({k: torch.from_numpy(np.asarray(v))
                         for k, v in tensors.items()}, strict=True)
  x = images(2, 64)
  assert relative_difference(torch_logits(fresh, x),
                             torch_logits(model, x)) == 0

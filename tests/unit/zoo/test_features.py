"""Features for detection, segmentation and embeddings, for every model that
offers them: `features=True` gives each stage's (or block's) output with the
shapes and strides `zoo.feature_info` documents, and `num_classes=0` the
pooled features without a head. That the features equal the original
library's intermediate outputs for converted weights is checked per family
in tests/unit/zoo/convert/."""

import dataclasses

import flax.linen as nn
import jax
import numpy as np
import pytest

import zoo
from tests.helpers import slow_after

pytestmark = pytest.mark.usefixtures('fast_compiles')

WITH_FEATURES = [name for name in zoo.list_models()
                 if 'features' in {f.name for f in
                                   dataclasses.fields(zoo.spec(name).cls)}]
# One variant per class: the others are the same code at other sizes.
ONE_PER_CLASS = list({zoo.spec(n).cls: n for n in reversed(WITH_FEATURES)}
                     .values())


def test_the_families_the_issue_names_offer_features():
  families = {zoo.spec(n).cls.__name__ for n in WITH_FEATURES}
  assert {'ResNet', 'ViT'} <= families, families
  assert 'resnet50' in WITH_FEATURES and 'vit_b16' in WITH_FEATURES


def _test_size(name, **kwargs):
  spec = zoo.spec(name)
  kwargs = {**spec.test_kwargs, **kwargs}
  x = np.random.default_rng(0).normal(size=(2, *spec.test_input())).astype(
      np.float32)
  return zoo.create(name, **kwargs), kwargs, x


@pytest.mark.parametrize('name', slow_after(1, ONE_PER_CLASS))
def test_features_have_the_documented_shapes_and_strides(name):
  model, kwargs, x = _test_size(name, features=True)
  variables = jax.jit(model.init)(jax.random.PRNGKey(0), x)
  outputs = jax.jit(model.apply)(variables, x)
  assert isinstance(outputs, tuple) and len(outputs) >= 2, name
  info = zoo.feature_info(name, x.shape[1:], **{
      k: v for k, v in kwargs.items() if k != 'features'})
  assert [tuple(o.shape[1:]) for o in outputs] == [f.shape for f in info]
  strides = [f.stride for f in info]
  assert strides == sorted(strides) and all(
      s * f.shape[0] == x.shape[1] for s, f in zip(strides, info)), strides
  for out in outputs:
    assert np.all(np.isfinite(np.asarray(out)))
  # No head, pooling or final norm is built for features.
  full = jax.eval_shape(model.clone(features=False).init,
                        jax.random.PRNGKey(0), x)
  assert (sum(p.size for p in jax.tree.leaves(variables['params'])) <
          sum(p.size for p in jax.tree.leaves(full['params'])))


@pytest.mark.parametrize('name', slow_after(1, ONE_PER_CLASS))
def test_no_classes_gives_the_pooled_features_and_no_head(name):
  model, _, x = _test_size(name, num_classes=0)
  variables = jax.jit(model.init)(jax.random.PRNGKey(0), x)
  pooled = jax.jit(model.apply)(variables, x)
  with_head = model.clone(num_classes=7)
  head = jax.eval_shape(with_head.init, jax.random.PRNGKey(0), x)
  leaves = lambda v: {'/'.join(map(str, p)): a.shape for p, a in
                      jax.tree_util.tree_flatten_with_path(
                          nn.meta.unbox(v['params']))[0]}
  ours, theirs = leaves(variables), leaves(head)
  assert set(ours) < set(theirs)  # The same names, less the head's.
  width = next(s for k, s in theirs.items() if k not in ours
               and len(s) == 2)[0]  # The head kernel's input features.
  assert pooled.shape == (2, width), (name, pooled.shape)


def test_feature_info_of_the_imagenet_resnets():
  assert zoo.feature_info('resnet50') == [
      zoo.Feature((56, 56, 256), 4), zoo.Feature((28, 28, 512), 8),
      zoo.Feature((14, 14, 1024), 16), zoo.Feature((7, 7, 2048), 32)]
  assert [f.shape[-1] for f in zoo.feature_info('resnet18')] == [
      64, 128, 256, 512]


@pytest.mark.parametrize('value', [-1, 1.5, True, '10'])
def test_a_bad_number_of_classes_is_a_value_error(value):
  with pytest.raises(ValueError, match='num_classes must be 0'):
    zoo.create('resnet18', num_classes=value)

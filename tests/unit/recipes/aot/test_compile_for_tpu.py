"""Every TPU config compiled for a small TPU slice by libtpu, on this CPU:
it fits, FSDP splits its parameters, and two slices reduce gradients over
the data-center network only along the data axis."""

import importlib
import os
import re

import jax
import numpy as np
import pytest

import zoo
from recipes import compile as aot_compile
from recipes import experiment
from recipes.aot import chips, topology
from recipes.data import datasets
from recipes.parallel import partition_rules
from recipes.runtime.errors import UserError
from tests.helpers import ROOT

pytestmark = [
    pytest.mark.slow,  # Each compile takes 10-20 s on 2 cores.
    pytest.mark.skipif(not topology.have_libtpu(),
                       reason="compiling for TPUs needs libtpu: pip install "
                       "-e '.[tpu]'"),
]

SMALL_SLICE = 'v5e:2x2'


def _tpu_configs() -> list[str]:
  """The configs whose docstring names a TPU target."""
  names = []
  for file in sorted(os.listdir(os.path.join(ROOT, 'configs'))):
    if file.endswith('.py') and file != '__init__.py':
      module = importlib.import_module(f'configs.{file[:-3]}')
      if re.search(r'TPU (v\d|pod|slice)', module.__doc__ or ''):
        names.append(file[:-3])
  return names


def _test_size(name: str, **overrides):
  config = importlib.import_module(f'configs.{name}').get_config()
  config.model_kwargs = {**config.model_kwargs.to_dict(),
                         **zoo.spec(config.model).test_kwargs}
  config.update(batch_size=16, eval_batch_size=16, image_size=32,
                **overrides)
  if datasets.is_tokens(config.dataset):  # The test-size model's length.
    config.seq_len = 16
  return config


def _splits_parameters(name: str) -> bool:
  """Whether the config's mesh splits parameters (fsdp or tensor), which
  only the sharded strategy reads: under pmap and shard_map such a config
  is the data-parallel step of its model, compiled for another config."""
  mesh = importlib.import_module(f'configs.{name}').get_config().mesh
  return mesh.fsdp != 1 or mesh.tensor != 1


def _strategies(name: str) -> tuple[str, ...]:
  return (('sharded',) if _splits_parameters(name)
          else ('pmap', 'shard_map', 'sharded'))


@pytest.fixture(name='compiled', scope='module')
def _compiled():
  """compile_config's report of a config at test size under a strategy,
  each compiled once for the module."""
  reports = {}

  def compiled(name: str, strategy: str) -> dict:
    if (name, strategy) not in reports:
      reports[name, strategy] = aot_compile.compile_config(
          _test_size(name, strategy=strategy), SMALL_SLICE)
    return reports[name, strategy]

  return compiled


def test_the_tpu_configs_are_found():
  assert {'imagenet_resnet50_tpu', 'imagenet_vit_b16_pod',
          'imagenet_vit_s16'} <= set(_tpu_configs())
  # Each model of a config compiled under sharded only is compiled under
  # every strategy for another config.
  family = lambda n: zoo.spec(
      importlib.import_module(f'configs.{n}').get_config().model).family
  every = {family(n) for n in _tpu_configs() if len(_strategies(n)) == 3}
  # The language models train sharded only (tests/unit/configs/
  # test_configs.py: only the classic recipes run on pmap).
  assert {family(n) for n in _tpu_configs()} - {'decoder'} <= every
  assert {'text_llama3_2_1b_pod', 'text_llama3_8b_pod'} <= set(
      _tpu_configs())


@pytest.mark.parametrize('name', _tpu_configs())
def test_every_tpu_config_fits_a_small_slice_under_each_strategy(name,
                                                                 compiled):
  """Under each strategy; a config whose mesh splits parameters under its
  own, sharded (see `_splits_parameters`)."""
  for strategy in _strategies(name):
    result = compiled(name, strategy)
    assert [s['step'] for s in result['steps']] == ['train', 'eval']
    for step in result['steps']:
      assert step['memory']['fits'], (strategy, step)
      assert 0 < step['memory']['total'] < chips.CHIPS['v5e'].hbm_bytes
      assert step['cost']['flops'] > 0
    # The train step reduces its gradients over every chip.
    reductions = [c for c in result['steps'][0]['collectives']
                  if c['kind'] in ('all-reduce', 'reduce-scatter')]
    assert reductions, (strategy, result['steps'][0]['collectives'])
    assert 0 < result['estimate']['mfu'] < 1


def test_fsdp_splits_the_parameters_over_more_chips(compiled):
  """fsdp=4 is imagenet_vit_b16_pod's own mesh on the 4 chips: its train
  step is the one compiled for the test above."""
  devices = topology.devices(chips.parse(SMALL_SLICE))
  per_chip = []
  for fsdp in (1, 2, 4):
    config = _test_size('imagenet_vit_b16_pod', strategy='sharded')
    config.mesh.update(data=-1, fsdp=fsdp, tensor=1)
    num_classes, shape = aot_compile.input_shape(config)
    strategy = experiment.training(
        config, num_classes, shape, aot_compile.STAND_IN_STEPS_PER_EPOCH,
        aot_compile.STAND_IN_STEPS_PER_EPOCH, devices).strategy
    params = partition_rules.bytes_per_device(
        strategy.abstract_state.params, strategy.state_shardings.params)
    if fsdp == 4:
      report = compiled('imagenet_vit_b16_pod', 'sharded')
      assert report['mesh'] == dict(strategy.mesh.shape), report['mesh']
      arguments = report['steps'][0]['memory']['arguments']
    else:
      arguments = aot_compile.compile_step(strategy, 'train', 16,
                                           shape).memory.arguments
    per_chip.append((params, arguments))
  assert per_chip[0][0] > per_chip[1][0] > per_chip[2][0], per_chip
  assert per_chip[0][1] > per_chip[1][1] > per_chip[2][1], per_chip


def test_two_slices_reduce_gradients_across_them_on_the_data_axis_only():
  config = _test_size('imagenet_vit_b16_pod', strategy='sharded')
  config.mesh.update(data=1, fsdp=-1, tensor=1, dcn_data=2)
  devices = topology.devices(chips.parse(SMALL_SLICE), num_slices=2)
  strategy = experiment.training(config, 1000, (32, 32, 3), 10, 10,
                                 devices).strategy
  mesh = strategy.mesh
  assert dict(mesh.shape) == {'data': 2, 'fsdp': 4, 'tensor': 1}
  # Slices change along the data axis only: fsdp's gathers stay in a slice.
  slices = np.vectorize(lambda d: d.slice_index)(mesh.devices)
  assert (slices == np.arange(2)[:, None, None]).all()
  report = aot_compile.compile_step(strategy, 'train', 16, (32, 32, 3))
  across = {c.kind: c.bytes for c in report.collectives if 'dcn' in c.axes}
  # The gradients' sum; and mixup pairing examples over the global batch,
  # which moves single rows.
  assert set(across) <= {'all-reduce', 'collective-permute'}, across
  assert across['all-reduce'] > 10 * across.get('collective-permute', 0)
  within = [c for c in report.collectives if 'dcn' not in c.axes]
  assert all(set(c.axes) <= {'fsdp'} for c in within), within
  # The checkpoint layout is the one slice's: the same partition specs.
  one_slice = experiment.training(
      _test_size('imagenet_vit_b16_pod', strategy='sharded'), 1000,
      (32, 32, 3), 10, 10, topology.devices(chips.parse('v5e:2x4'))
  ).strategy
  specs = lambda s: jax.tree.leaves(jax.tree.map(lambda x: x.spec,
                                                 s.state_shardings))
  assert specs(strategy) == specs(one_slice)
  assert any(spec != jax.sharding.PartitionSpec() for spec in specs(strategy))


def test_a_mesh_that_does_not_match_the_chips_is_one_line():
  config = _test_size('imagenet_vit_b16_pod', strategy='sharded')
  config.mesh.update(data=1, fsdp=3, tensor=1)
  with pytest.raises(UserError, match='mesh .* has 3 devices but there are '
                     '4'):
    aot_compile.compile_config(config, SMALL_SLICE)
  config.mesh.update(fsdp=-1, dcn_data=2)
  with pytest.raises(UserError, match='dcn_data=2, but the devices are 1 '
                     'slice: set it to 1'):
    aot_compile.compile_config(config, SMALL_SLICE)

"""Topology names, and reading a compiled step's HLO and costs (no libtpu
needed: the HLO lines are XLA's own forms)."""

import numpy as np
import pytest

import zoo
from recipes import experiment
from recipes.aot import analysis, chips
from recipes.config import defaults
from recipes.data.pipeline import dataset, token_batches
from recipes.runtime.errors import UserError
from tests.helpers import write_token_dir


def test_a_topology_is_its_chip_and_shape():
  topology = chips.parse('v5e:4x4')
  assert topology.chip.hbm_bytes == 16 * chips.GiB
  assert (topology.num_chips, topology.name) == (16, 'v5e:4x4')
  assert chips.parse('V4:2x2x4').num_chips == 16


@pytest.mark.parametrize('name, says', [
    ('v9:2x2', "unknown TPU 'v9'"),
    ('v5e:2x2x1', 'a v5e slice is 2 sizes, e.g. v5e:4x4'),
    ('v4:2x2', 'a v4 slice is 3 sizes, e.g. v4:2x2x4'),
    ('v5e:0x4', 'bad --topology'),
    ('v5e', 'bad --topology'),
    ('v5e:-2x4', 'bad --topology'),
])
def test_a_bad_topology_is_one_line(name, says):
  with pytest.raises(UserError, match=says):
    chips.parse(name)


def test_replica_groups_in_both_of_xlas_forms():
  assert analysis.replica_groups('{{0,1},{2,3}}') == [[0, 1], [2, 3]]
  assert analysis.replica_groups('{}') == []
  assert analysis.replica_groups('[2,2]<=[4]') == [[0, 1], [2, 3]]
  assert analysis.replica_groups('[2,2]<=[2,2]T(1,0)') == [[0, 2], [1, 3]]


class _Device:

  def __init__(self, id_, slice_index=None):
    self.id, self.slice_index = id_, slice_index


def test_collectives_are_read_by_kind_bytes_and_the_axes_they_span():
  # A (data=2, fsdp=2, tensor=2) mesh; ids in mesh order.
  grid = np.array([_Device(i) for i in range(8)]).reshape(2, 2, 2)
  hlo = '\n'.join([
      # Over tensor (ids 0,1 differ in the last axis): 1024 x 4 bytes.
      '%ar = f32[1024]{0} all-reduce(%x), channel_id=1, '
      'replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=%add',
      # Over data and fsdp (iota form, transposed): a tuple of two.
      '%ar.2 = (f32[8]{0}, bf16[16]{0}) all-reduce(%a, %b), '
      'replica_groups=[2,4]<=[4,2]T(1,0), to_apply=%add',
      # An async all-gather: its result holds the operand and the output.
      '%ag = (bf16[4,8]{1,0}, bf16[8,8]{1,0}) all-gather-start(%p), '
      'replica_groups={{0,2},{1,3},{4,6},{5,7}}, dimensions={0}',
      '%agd = bf16[8,8]{1,0} all-gather-done(%ag)',
      '%rs = f32[4]{0} reduce-scatter(%g), replica_groups={}, dimensions={0}',
  ])
  found = {(c.kind, c.axes): (c.count, c.bytes)
           for c in analysis.collectives(hlo, grid, ('data', 'fsdp',
                                                      'tensor'))}
  assert found == {
      ('all-reduce', ('tensor',)): (1, 4096),
      ('all-reduce', ('data', 'fsdp')): (1, 8 * 4 + 16 * 2),
      ('all-gather', ('fsdp',)): (1, 8 * 8 * 2),
      ('reduce-scatter', ('data', 'fsdp', 'tensor')): (1, 16),
  }


def test_on_two_slices_the_ids_are_one_slices_and_the_network_is_dcn():
  # Two slices of 2 chips along data; the program numbers slice 0's chips.
  grid = np.array([_Device(0, 0), _Device(1, 0), _Device(2, 1),
                   _Device(3, 1)]).reshape(2, 2, 1)
  hlo = '\n'.join([
      '%ar = f32[256]{0} all-reduce(%x), replica_groups={{0,1}}',
      '%send = (f32[32,8]{1,0}, u32[], token[]) send(%b, %t), channel_id=2, '
      'is_host_transfer=true, frontend_attributes={_xla_host_transfer_'
      'handler_name="xla_megascale_runtime",_xla_host_transfer_rendezvous='
      '"all-reduce.1_0",_xla_megascale_reduce_operation="SUM"}',
      '%send.1 = (s32[1]{0}, u32[], token[]) send(%c, %t), channel_id=3, '
      'is_host_transfer=true, frontend_attributes={_xla_host_transfer_'
      'handler_name="xla_megascale_runtime",_xla_host_transfer_rendezvous='
      '"collective-permute_0",_xla_megascale_target={{1->2}}}',
  ])
  found = {(c.kind, c.axes): c.bytes for c in analysis.collectives(
      hlo, grid, ('data', 'fsdp', 'tensor'))}
  assert found == {('all-reduce', ('fsdp',)): 1024,
                   ('all-reduce', ('dcn',)): 32 * 8 * 4,
                   ('collective-permute', ('dcn',)): 4}


def test_the_memory_total_counts_donated_buffers_once_and_keeps_a_margin():
  memory = analysis.Memory(arguments=6, outputs=5, temporaries=3, aliased=4,
                           code=1)
  assert memory.total == 11
  chip = chips.CHIPS['v5e']
  assert analysis.Memory(0, 0, int(chip.hbm_bytes * 0.89), 0, 0).fits(chip)
  assert not analysis.Memory(0, 0, int(chip.hbm_bytes * 0.91), 0,
                             0).fits(chip)


def test_the_roofline_takes_the_slower_of_compute_and_memory():
  chip = chips.CHIPS['v4']
  compute_bound = analysis.estimate(
      chip, 4, analysis.Cost(flops=275e12, bytes_accessed=1e9), 1024,
      model_flops_per_step=4 * 275e12 / 2)
  assert compute_bound.bound == 'compute'
  assert compute_bound.step_seconds == pytest.approx(1.0)
  assert compute_bound.images_per_second == pytest.approx(1024)
  assert compute_bound.mfu == pytest.approx(0.5)
  memory_bound = analysis.estimate(
      chip, 4, analysis.Cost(flops=1e12, bytes_accessed=2400e9), 8, 1e12)
  assert (memory_bound.bound, memory_bound.step_seconds) == ('memory',
                                                              pytest.approx(2))


def test_a_decoders_flops_per_token_are_maxtexts_count():
  """6 x the weights used as matrices (the untied head, not the embedding
  lookup nor the norms) + the causal attention's: 5.15e10 for Llama 3 8B
  at 8,192 tokens; MaxText's count before the causal halving, 5.79e10, is
  the one its published Llama 3.1 8B recipes divide by."""
  model = zoo.create('llama3_8b')
  norms = (2 * 32 + 1) * 4096
  weights = 8_030_261_248 - 128256 * 4096 - norms
  attention = 6 * 32 * 8192 * 32 * 128  # 3 x 4 x S x heads x head_dim / 2
  per_token = analysis.train_flops_per_token(model, 8192)
  assert per_token == 6 * weights + attention
  assert per_token + attention == pytest.approx(5.79e10, rel=1e-3)
  # Tied: the head is the embedding, counted once.
  small = zoo.create('llama3_2_1b')
  assert analysis.train_flops_per_token(small, 1) == pytest.approx(
      6 * (1_235_814_400 - 33 * 2048) + 6 * 16 * 32 * 64, rel=1e-9)


def test_token_batches_compile_as_the_pipeline_yields_them(tmp_path):
  shapes = dataset.batch_shapes(8, (16,))
  data = token_batches.open(write_token_dir(tmp_path, seq_len=16),
                            eval_splits=['validation'])
  batch = next(data.train_batches(batch_size=8, seed=0, start_step=0,
                                  num_steps=1))
  assert {k: (v.shape, v.dtype) for k, v in shapes.items()} == {
      k: (v.shape, v.dtype) for k, v in batch.items()}
  assert dataset.batch_shapes(8, (16,), evaluation=True) == shapes


def test_the_sequence_length_is_the_configs_or_the_prepared_datas(tmp_path):
  config = defaults.get_config()
  config.update(model='smollm2_135m', seq_len=64,
                dataset=f'tokens:{tmp_path}/not_yet')
  assert experiment.sequence_length(config) == 64
  config.dataset = f'tokens:{write_token_dir(tmp_path, seq_len=16)}'
  config.seq_len = 0
  assert experiment.sequence_length(config) == 16
  config.seq_len = 32
  with pytest.raises(UserError, match='holds sequences of 16 tokens, not '
                     'the seq_len=32 of the config; set --config.seq_len=16'):
    experiment.sequence_length(config)


def test_windowed_matmul_loops_are_counted_and_other_loops_are_not():
  # The shape of XLA's TPU output for an FSDP matmul over 16 chips
  # (shortened), then a loop of a scan over layers.
  hlo = '\n'.join([
      '  %while.65 = (bf16[2,2048,2048]{2,1,0}, bf16[1,128,8,64]{1,3,0,2}) '
      'while(%tuple.675), condition=%wide.windowed_dot_general_cond_ag.2.'
      'clone, body=%wide.windowed_dot_general_body_ag.2.clone.sunk, '
      'metadata={op_name="jit(train_step)/block0/key/dot_general"}',
      '  %while.7 = (bf16[2,2048,2048]{2,1,0}) while(%tuple.9), '
      'condition=%windowed_dot_general_cond_rs, '
      'body=%windowed_dot_general_body_rs.3',
      '  %while.8 = (s32[], f32[4]{0}) while(%tuple.1), condition=%cond.2, '
      'body=%body.3',
      '%wide.windowed_dot_general_body_ag.2.clone.sunk (param: (bf16[2,2048,'
      '2048])) -> (bf16[2,2048,2048]) {',
  ])
  assert analysis.windowed_matmul_loops(hlo) == 2
  assert analysis.windowed_matmul_loops(hlo.replace('windowed', 'plain')) == 0

"""Token batches read back from a prepared directory: the global batch of
a step is the same for 1, 2 or 4 processes and for a resumed run, each
epoch visits every sequence once in the images' epoch order, and
evaluation pads with masked rows."""

import numpy as np
import pytest

from recipes.data import prepare
from recipes.data.pipeline import in_memory, token_batches
from recipes.data.text import packing
from recipes.runtime.errors import UserError
from tests.unit.recipes.data.text.conftest import documents, write_jsonl

SEQ_LEN = 8
BATCH = 8
SEED = 3


@pytest.fixture(scope='module')
def prepared(tmp_path_factory, bpe_file):
  folder = tmp_path_factory.mktemp('text')
  (folder / 'corpus').mkdir()
  write_jsonl(folder / 'corpus' / 'train.jsonl', documents(40))
  write_jsonl(folder / 'corpus' / 'validation.jsonl', documents(6, seed=1))
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr('recipes.runtime.lease.VERIFY_SECONDS', 0.0)
    prepare.prepare(f'jsonl:{folder / "corpus"}', str(folder / 'tokens'), 10,
                    text=prepare.Text(bpe_file, SEQ_LEN))
  return str(folder / 'tokens')


def _train(path, start_step=0, num_steps=6):
  data = token_batches.open(path, eval_splits=['validation'], threads=2)
  return list(data.train_batches(batch_size=BATCH, seed=SEED,
                                 start_step=start_step, num_steps=num_steps))


def test_batches_hold_the_model_inputs(prepared):
  batch = _train(prepared, num_steps=1)[0]
  assert sorted(batch) == ['inputs', 'mask', 'positions', 'segment_ids',
                           'targets']
  for name, array in batch.items():
    assert array.shape == (BATCH, SEQ_LEN), name
  assert batch['mask'].dtype == bool and batch['inputs'].dtype == np.int32
  np.testing.assert_array_equal(batch['inputs'][:, 1:],
                                batch['targets'][:, :-1])


@pytest.mark.parametrize('process_count', [2, 4])
def test_every_process_count_sees_the_same_global_batches(
    prepared, monkeypatch, process_count):
  whole = _train(prepared)
  parts = []
  for index in range(process_count):
    monkeypatch.setattr('jax.process_count', lambda: process_count)
    monkeypatch.setattr('jax.process_index', lambda i=index: i)
    parts.append(_train(prepared))
  for step, batch in enumerate(whole):
    for name, array in batch.items():
      np.testing.assert_array_equal(
          np.concatenate([part[step][name] for part in parts]), array)


def test_a_resumed_run_gets_the_same_batches(prepared):
  whole = _train(prepared)
  resumed = _train(prepared, start_step=4)
  assert len(resumed) == 2
  for got, expected in zip(resumed, whole[4:]):
    for name in expected:
      np.testing.assert_array_equal(got[name], expected[name])


def test_an_epoch_visits_the_sequences_in_the_images_order(prepared):
  data = token_batches.open(prepared, threads=1)
  n = data.num_train
  steps = in_memory.steps_per_epoch(n, BATCH)
  batches = list(data.train_batches(batch_size=BATCH, seed=SEED,
                                    start_step=0, num_steps=steps))
  order = in_memory.epoch_order(n, np.int64(SEED), np.int64(0)).numpy()
  expected = packing.model_inputs(*data.train.read(order[:steps * BATCH]))
  for name, array in expected.items():
    np.testing.assert_array_equal(
        np.concatenate([b[name] for b in batches]), array)


def test_evaluation_reads_each_sequence_once_and_masks_the_padding(prepared):
  data = token_batches.open(prepared, eval_splits=['validation'])
  n = data.eval_sizes['validation']
  assert n % BATCH  # The last batch is padded.
  batches = list(data.eval_batches(batch_size=BATCH))
  assert len(batches) == -(-n // BATCH)
  every = {name: np.concatenate([b[name] for b in batches])
           for name in batches[0]}
  expected = packing.model_inputs(*data.evals['validation'].read(range(n)))
  for name, array in expected.items():
    np.testing.assert_array_equal(every[name][:n], array)
  assert not every['mask'][n:].any()


def test_too_few_sequences_or_a_missing_split(prepared):
  data = token_batches.open(prepared)
  with pytest.raises(UserError, match='fewer than a batch of'):
    data.train_batches(batch_size=10 * data.num_train, seed=0, start_step=0,
                       num_steps=1)
  with pytest.raises(UserError, match="has no split 'test' \\(it has train, "
                     'validation\\)'):
    token_batches.open(prepared, eval_splits=['test'])

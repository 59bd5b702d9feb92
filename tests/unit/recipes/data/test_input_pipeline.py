import numpy as np
import pytest

from recipes.data.pipeline import in_memory


def _split(n):
  images = np.arange(n, dtype=np.uint8).reshape(n, 1, 1, 1)
  return {'image': images, 'label': np.arange(n, dtype=np.int64)}


def _train_ids(split, **kw):
  return [b['label'] for b in in_memory.train_batches(split, **kw)]


def test_epochs_are_permutations_dropping_the_remainder():
  split = _split(50)
  batches = _train_ids(split, batch_size=16, seed=3, start_step=0,
                       num_steps=6)
  assert all(b.shape == (16,) for b in batches)
  for epoch in (batches[:3], batches[3:]):
    ids = np.concatenate(epoch)
    assert len(set(ids)) == 48  # 3 full batches of distinct examples.
  assert not np.array_equal(batches[0], batches[3])  # Reshuffled per epoch.


def test_order_depends_on_seed_only_and_resume_continues_it():
  split = _split(50)
  full = _train_ids(split, batch_size=8, seed=1, start_step=0, num_steps=20)
  again = _train_ids(split, batch_size=8, seed=1, start_step=0, num_steps=20)
  resumed = _train_ids(split, batch_size=8, seed=1, start_step=13,
                       num_steps=20)
  other = _train_ids(split, batch_size=8, seed=2, start_step=0, num_steps=20)
  np.testing.assert_array_equal(np.stack(full), np.stack(again))
  np.testing.assert_array_equal(np.stack(full[13:]), np.stack(resumed))
  assert not np.array_equal(np.stack(full), np.stack(other))


@pytest.mark.parametrize('process_count', [2, 4])
def test_processes_read_disjoint_slices_of_the_same_global_batch(
    monkeypatch, process_count):
  split = _split(64)
  whole = _train_ids(split, batch_size=16, seed=0, start_step=0, num_steps=8)
  slices = []
  for index in range(process_count):
    monkeypatch.setattr('jax.process_count', lambda: process_count)
    monkeypatch.setattr('jax.process_index', lambda i=index: i)
    slices.append(_train_ids(split, batch_size=16, seed=0, start_step=0,
                             num_steps=8))
  for step, batch in enumerate(whole):
    np.testing.assert_array_equal(
        np.concatenate([s[step] for s in slices]), batch)


def test_images_scaled_to_unit_interval():
  split = {'image': np.array([[[[0]]], [[[255]]]] * 4, np.uint8),
           'label': np.zeros(8, np.int64)}
  batch = next(in_memory.train_batches(split, batch_size=8, seed=0,
                                            start_step=0, num_steps=1))
  assert batch['image'].dtype == np.float32
  assert set(batch['image'].ravel()) == {0.0, 1.0}
  assert batch['label'].dtype == np.int32


def test_eval_visits_every_example_once_and_masks_padding():
  split = _split(37)
  batches = list(in_memory.eval_batches(split, batch_size=16))
  assert len(batches) == 3
  ids = np.concatenate([b['label'][b['mask']] for b in batches])
  np.testing.assert_array_equal(ids, np.arange(37))
  assert sum(int(b['mask'].sum()) for b in batches) == 37
  assert all(len(b['label']) == 16 for b in batches)

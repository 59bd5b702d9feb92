"""The shared step's update rules, each against its definition: label
smoothing, mixup, cutmix, gradient accumulation, the parameters' moving
average (EMA), and top-5 accuracy."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from recipes.core import metrics, mixing, state_spec, steps
from recipes.core.train_state import UpdateRules
from tests.helpers import BatchNormNet, learnable_batch, random_batch
from zoo.mlp import MLP

# A tiny MLP, whose compiling takes longer than running.
pytestmark = pytest.mark.usefixtures('fast_compiles')


def _state(rules=UpdateRules(), model=None, tx=None):
  model = model or MLP(num_classes=10, hidden_sizes=(32,))
  return state_spec.make(model, tx or optax.sgd(0.1), (28, 28, 1),
                         update_rules=rules).create_state()


def _run(state, batches, seed=0):
  step = jax.jit(functools.partial(steps.train_step, seed=seed))
  history = [state.params]
  for batch in batches:
    state, result = step(state, batch)
    history.append(state.params)
  return state, result.compute(), history


def _close(a, b, **tolerance):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(x, y, **tolerance)


# Label smoothing and mixed targets.

def test_label_smoothing_equals_its_closed_form():
  rng = np.random.default_rng(0)
  logits = rng.standard_normal((6, 10)).astype(np.float32)
  labels = rng.integers(0, 10, 6).astype(np.int32)
  s = 0.1
  batch = {'label': labels, 'other_label': labels,
           'label_weight': np.ones(6, np.float32)}
  loss = steps._per_example_loss(logits, batch, UpdateRules(
      label_smoothing=s))
  log_p = jax.nn.log_softmax(logits)
  # -sum_k t_k log p_k with t = (1 - s) one_hot + s / K.
  expected = -((1 - s) * log_p[np.arange(6), labels]
               + s / 10 * log_p.sum(-1))
  np.testing.assert_allclose(loss, expected, rtol=1e-6)
  plain = steps._per_example_loss(logits, batch)
  assert np.all(np.asarray(loss) != np.asarray(plain))


def test_mixed_targets_are_the_convex_combination_and_sum_to_one():
  labels, other = np.array([1, 2, 3]), np.array([3, 2, 0])
  weight = np.array([0.7, 0.4, 1.0], np.float32)
  t = np.asarray(mixing.targets(labels, other, weight, 4, smoothing=0.2))
  np.testing.assert_allclose(t.sum(-1), 1.0, rtol=1e-6)
  base = 0.2 / 4
  np.testing.assert_allclose(t[0], [base, 0.8 * 0.7 + base, base,
                                    0.8 * 0.3 + base], rtol=1e-6)
  np.testing.assert_allclose(t[1], [base, base, 0.8 + base, base], rtol=1e-6)
  np.testing.assert_allclose(t[2], [0.8 * 0.0 + base, base, base,
                                    0.8 + base], rtol=1e-6)


def test_mixup_mixes_images_with_the_rolled_batch_by_its_ratio():
  images = jnp.asarray(np.random.default_rng(0).random((5, 4, 4, 3)),
                       jnp.float32)
  rules = UpdateRules(mixup_alpha=0.4)
  mixed, weight = mixing.mix(jax.random.PRNGKey(3), images, rules)
  r = float(weight[0])
  assert 0 < r < 1 and np.all(np.asarray(weight) == r)
  np.testing.assert_allclose(mixed, r * images + (1 - r) * np.roll(
      images, 1, axis=0), rtol=1e-6)


def test_cutmix_label_weight_equals_the_area_left_unpasted():
  # Example i is filled with the value i: a pixel from the rolled batch
  # shows i - 1, so the pasted area can be counted.
  n, side = 4, 32
  images = jnp.broadcast_to(jnp.arange(n, dtype=jnp.float32)[:, None, None,
                                                            None],
                            (n, side, side, 3))
  rules = UpdateRules(cutmix_alpha=1.0)
  seen_partial = False
  for seed in range(8):
    mixed, weight = mixing.mix(jax.random.PRNGKey(seed), images, rules)
    pasted = np.mean(np.asarray(mixed)[1, :, :, 0] == 0.0)
    np.testing.assert_allclose(weight[1], 1 - pasted, atol=1e-6)
    seen_partial |= 0 < pasted < 1
  assert seen_partial


def test_mix_prob_zero_leaves_the_batch_alone_and_the_key_decides():
  images = jnp.asarray(np.random.default_rng(0).random((4, 8, 8, 1)),
                       jnp.float32)
  off = UpdateRules(mixup_alpha=1.0, cutmix_alpha=1.0, mix_prob=0.0)
  same, weight = mixing.mix(jax.random.PRNGKey(0), images, off)
  np.testing.assert_array_equal(same, images)
  np.testing.assert_array_equal(weight, 1.0)
  on = UpdateRules(mixup_alpha=1.0, cutmix_alpha=1.0)
  a, _ = mixing.mix(jax.random.PRNGKey(1), images, on)
  b, _ = mixing.mix(jax.random.PRNGKey(1), images, on)
  c, _ = mixing.mix(jax.random.PRNGKey(2), images, on)
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c)


def test_a_step_with_mixup_differs_and_is_a_function_of_seed_and_step():
  batch = random_batch(16)
  rules = UpdateRules(mixup_alpha=0.2, label_smoothing=0.1)
  plain, _, _ = _run(_state(), [batch] * 2)
  mixed, _, _ = _run(_state(rules), [batch] * 2)
  again, _, _ = _run(_state(rules), [batch] * 2)
  assert not np.array_equal(plain.params['Dense_1']['kernel'],
                            mixed.params['Dense_1']['kernel'])
  _close(mixed.params, again.params, rtol=0, atol=0)


# Gradient accumulation.

def test_accumulated_micro_batches_equal_one_big_batch():
  batch = learnable_batch(64)
  big, big_metrics, _ = _run(_state(), [batch] * 3)
  accumulated, acc_metrics, _ = _run(
      _state(UpdateRules(grad_accum_steps=4)), [batch] * 3)
  _close(big.params, accumulated.params, rtol=0, atol=1e-6)
  np.testing.assert_allclose(big_metrics['loss'], acc_metrics['loss'],
                             rtol=1e-6)
  np.testing.assert_allclose(big_metrics['accuracy'],
                             acc_metrics['accuracy'])


@pytest.mark.slow
def test_accumulation_with_batch_norm_updates_statistics_per_micro_batch():
  # Documented difference: each micro-batch normalizes with its own
  # statistics, so batch-norm models do not equal one big batch exactly.
  batch = random_batch(32)
  model = BatchNormNet(10)
  big, _, _ = _run(_state(model=model), [batch])
  accumulated, _, _ = _run(_state(UpdateRules(grad_accum_steps=4),
                                  model=model), [batch])
  assert not np.allclose(big.params['Dense_0']['kernel'],
                         accumulated.params['Dense_0']['kernel'], atol=1e-7)
  # Momentum 0: the running mean is the last micro-batch's alone.
  assert not np.allclose(big.batch_stats['BatchNorm_0']['mean'],
                         accumulated.batch_stats['BatchNorm_0']['mean'])


# The parameters' moving average.

def test_ema_equals_its_closed_form_after_n_steps():
  decay, n = 0.9, 5
  state, _, history = _run(_state(UpdateRules(ema_decay=decay)),
                           [random_batch(16, seed=s) for s in range(n)])
  # ema_n = d^n p_0 + sum_{i=1..n} (1 - d) d^(n - i) p_i.
  expected = jax.tree.map(lambda p: decay**n * p, history[0])
  for i in range(1, n + 1):
    expected = jax.tree.map(
        lambda e, p, i=i: e + (1 - decay) * decay**(n - i) * p, expected,
        history[i])
  _close(state.ema_params, expected, rtol=1e-5, atol=1e-7)
  assert not np.allclose(state.ema_params['Dense_1']['kernel'],
                         state.params['Dense_1']['kernel'])


def test_no_ema_keeps_no_copy():
  assert _state().ema_params is None
  assert _state(UpdateRules(ema_decay=0.99)).ema_params is not None


# Top-5.

def test_top5_accuracy_on_a_hand_made_example():
  logits = np.array([
      [9, 8, 7, 6, 5, 4, 0],   # label 4: fifth largest -> in the top 5
      [9, 8, 7, 6, 5, 4, 0],   # label 5: sixth -> not
      [0, 1, 2, 3, 4, 5, 6],   # label 6: largest -> in
      [0, 1, 2, 3, 4, 5, 6],   # label 0: smallest -> not
  ], np.float32)
  labels = np.array([4, 5, 6, 0], np.int32)
  np.testing.assert_array_equal(metrics.top_k_correct(logits, labels, 5),
                                [1, 0, 1, 0])
  collected = metrics.EvalMetrics.single_from_model_output(
      loss=np.zeros(4, np.float32), logits=logits, labels=labels,
      mask=np.array([True, True, True, False])).compute()
  np.testing.assert_allclose(collected['top5_accuracy'], 2 / 3)
  np.testing.assert_allclose(collected['accuracy'], 1 / 3)
  # Fewer classes than 5: every label is in the top 5.
  np.testing.assert_array_equal(
      metrics.top_k_correct(logits[:, :3], np.array([0, 1, 2, 0]), 5), 1)


@pytest.mark.parametrize('rules', [
    UpdateRules(grad_accum_steps=2),
    pytest.param(UpdateRules(ema_decay=0.5, mixup_alpha=0.2),
                 marks=pytest.mark.slow)])
def test_skipped_nonfinite_updates_keep_every_part(rules):
  rules = dataclasses.replace(rules, skip_nonfinite_updates=True)
  state = _state(rules)
  batch = random_batch(16)
  batch['image'][0, 0, 0, 0] = np.nan
  new, result, _ = _run(state, [batch])
  assert result['skipped'] == 1
  _close(new.params, state.params, rtol=0, atol=0)
  if state.ema_params is not None:
    _close(new.ema_params, state.ema_params, rtol=0, atol=0)

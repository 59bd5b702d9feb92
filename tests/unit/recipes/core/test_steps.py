"""The shared train step's dropout key: a function of (seed, step), so
dropout trains, eval is deterministic, and a resumed run draws the same
masks."""

import functools

import jax
import numpy as np
import optax

from recipes.core import state_spec, steps
from tests.helpers import DropoutNet, random_batch


def _state(rate):
  return state_spec.make(DropoutNet(10, rate=rate), optax.sgd(0.1),
                         (28, 28, 1)).create_state()


def _train(state, num_steps, seed=0):
  step = jax.jit(functools.partial(steps.train_step, seed=seed))
  losses = []
  for _ in range(num_steps):
    state, metrics = step(state, random_batch(mask=True))
    losses.append(float(metrics.compute()['loss']))
  return state, losses


def test_dropout_changes_training_and_not_evaluation():
  _, with_dropout = _train(_state(0.5), 1)
  _, without = _train(_state(0.0), 1)
  assert with_dropout[0] != without[0]
  # The same parameters evaluate alike: eval draws no masks.
  evaluate = jax.jit(steps.eval_step)
  dropped = evaluate(_state(0.5), random_batch(mask=True)).compute()
  kept = evaluate(_state(0.0), random_batch(mask=True)).compute()
  assert dropped['loss'] == kept['loss']


def test_the_key_is_a_function_of_seed_and_step():
  straight, _ = _train(_state(0.5), 4)
  # Two steps, then the state goes through the host as a checkpoint would.
  halfway, _ = _train(_state(0.5), 2)
  resumed, _ = _train(jax.device_get(halfway), 2)
  for a, b in zip(jax.tree.leaves(straight.params),
                  jax.tree.leaves(resumed.params)):
    np.testing.assert_array_equal(a, b)
  other_seed, _ = _train(_state(0.5), 4, seed=1)
  assert not np.array_equal(other_seed.params['Dense_1']['kernel'],
                            straight.params['Dense_1']['kernel'])
  keys = {tuple(np.asarray(steps.dropout_key(0, s)))
          for s in range(4)}
  assert len(keys) == 4

import numpy as np
import pytest

from recipes import optimizers
from recipes.errors import UserError
from tests.helpers import tiny_config


@pytest.mark.parametrize('staircase', [False, True])
def test_exponential_decay_formula(staircase):
  config = tiny_config(lr_schedule='exponential', learning_rate=0.4,
                       decay_rate=0.5, decay_steps=10, staircase=staircase)
  schedule = optimizers.learning_rate_schedule(config, 100, 1000)
  for step in (0, 5, 10, 25):
    exponent = step // 10 if staircase else step / 10
    np.testing.assert_allclose(schedule(step), 0.4 * 0.5 ** exponent,
                               rtol=1e-6)


def test_warmup_cosine_rises_then_falls_to_zero():
  config = tiny_config(lr_schedule='warmup_cosine', learning_rate=0.2,
                       warmup_epochs=2)
  schedule = optimizers.learning_rate_schedule(config, 10, 100)
  assert schedule(0) == 0.0
  np.testing.assert_allclose(schedule(20), 0.2, rtol=1e-6)
  assert 0 < schedule(60) < 0.2 and abs(schedule(100)) < 1e-9


@pytest.mark.parametrize('name', ['sgd', 'adam', 'adamw'])
def test_weight_decay_shrinks_kernels_not_biases(name):
  config = tiny_config(optimizer=name, weight_decay=0.1, learning_rate=0.1)
  tx = optimizers.create_optimizer(
      config, optimizers.learning_rate_schedule(config, 1, 1))
  params = {'kernel': np.ones((2, 2), np.float32),
            'bias': np.ones((2,), np.float32)}
  zero = {k: np.zeros_like(v) for k, v in params.items()}
  updates, _ = tx.update(zero, tx.init(params), params)
  assert np.all(np.asarray(updates['kernel']) < 0)
  np.testing.assert_array_equal(updates['bias'], 0)


def test_unknown_names_are_user_errors():
  with pytest.raises(UserError, match='unknown optimizer'):
    optimizers.create_optimizer(tiny_config(optimizer='lion'), lambda s: 0.1)
  with pytest.raises(UserError, match='unknown lr_schedule'):
    optimizers.learning_rate_schedule(tiny_config(lr_schedule='step'), 1, 1)

import jax
import numpy as np
import optax
import pytest

from configs import imagenet_vit_s16
from recipes import experiment
from recipes.config import validation
from recipes.core import optimizers
from recipes.runtime.errors import UserError
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


def _peak_step(schedule, peak, last):
  """The first step at which `schedule` reaches `peak`, rising to it."""
  rates = np.asarray(jax.vmap(schedule)(np.arange(last + 1)))
  step = int(np.argmax(np.isclose(rates, peak, rtol=1e-6)))
  assert np.all(np.diff(rates[:step + 1]) > 0) and rates[0] == 0
  return step


@pytest.mark.parametrize('warmup_steps, peak_at', [(7, 7), (0, 50)])
def test_warmup_steps_win_over_warmup_epochs(warmup_steps, peak_at):
  config = tiny_config(lr_schedule='warmup_cosine', learning_rate=0.2,
                       warmup_epochs=5.0, warmup_steps=warmup_steps)
  schedule = optimizers.learning_rate_schedule(config, 10, 100)
  assert _peak_step(schedule, 0.2, 100) == peak_at
  assert abs(schedule(100)) < 1e-9


def test_imagenet_vit_s16_runs_and_warms_up_as_big_vision_counts():
  # 1,268,355 examples at batch 1024: 1,238 whole steps per epoch, which
  # the length and warmup in steps no longer depend on.
  config = imagenet_vit_s16.get_config()
  num_steps = experiment._num_train_steps(config, 1_268_355 // 1024)  # pylint: disable=protected-access
  assert num_steps == 111_477 == round(90 * 1_268_355 / 1024)
  schedule = optimizers.learning_rate_schedule(config, 1_268_355 // 1024,
                                               num_steps)
  assert _peak_step(schedule, 0.001, 10_001) == 10_000
  assert float(schedule(num_steps)) == 0.0 < float(schedule(num_steps - 100))


def test_a_warmup_in_steps_must_leave_steps_to_train():
  config = tiny_config(lr_schedule='warmup_cosine', num_train_steps=100,
                       warmup_steps=100)
  message = (r"^warmup_steps=100 is not shorter than the run's 100 training "
             r'steps; set --config.warmup_steps lower \(0 = from '
             r'warmup_epochs\).$')
  with pytest.raises(UserError, match=message):
    validation.check(config)
  config.num_train_steps = 0  # In epochs: checked once the data is known.
  validation.check(config)
  config.num_epochs = 2.0
  with pytest.raises(UserError, match=r'the run\'s 100 training steps'):
    experiment._num_train_steps(config, 50)  # pylint: disable=protected-access
  assert experiment._num_train_steps(config, 51) == 102  # pylint: disable=protected-access
  # Let through: another schedule, a one-step trial, a warmup in epochs.
  validation.check(tiny_config(lr_schedule='constant', num_train_steps=100,
                               warmup_steps=100))
  validation.check(tiny_config(lr_schedule='warmup_cosine',
                               num_train_steps=1, warmup_steps=100))
  config = tiny_config(lr_schedule='warmup_cosine', warmup_epochs=3.0)
  assert experiment._num_train_steps(config, 10) == 6  # pylint: disable=protected-access


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


def _tx(**overrides):
  config = tiny_config(**overrides)
  return optimizers.create_optimizer(
      config, optimizers.learning_rate_schedule(config, 10, 100))


def test_clipping_bounds_the_global_norm():
  tx = _tx(optimizer='sgd', momentum=0.0, learning_rate=1.0,
           grad_clip_norm=0.5)
  params = {'kernel': np.ones((3, 3), np.float32),
            'bias': np.ones((3,), np.float32)}
  grads = {'kernel': np.full((3, 3), 2.0, np.float32),
           'bias': np.full((3,), -2.0, np.float32)}
  updates, _ = tx.update(grads, tx.init(params), params)
  norm = float(optax.tree.norm(updates))
  np.testing.assert_allclose(norm, 0.5, rtol=1e-6)
  # Same direction as the gradient.
  np.testing.assert_allclose(updates['kernel'] / updates['bias'][0],
                             -1.0, rtol=1e-6)
  small = jax.tree.map(lambda g: g / 100, grads)  # Under the bound: as is.
  updates, _ = tx.update(small, tx.init(params), params)
  np.testing.assert_allclose(updates['kernel'], -0.02, rtol=1e-6)


@pytest.mark.parametrize('scale', ['learning_rate', 'schedule'])
def test_adamw_decay_is_scaled_as_documented(scale):
  # Zero gradients: the update is the decay alone. warmup_cosine at step 30
  # of 100 (no warmup) gives lr_t; the schedule's factor is lr_t / lr.
  lr, wd = 0.002, 0.1
  config = tiny_config(optimizer='adamw', learning_rate=lr, weight_decay=wd,
                       weight_decay_scale=scale, lr_schedule='warmup_cosine')
  schedule = optimizers.learning_rate_schedule(config, 10, 100)
  tx = optimizers.create_optimizer(config, schedule)
  params = {'kernel': np.full((2, 2), 3.0, np.float32)}
  state = tx.init(params)
  zero = {'kernel': np.zeros((2, 2), np.float32)}
  for _ in range(30):
    _, state = tx.update(zero, state, params)
  updates, _ = tx.update(zero, state, params)
  lr_t = float(schedule(30))
  factor = lr_t if scale == 'learning_rate' else lr_t / lr
  np.testing.assert_allclose(updates['kernel'], -factor * wd * 3.0,
                             rtol=1e-5)


def test_adam_first_moment_dtype():
  params = {'kernel': np.ones((2, 2), np.float32)}
  for name in ('adam', 'adamw'):
    state = _tx(optimizer=name, adam_mu_dtype='bfloat16').init(params)
    dtypes = {str(x.dtype) for x in jax.tree.leaves(state)
              if getattr(x, 'shape', ()) == (2, 2)}
    assert dtypes == {'bfloat16', 'float32'}  # mu, nu.
    state = _tx(optimizer=name).init(params)
    assert {str(x.dtype) for x in jax.tree.leaves(state)
            if getattr(x, 'shape', ()) == (2, 2)} == {'float32'}


def test_position_embeddings_and_class_tokens_are_not_decayed():
  params = {'pos_embedding': np.ones((1, 5, 4), np.float32),
            'cls': np.ones((1, 1, 4), np.float32),
            'Dense_0': {'kernel': np.ones((4, 4), np.float32)}}
  mask = optimizers.decay_mask(params)
  assert mask == {'pos_embedding': False, 'cls': False,
                  'Dense_0': {'kernel': True}}

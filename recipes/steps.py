"""The step math, written once and shared by every parallel strategy.

Each step works on the batch it is given. Under `jax.pmap` or `jax.shard_map`
that is one device's share and `axis_name` names the mapped axis: gradients,
batch-norm statistics and metrics are averaged across it with `lax.pmean`
(spanning all hosts). Under `jax.jit` with sharded arrays the batch is
global, `axis_name` is None, and XLA inserts the same reductions itself.
"""

import jax
import jax.numpy as jnp
import optax
from jax import lax

from recipes.metrics import EvalMetrics, TrainMetrics
from recipes.train_state import TrainState


def _variables(state: TrainState, params):
  if state.batch_stats:
    return {'params': params, 'batch_stats': state.batch_stats}
  return {'params': params}


def _per_example_loss(logits, labels):
  # Loss in float32 whatever the computation dtype.
  return optax.softmax_cross_entropy_with_integer_labels(
      logits.astype(jnp.float32), labels)


def _collect_metrics(collection, axis_name, **outputs):
  if axis_name is None:
    return collection.single_from_model_output(**outputs)
  return collection.gather_from_model_output(axis_name=axis_name, **outputs)


def _loss_and_grads(state: TrainState, loss_fn, axis_name):
  """(aux, grads averaged over devices, state) -- with loss scaling if the
  state has a DynamicScale (float16), which it updates."""
  if state.dynamic_scale is None:
    (_, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    if axis_name is not None:
      grads = lax.pmean(grads, axis_name)
    return aux, grads, state
  # float16 gradients underflow unless the loss is scaled up first; the scale
  # backs off when they overflow (and that update is skipped below).
  dynamic_scale, _, (_, aux), grads = state.dynamic_scale.value_and_grad(
      loss_fn, has_aux=True, axis_name=axis_name)(state.params)
  return aux, grads, state.replace(dynamic_scale=dynamic_scale)


def _keep_if_not(finite, new: TrainState, old: TrainState) -> TrainState:
  """`new`, but with the old weights, optimizer state and statistics where
  `finite` is False. The step still advances: it is the data position."""

  def choose(a, b):
    return jax.tree.map(lambda x, y: jnp.where(finite, x, y), a, b)

  return new.replace(params=choose(new.params, old.params),
                     opt_state=choose(new.opt_state, old.opt_state),
                     batch_stats=choose(new.batch_stats, old.batch_stats))


def dropout_key(seed: int, step, axis_name: str | None = None) -> jax.Array:
  """The random key of the update that makes `step` + 1: a function of (seed,
  step) only, so a resumed run draws the same masks as an uninterrupted one.
  Where each device holds its own share of the batch (`axis_name`), the
  device's index is folded in too, so the shares get different masks."""
  key = jax.random.fold_in(jax.random.PRNGKey(seed), step)
  if axis_name is not None:
    key = jax.random.fold_in(key, lax.axis_index(axis_name))
  return key


def train_step(state: TrainState, batch, axis_name: str | None = None,
               seed: int = 0):
  """One optimizer update on `batch`; returns the new state and its metrics.

  Models with dropout get their key from `dropout_key(seed, state.step)`.
  A non-finite loss or gradient norm is reported in the metrics; the update
  is skipped instead if the state says so (`skips_nonfinite_updates`).
  """
  rngs = {'dropout': dropout_key(seed, state.step, axis_name)}

  def loss_fn(params):
    mutable = ['batch_stats'] if state.batch_stats else False
    out = state.apply_fn(_variables(state, params), batch['image'],
                         train=True, mutable=mutable, rngs=rngs)
    logits, new_model_state = out if mutable else (out, {})
    loss = _per_example_loss(logits, batch['label'])
    return loss.mean(), (loss, logits, new_model_state)

  (loss, logits, new_model_state), grads, state = _loss_and_grads(
      state, loss_fn, axis_name)
  batch_stats = new_model_state.get('batch_stats', state.batch_stats)
  mean_loss = loss.mean()
  if axis_name is not None:
    batch_stats = lax.pmean(batch_stats, axis_name)
    mean_loss = lax.pmean(mean_loss, axis_name)  # Every device decides alike.
  grad_norm = optax.tree.norm(grads)
  finite = jnp.isfinite(mean_loss) & jnp.isfinite(grad_norm)
  new_state = state.apply_gradients(grads=grads, batch_stats=batch_stats)

  outputs = dict(loss=loss, logits=logits, labels=batch['label'],
                 grad_norm=jnp.full_like(loss, grad_norm))
  if state.skips_nonfinite_updates:
    new_state = _keep_if_not(finite, new_state, state)
    # Skipped steps count apart and stay out of the averages.
    outputs.update(skipped=~finite, mask=jnp.broadcast_to(finite, loss.shape))
  else:
    outputs.update(skipped=False)
  return new_state, _collect_metrics(TrainMetrics, axis_name, **outputs)


def eval_step(state: TrainState, batch, axis_name: str | None = None):
  """Metrics of the model on `batch`, skipping examples whose mask is False."""
  logits = state.apply_fn(_variables(state, state.params), batch['image'],
                          train=False)
  loss = _per_example_loss(logits, batch['label'])
  return _collect_metrics(EvalMetrics, axis_name, loss=loss, logits=logits,
                          labels=batch['label'], mask=batch['mask'])

"""The step math, written once and shared by every parallel strategy.

Each step works on the batch it is given. Under `jax.pmap` that is one
device's share and `axis_name` names the mapped axis: gradients, batch-norm
statistics and metrics are averaged across it with `lax.pmean` (spanning all
hosts). Under `jax.jit` with sharded arrays the batch is global, `axis_name` is
None, and XLA inserts the same reductions itself.
"""

import jax
import jax.numpy as jnp
import optax
from jax import lax

from recipes.metrics import Metrics
from recipes.train_state import TrainState


def _variables(state: TrainState, params):
  if state.batch_stats:
    return {'params': params, 'batch_stats': state.batch_stats}
  return {'params': params}


def _per_example_loss(logits, labels):
  # Loss in float32 whatever the computation dtype.
  return optax.softmax_cross_entropy_with_integer_labels(
      logits.astype(jnp.float32), labels)


def _collect_metrics(axis_name, **outputs) -> Metrics:
  if axis_name is None:
    return Metrics.single_from_model_output(**outputs)
  return Metrics.gather_from_model_output(axis_name=axis_name, **outputs)


def train_step(state: TrainState, batch, axis_name: str | None = None):
  """One optimizer update on `batch`; returns the new state and its metrics."""

  def loss_fn(params):
    mutable = ['batch_stats'] if state.batch_stats else False
    out = state.apply_fn(_variables(state, params), batch['image'],
                         train=True, mutable=mutable)
    logits, new_model_state = out if mutable else (out, {})
    loss = _per_example_loss(logits, batch['label'])
    return loss.mean(), (loss, logits, new_model_state)

  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
  (_, (loss, logits, new_model_state)), grads = grad_fn(state.params)
  batch_stats = new_model_state.get('batch_stats', state.batch_stats)
  if axis_name is not None:
    grads = lax.pmean(grads, axis_name)
    batch_stats = lax.pmean(batch_stats, axis_name)
  state = state.apply_gradients(grads=grads, batch_stats=batch_stats)
  metrics = _collect_metrics(axis_name, loss=loss, logits=logits,
                             labels=batch['label'])
  return state, metrics


def eval_step(state: TrainState, batch, axis_name: str | None = None):
  """Metrics of the model on `batch`, skipping examples whose mask is False."""
  logits = state.apply_fn(_variables(state, state.params), batch['image'],
                          train=False)
  loss = _per_example_loss(logits, batch['label'])
  return _collect_metrics(axis_name, loss=loss, logits=logits,
                          labels=batch['label'], mask=batch['mask'])

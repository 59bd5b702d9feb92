"""The step math, written once and shared by every parallel strategy.

Each step works on the batch it is given. Under `jax.pmap` or `jax.shard_map`
that is one device's share and `axis_name` names the mapped axis: gradients,
batch-norm statistics and metrics are averaged across it with `lax.pmean`
(spanning all hosts). Under `jax.jit` with sharded arrays the batch is
global, `axis_name` is None, and XLA inserts the same reductions itself.

Three kinds of batch take the same steps: images with class labels
(`image`, `label`); texts with class labels for an encoder (`tokens`,
`mask` [N, T], false on padding, and `label`; recipes/data/text/
labelled_records.py), whose loss and metrics are the images'; and packed
token sequences for a language model (`inputs`, `targets`, `segment_ids`,
`positions`, `mask`; recipes/data/text/packing.py). A token batch's loss is the next-token cross-entropy averaged
over the target tokens its mask keeps, over the whole global batch (every
device's and micro-batch's tokens weigh alike), and its metrics are
TokenTrainMetrics / TokenEvalMetrics.
"""

import jax
import jax.numpy as jnp
import optax
from jax import lax

from recipes.core import mixing
from recipes.core.metrics import (EvalMetrics, TokenEvalMetrics,
                                   TokenTrainMetrics, TrainMetrics)
from recipes.core.train_state import TrainState, UpdateRules


def _variables(params, batch_stats):
  if batch_stats:
    return {'params': params, 'batch_stats': batch_stats}
  return {'params': params}


def is_token_batch(batch) -> bool:
  """Whether `batch` holds token sequences for a language model (else
  images and labels)."""
  return 'targets' in batch


def is_text_batch(batch) -> bool:
  """Whether `batch` holds labelled texts for a classifier."""
  return 'tokens' in batch


def _apply(state: TrainState, variables, batch, **kwargs):
  """The model on the batch's inputs: images; labelled texts with their
  padding masked; or packed tokens with their documents kept apart
  (segment ids, positions)."""
  if is_token_batch(batch):
    return state.apply_fn(variables, batch['inputs'],
                          segment_ids=batch['segment_ids'],
                          positions=batch['positions'], **kwargs)
  if is_text_batch(batch):
    return state.apply_fn(variables, batch['tokens'], mask=batch['mask'],
                          **kwargs)
  return state.apply_fn(variables, batch['image'], **kwargs)


def _example_mask(batch):
  """The examples an evaluation counts: a text's first token is real
  unless the row pads the batch."""
  return batch['mask'][:, 0] if is_text_batch(batch) else batch['mask']


def _scored(logits, batch):
  """What the metrics read of the logits: the logits themselves for
  images; for tokens, whether each target is the most likely token (so
  that micro-batches keep [N, T] floats rather than [N, T, vocab])."""
  if is_token_batch(batch):
    return (jnp.argmax(logits, -1) == batch['targets']).astype(jnp.float32)
  return logits


def _per_example_loss(logits, batch, rules: UpdateRules | None = None):
  """Cross-entropy in float32 whatever the computation dtype; against
  probability targets where labels are mixed or smoothed; per target token
  ([N, T]) for a token batch."""
  logits = logits.astype(jnp.float32)
  if is_token_batch(batch):
    return optax.softmax_cross_entropy_with_integer_labels(logits,
                                                           batch['targets'])
  if rules is None or not rules.soft_targets:
    return optax.softmax_cross_entropy_with_integer_labels(logits,
                                                           batch['label'])
  return optax.softmax_cross_entropy(logits, mixing.targets(
      batch['label'], batch['other_label'], batch['label_weight'],
      logits.shape[-1], rules.label_smoothing))


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
  """`new`, but with the old weights, optimizer state, statistics and
  average where `finite` is False. The step still advances: it is the data
  position."""

  def choose(a, b):
    return jax.tree.map(lambda x, y: jnp.where(finite, x, y), a, b)

  return new.replace(params=choose(new.params, old.params),
                     opt_state=choose(new.opt_state, old.opt_state),
                     batch_stats=choose(new.batch_stats, old.batch_stats),
                     ema_params=choose(new.ema_params, old.ema_params))


# fold_in index of the mixing key, apart from the models' dropout streams.
_MIX_STREAM = 1


def dropout_key(seed: int, step, axis_name: str | None = None) -> jax.Array:
  """The random key of the update that makes `step` + 1: a function of (seed,
  step) only, so a resumed run draws the same masks as an uninterrupted one.
  Where each device holds its own share of the batch (`axis_name`), the
  device's index is folded in too, so the shares get different masks.

  Args:
    seed: the run's seed.
    step: the state's step before the update (an int or a scalar array).
    axis_name: the mapped axis the step runs under; None where the step
      sees the global batch.

  Returns:
    The key.
  """
  key = jax.random.fold_in(jax.random.PRNGKey(seed), step)
  if axis_name is not None:
    key = jax.random.fold_in(key, lax.axis_index(axis_name))
  return key


def _mixed(batch, key, rules: UpdateRules):
  """The batch with mixup/cutmix applied (see recipes/core/mixing.py), and both
  labels of each example with the weight of its own."""
  if not rules.soft_targets:
    return batch
  weight = jnp.ones(batch['label'].shape, jnp.float32)
  if rules.mixes:
    image, weight = mixing.mix(jax.random.fold_in(key, _MIX_STREAM),
                               batch['image'], rules)
    batch = dict(batch, image=image)
  return dict(batch, other_label=jnp.roll(batch['label'], 1),
              label_weight=weight)


def _micro_batches(batch, count: int):
  """The batch as `count` micro-batches stacked on a new leading axis;
  micro-batch i takes examples i, i + count, ..., so that where the batch
  is split over devices, each micro-batch is too."""
  return jax.tree.map(
      lambda x: jnp.swapaxes(
          x.reshape(x.shape[0] // count, count, *x.shape[1:]), 0, 1), batch)


def _joined(stacked):
  """The inverse of `_micro_batches`: examples back in the batch's order."""
  return jnp.swapaxes(stacked, 0, 1).reshape(-1, *stacked.shape[2:])


def _accumulated(loss_fn, params, batch_stats, batch, key, count: int):
  """((mean loss, (per-example loss, logits, batch stats)), gradients) over
  `count` micro-batches run one after another: the gradient of the whole
  batch's mean loss in the memory of one micro-batch. Batch-norm statistics
  are those of each micro-batch, and the running averages are updated once
  per micro-batch: there, unlike the gradient, the result differs from one
  big batch."""
  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

  def one(carry, inputs):
    grads, stats = carry
    index, micro = inputs
    (_, (loss, logits, stats)), micro_grads = grad_fn(
        params, stats, micro, jax.random.fold_in(key, index))
    grads = jax.tree.map(jnp.add, grads, micro_grads)
    return (grads, stats), (loss, logits)

  zeros = jax.tree.map(jnp.zeros_like, params)
  (grads, batch_stats), (loss, logits) = lax.scan(
      one, (zeros, batch_stats),
      (jnp.arange(count), _micro_batches(batch, count)))
  grads = jax.tree.map(lambda g: g / count, grads)
  loss, logits = _joined(loss), _joined(logits)
  return (loss.mean(), (loss, logits, batch_stats)), grads


def _update_ema(state: TrainState) -> TrainState:
  if state.ema_params is None:
    return state
  decay = state.update_rules.ema_decay
  return state.replace(ema_params=jax.tree.map(
      lambda e, p: decay * e + (1 - decay) * p, state.ema_params,
      state.params))


def train_step(state: TrainState, batch, axis_name: str | None = None,
               seed: int = 0):
  """One optimizer update on `batch`; returns the new state and its metrics.

  `state.update_rules` adds label smoothing, mixup/cutmix, gradient
  accumulation and the parameters' moving average. Random choices (dropout,
  mixing) take their key from `dropout_key(seed, state.step)`.
  A non-finite loss or gradient norm is reported in the metrics; the update
  is skipped instead if the state says so (`skips_nonfinite_updates`).

  Args:
    state: the state before the update.
    batch: `image` [N, ...] and int `label` [N], or a token batch (see
      above): the global batch, or this device's share of it under
      `axis_name`.
    axis_name: the mapped axis to average gradients, batch-norm statistics
      and metrics over; None where the batch is global (under jit).
    seed: the run's seed, for the step's random key.

  Returns:
    (the new state, TrainMetrics (TokenTrainMetrics) of the step).
  """
  rules = state.update_rules
  key = dropout_key(seed, state.step, axis_name)
  tokens = is_token_batch(batch)
  if tokens:
    # Each (micro-)batch's summed loss over the global batch's mean token
    # count per device (and micro-batch): averaged over devices and summed
    # over micro-batches below, the gradient is that of the mean over
    # every target token of the global batch.
    count = batch['mask'].sum().astype(jnp.float32)
    if axis_name is not None:
      count = lax.pmean(count, axis_name)
    normalizer = jnp.maximum(count, 1.0) / rules.grad_accum_steps
  else:
    batch = _mixed(batch, key, rules)
  mutable = ['batch_stats'] if state.batch_stats else False

  def loss_fn(params, batch_stats, batch, key):
    out = _apply(state, _variables(params, batch_stats), batch,
                 train=True, mutable=mutable, rngs={'dropout': key})
    logits, new_model_state = out if mutable else (out, {})
    loss = _per_example_loss(logits, batch, rules)
    objective = ((loss * batch['mask']).sum() / normalizer if tokens
                 else loss.mean())
    return objective, (loss, _scored(logits, batch),
                       new_model_state.get('batch_stats', batch_stats))

  if rules.grad_accum_steps > 1:
    # Float16 loss scaling is refused with accumulation (validation).
    (_, (loss, logits, batch_stats)), grads = _accumulated(
        loss_fn, state.params, state.batch_stats, batch, key,
        rules.grad_accum_steps)
    if axis_name is not None:
      grads = lax.pmean(grads, axis_name)
  else:
    (loss, logits, batch_stats), grads, state = _loss_and_grads(
        state, lambda p: loss_fn(p, state.batch_stats, batch, key),
        axis_name)
  mean_loss = ((loss * batch['mask']).sum() / normalizer
               / rules.grad_accum_steps if tokens else loss.mean())
  if axis_name is not None:
    batch_stats = lax.pmean(batch_stats, axis_name)
    mean_loss = lax.pmean(mean_loss, axis_name)  # Every device decides alike.
  grad_norm = optax.tree.norm(grads)
  finite = jnp.isfinite(mean_loss) & jnp.isfinite(grad_norm)
  new_state = _update_ema(state.apply_gradients(grads=grads,
                                                batch_stats=batch_stats))

  if tokens:
    return new_state, _collect_metrics(
        TokenTrainMetrics, axis_name,
        **_token_train_outputs(batch, loss, logits, grad_norm, finite,
                               state.skips_nonfinite_updates))

  # Accuracy against each example's larger share of a mixed label.
  labels = batch['label']
  if 'label_weight' in batch:
    labels = jnp.where(batch['label_weight'] >= 0.5, labels,
                       batch['other_label'])
  outputs = dict(loss=loss, logits=logits, labels=labels,
                 grad_norm=jnp.full_like(loss, grad_norm))
  if state.skips_nonfinite_updates:
    new_state = _keep_if_not(finite, new_state, state)
    # Skipped steps count apart and stay out of the averages.
    outputs.update(skipped=~finite, mask=jnp.broadcast_to(finite, loss.shape))
  else:
    outputs.update(skipped=False)
  return new_state, _collect_metrics(TrainMetrics, axis_name, **outputs)


def _token_train_outputs(batch, loss, correct, grad_norm, finite,
                         skipping: bool) -> dict:
  """The model outputs TokenTrainMetrics reads: per token, and the
  gradient norm once per step; a skipped step's left out."""
  step_mask = jnp.ones((1,), bool)
  mask = batch['mask']
  if skipping:
    step_mask, mask = step_mask & finite, mask & finite
  return dict(loss=loss, correct=correct, mask=mask,
              grad_norm=jnp.full((1,), grad_norm), step_mask=step_mask,
              skipped=~finite if skipping else False)


def eval_step(state: TrainState, batch, axis_name: str | None = None):
  """Metrics of the model on `batch`, skipping examples whose mask is False.

  Args:
    state: the state whose parameters and statistics are evaluated.
    batch: `image`, int `label` and bool `mask` (False for padding), each
      [N, ...]; labelled texts (a padding row's `mask` all False); or a
      token batch (`mask` [N, T] per target token): the global batch, or
      this device's share under `axis_name`.
    axis_name: the mapped axis to gather the metrics over; None where the
      batch is global.

  Returns:
    EvalMetrics (TokenEvalMetrics) of the batch.
  """
  logits = _apply(state, _variables(state.params, state.batch_stats), batch,
                  train=False)
  loss = _per_example_loss(logits, batch)
  if is_token_batch(batch):
    return _collect_metrics(TokenEvalMetrics, axis_name, loss=loss,
                            correct=_scored(logits, batch),
                            mask=batch['mask'])
  return _collect_metrics(EvalMetrics, axis_name, loss=loss, logits=logits,
                          labels=batch['label'], mask=_example_mask(batch))

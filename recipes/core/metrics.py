"""The CLU metric collections reported for training and evaluation."""

import flax
import jax.numpy as jnp
from clu import metrics
from jax import lax


@flax.struct.dataclass
class SkippedSteps(metrics.Metric):
  """How many updates were skipped for a non-finite loss or gradient.

  Summed over steps; every device reports the same flag for a step, so the
  copies gathered from the devices count once.
  """

  count: jnp.ndarray

  @classmethod
  def from_model_output(cls, skipped, **_) -> 'SkippedSteps':
    return cls(count=jnp.asarray(skipped, jnp.int32))

  @classmethod
  def empty(cls) -> 'SkippedSteps':
    return cls(count=jnp.array(0, jnp.int32))

  def merge(self, other: 'SkippedSteps') -> 'SkippedSteps':
    return type(self)(count=self.count + other.count)

  def _reduce_merge(self, other: 'SkippedSteps') -> 'SkippedSteps':
    return self

  def compute(self):
    return self.count


def top_k_correct(logits, labels, k: int):
  """Per example, 1.0 where the label is among the k largest logits (all of
  them when there are fewer than k classes)."""
  _, top = lax.top_k(logits, min(k, logits.shape[-1]))
  return jnp.any(top == labels[..., None], axis=-1).astype(jnp.float32)


@flax.struct.dataclass
class EvalMetrics(metrics.Collection):
  """Mean loss, top-1 and top-5 accuracy; all honour a per-example `mask`."""

  loss: metrics.Average.from_output('loss')
  accuracy: metrics.Accuracy
  top5_accuracy: metrics.Average.from_fun(
      lambda logits, labels, **_: top_k_correct(logits, labels, 5))


@flax.struct.dataclass
class TrainMetrics(metrics.Collection):
  """Loss and accuracy as in evaluation, the gradient's global norm, and the
  updates skipped as non-finite. (CLU reads a collection's fields from its own
  annotations only, so they are listed again rather than inherited.)"""

  loss: metrics.Average.from_output('loss')
  accuracy: metrics.Accuracy
  grad_norm: metrics.Average.from_output('grad_norm')
  skipped: SkippedSteps

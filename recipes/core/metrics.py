"""The CLU metric collections reported for training and evaluation."""

import flax
import jax.numpy as jnp
import numpy as np
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
    """The metric of one step.

    Args:
      skipped: True where the step's update was skipped; other model
        outputs are ignored.

    Returns:
      A count of 1 for a skipped step, else 0.
    """
    return cls(count=jnp.asarray(skipped, jnp.int32))

  @classmethod
  def empty(cls) -> 'SkippedSteps':
    """No steps yet.

    Returns:
      A count of 0.
    """
    return cls(count=jnp.array(0, jnp.int32))

  def merge(self, other: 'SkippedSteps') -> 'SkippedSteps':
    """Both counts together.

    Args:
      other: the metric of later steps.

    Returns:
      The sum of the two counts.
    """
    return type(self)(count=self.count + other.count)

  def _reduce_merge(self, other: 'SkippedSteps') -> 'SkippedSteps':
    return self

  def compute(self):
    """The number of skipped updates.

    Returns:
      The count, an int32 scalar.
    """
    return self.count


def top_k_correct(logits, labels, k: int):
  """Per example, 1.0 where the label is among the k largest logits (all of
  them when there are fewer than k classes).

  Args:
    logits: the model's outputs [..., classes].
    labels: the class ids [...].
    k: how many of the largest logits count as correct.

  Returns:
    float32 [...]: 1.0 for a correct example, else 0.0.
  """
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


@flax.struct.dataclass
class Perplexity(metrics.Average):
  """exp of the mean loss over every token merged, not a mean of per-batch
  exps: the perplexity of the whole evaluation."""

  def compute(self):
    """exp(total loss / tokens), as numpy: computed on the host, as every
    summary is."""
    return np.exp(np.asarray(super().compute(), np.float64))


def _per_step(grad_norm, step_mask, **_):
  """The gradient norm ([1]) once per step (per device, each the same),
  whatever the number of tokens, unless `step_mask` ([1]) leaves the step
  out (a skipped update)."""
  return dict(values=grad_norm, mask=step_mask)


@flax.struct.dataclass
class TokenEvalMetrics(metrics.Collection):
  """A language model's next-token loss, perplexity and accuracy, each an
  average over the target tokens the `mask` keeps (padding and document
  boundaries left out)."""

  loss: metrics.Average.from_output('loss')
  perplexity: Perplexity.from_output('loss')
  accuracy: metrics.Average.from_output('correct')


@flax.struct.dataclass
class TokenTrainMetrics(metrics.Collection):
  """TokenEvalMetrics' fields, the gradient's global norm (per step) and the
  skipped updates."""

  loss: metrics.Average.from_output('loss')
  perplexity: Perplexity.from_output('loss')
  accuracy: metrics.Average.from_output('correct')
  grad_norm: metrics.Average.from_fun(_per_step)
  skipped: SkippedSteps

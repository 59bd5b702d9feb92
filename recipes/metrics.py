"""The CLU metric collection reported for training and evaluation."""

import flax
from clu import metrics


@flax.struct.dataclass
class Metrics(metrics.Collection):
  """Mean loss and accuracy; both honour a per-example `mask`."""

  loss: metrics.Average.from_output('loss')
  accuracy: metrics.Accuracy

"""An NNX model of one's own, as the recipes take it:
`--config.model=tests.nnx_model_fixture:SmallNNXNet`."""

import jax.numpy as jnp
from flax import nnx


class SmallNNXNet(nnx.Module):
  """A tiny MLP with batch norm and dropout; its first kernel carries the
  logical axis names ('embed', 'mlp')."""

  def __init__(self, *, num_classes: int, dtype=jnp.float32,
               hidden: int = 16, rngs: nnx.Rngs):
    self.hidden = nnx.Linear(
        28 * 28, hidden, dtype=dtype, rngs=rngs,
        kernel_init=nnx.with_partitioning(nnx.initializers.lecun_normal(),
                                          ('embed', 'mlp')))
    self.norm = nnx.BatchNorm(hidden, dtype=dtype, rngs=rngs)
    self.dropout = nnx.Dropout(0.5, rngs=rngs)
    self.head = nnx.Linear(hidden, num_classes, dtype=dtype, rngs=rngs)

  def __call__(self, x, train: bool = False):
    x = self.hidden(x.reshape((x.shape[0], -1)))
    x = nnx.relu(self.norm(x, use_running_average=not train))
    return self.head(self.dropout(x, deterministic=not train))

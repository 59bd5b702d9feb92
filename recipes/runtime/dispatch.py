"""Keeping the host at most one computation ahead of the devices.

JAX dispatches asynchronously: a loop that only dispatches can queue hundreds
of steps. With collectives in them that hangs or aborts on CPU (gloo across
processes; "Termination timeout for all reduce" across simulated devices), and
even where it works, timings lie and memory grows. Every loop that dispatches
steps (training, evaluation, the benchmarks) goes through `OneAhead`.
"""

import jax


class OneAhead:
  """Call with each computation's output right after dispatching it.

  The call returns once the computation dispatched before it has finished, so
  at most two are ever in flight: one running, the next one queued.
  """

  def __init__(self):
    self._previous = None

  def __call__(self, output):
    """Waits for the previous computation; keeps `output` for the next call.

    Args:
      output: the output (any pytree of arrays) of the computation just
        dispatched.

    Returns:
      `output`, unchanged (it may still be computing).
    """
    if self._previous is not None:
      jax.block_until_ready(self._previous)
    self._previous = output
    return output

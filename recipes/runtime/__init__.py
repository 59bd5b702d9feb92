"""What a run stands on: user errors, storage paths (local or gs://), the
workdir's lease, TensorBoard summaries, preemption, the stall watchdog,
bounded dispatch, the filter for library noise and a command's start."""

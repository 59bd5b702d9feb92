"""From examples to the batches each process feeds: the Dataset interface,
held in memory, read by index, or streamed."""

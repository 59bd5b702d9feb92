"""Datasets: where examples come from (IDX files, TFDS in memory, TFDS
streamed), how they are preprocessed, and the batches each process feeds."""

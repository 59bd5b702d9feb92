"""Parallel strategies: how the state and batches are placed on devices and
the shared step is run (pmap, sharded, shard_map); meshes, partition rules and
multi-process start-up."""

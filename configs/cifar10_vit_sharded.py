"""ViT-S/16 on CIFAR-10 (patch 4), sharded recipe with tensor parallelism.

The run of configs/cifar10_vit_s16_pmap.py (same model, data, optimizer and
schedule) on a ('data', 'fsdp', 'tensor') mesh: pairs of devices split each
block's MLP hidden features and attention heads (Megatron-style tensor
parallelism, 6 heads -> 3 per device), and the rest of the devices are data
parallel:

    python -m recipes.train --config=configs/cifar10_vit_sharded.py \
        --workdir=/tmp/cifar10_vit_sharded

The mesh is data=-1 (all devices left over), tensor=2; the number of devices
must be even. At this size pure data parallelism is faster
(`--config.mesh.tensor=1`); tensor parallelism pays off for models whose
layers do not fit one device. The log lists each parameter's PartitionSpec.

Expected: as configs/cifar10_vit_s16_pmap.py, roughly 80-85% test accuracy
(crop + flip only, no pre-training; Dosovitskiy et al. 2021), since both
recipes compute the same numbers up to float rounding. Time: not measured
yet.
"""

from configs import cifar10_vit_s16_pmap


def get_config():
  config = cifar10_vit_s16_pmap.get_config()
  config.strategy = 'sharded'
  config.mesh.data = -1
  config.mesh.fsdp = 1
  config.mesh.tensor = 2
  # () = the transformer rules (recipes/parallel/partition_rules.py): 'mlp'
  # and 'heads' over 'tensor', 'embed' over 'fsdp' (size 1 here: not split).
  config.partition_rules = ()
  return config

"""ResNet-56 on CIFAR-10 (TFDS `cifar10`), data-parallel with jax.pmap.

    python -m recipes.train --config=configs/cifar10_resnet56_pmap.py \
        --workdir=/tmp/cifar10_resnet56

The ResNet-20 recipe (configs/cifar10_resnet20_pmap.py) with the deeper
network. Expected: about 93% test accuracy (He et al. 2016, Table 6: 93.03%).
Time: not measured yet.
"""

from configs import cifar10_resnet20_pmap


def get_config():
  config = cifar10_resnet20_pmap.get_config()
  config.model = 'resnet56'
  return config

"""Small CNN on Fashion-MNIST, sharded recipe (jit on a device mesh); offline.

The same run as configs/fashion_mnist_pmap.py -- same model, data, optimizer
and schedule -- with `strategy = 'sharded'`: a ('data', 'fsdp', 'tensor')
mesh over all devices, pure data parallel by default. Reads the IDX files of
Debian's `dataset-fashion-mnist` package, so no download is needed:

    python -m recipes.train --config=configs/fashion_mnist_sharded.py \
        --workdir=/tmp/fashion_mnist_sharded

Other layouts from the command line, e.g. parameters and optimizer state
split over all devices (FSDP): `--config.mesh.data=1 --config.mesh.fsdp=-1`.
The log shows the mesh and each parameter's PartitionSpec and bytes per
device.

Expected: the accuracy of configs/fashion_mnist_pmap.py (see the results
table of docs/training.md), since with the same seed both recipes compute the
same numbers up to float rounding (tests/integration/test_sharded_equality.py).
"""

from configs import fashion_mnist_pmap


def get_config():
  config = fashion_mnist_pmap.get_config()
  config.strategy = 'sharded'
  config.mesh.data = -1  # All devices data parallel.
  config.mesh.fsdp = 1
  config.mesh.tensor = 1
  return config

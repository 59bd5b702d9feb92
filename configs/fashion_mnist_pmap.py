"""Small CNN on Fashion-MNIST, data-parallel with jax.pmap; works offline.

Reads the real Fashion-MNIST IDX files of Debian's `dataset-fashion-mnist`
package (`apt-get install -y dataset-fashion-mnist`, with sudo unless root),
so no download is needed:

    python -m recipes.train --config=configs/fashion_mnist_pmap.py \
        --workdir=/tmp/fashion_mnist

Expected: see the results table of docs/training.md (test accuracy after 2 and
10 epochs and wall time on a 2-core CPU).
"""

from recipes.config import defaults


def get_config():
  config = defaults.get_config()
  # The classic recipe: jax.pmap, the state replicated on every device.
  config.strategy = 'pmap'
  config.dataset = 'fashion_mnist_idx'
  config.data_dir = '/usr/share/datasets/fashion-mnist'
  config.model = 'cnn'
  config.num_epochs = 10.0
  # SGD with momentum 0.9 at 0.1, a short warmup, then cosine decay to zero.
  config.lr_schedule = 'warmup_cosine'
  config.warmup_epochs = 0.2
  return config

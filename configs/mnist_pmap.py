"""Small CNN on MNIST from TFDS, data-parallel with jax.pmap on all local devices.

    python -m recipes.train --config=configs/mnist_pmap.py --workdir=/tmp/mnist

TFDS downloads MNIST on first use, so this needs internet once (or
`--config.data_dir` pointing at a prepared TFDS copy); offline, use
configs/fashion_mnist_pmap.py. Expected: about 99% test accuracy after
10 epochs (the figure Flax's MNIST example reports for this CNN and optimizer).
"""

from recipes.config import defaults


def get_config():
  config = defaults.get_config()
  # The classic recipe: jax.pmap, the state replicated on every device.
  config.strategy = 'pmap'
  config.dataset = 'mnist'
  config.model = 'cnn'
  config.num_epochs = 10.0
  # SGD with momentum 0.9 at 0.1, a short warmup, then cosine decay to zero.
  config.lr_schedule = 'warmup_cosine'
  config.warmup_epochs = 0.2
  return config

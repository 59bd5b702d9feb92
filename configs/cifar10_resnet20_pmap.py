"""ResNet-20 on CIFAR-10 (TFDS `cifar10`), data-parallel with jax.pmap.

    python -m recipes.train --config=configs/cifar10_resnet20_pmap.py \
        --workdir=/tmp/cifar10_resnet20

Standard recipe: random crop (pad 4) + horizontal flip, per-channel
normalization, SGD with momentum 0.9, batch 128, learning rate 0.1, weight
decay 1e-4, 160 epochs with cosine decay. Expected: about 91-92% test
accuracy (He et al. 2016, "Deep Residual Learning", Table 6: 91.25% with a
step schedule). Time: not measured yet; expect minutes per epoch on one
modern GPU, hours on a CPU.
Use `--config.model=resnet56` for ResNet-56 (93.03% in the same table) or
configs/cifar10_resnet56_pmap.py.
"""

from recipes.config import defaults


def get_config():
  config = defaults.get_config()
  # The classic recipe: jax.pmap, the state replicated on every device.
  config.strategy = 'pmap'
  config.model = 'resnet20'
  config.dataset = 'cifar10'
  config.augment = 'cifar'
  config.normalize = 'cifar10'
  config.batch_size = 128
  config.num_epochs = 160.0
  config.optimizer = 'sgd'
  config.learning_rate = 0.1
  config.momentum = 0.9
  config.weight_decay = 1e-4
  config.lr_schedule = 'warmup_cosine'
  config.warmup_epochs = 1.0
  config.log_every_steps = 100
  return config

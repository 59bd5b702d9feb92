"""Wide-ResNet-28-10 on CIFAR-10 (TFDS `cifar10`), data-parallel with jax.pmap.

    python -m recipes.train --config=configs/cifar10_wrn28_10_pmap.py \
        --workdir=/tmp/cifar10_wrn28_10

Zagoruyko & Komodakis 2016 ("Wide Residual Networks"): crop + flip,
SGD with Nesterov momentum 0.9, batch 128, learning rate 0.1, weight decay
5e-4, 200 epochs (here with cosine decay instead of steps). Expected: about
96% test accuracy (the paper's Table 4: 4.00% error without dropout).
bfloat16 computation (`half_precision`) is the sensible default on TPU and
recent GPUs; set `--config.half_precision=False` on a CPU. Time: not measured
yet.
"""

from configs import cifar10_resnet20_pmap


def get_config():
  config = cifar10_resnet20_pmap.get_config()
  config.model = 'wrn28_10'
  config.num_epochs = 200.0
  config.nesterov = True
  config.weight_decay = 5e-4
  config.half_precision = True
  return config

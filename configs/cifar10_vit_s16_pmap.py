"""ViT-S/16 adapted to CIFAR-10 (32x32 images, patch 4), data-parallel with pmap.

    python -m recipes.train --config=configs/cifar10_vit_s16_pmap.py \
        --workdir=/tmp/cifar10_vit_s16

The ViT-S width and depth (384 wide, 12 blocks, 6 heads) on 8x8 patches of
4x4 pixels plus a class token. Trained from scratch with crop + flip only,
AdamW (learning rate 1e-3, weight decay 0.05), batch 512, 5 warmup epochs and
cosine decay over 200 epochs. Expected: roughly 80-85% test accuracy; ViTs
need stronger augmentation or pre-training to match ResNets at this size
(Dosovitskiy et al. 2021). Not measured here (no CIFAR-10 download on these
machines).
"""

import ml_collections

from recipes.config import defaults


def get_config():
  config = defaults.get_config()
  # The classic recipe: jax.pmap, the state replicated on every device.
  config.strategy = 'pmap'
  config.model = 'vit_s16'
  config.model_kwargs = ml_collections.ConfigDict(
      {'patch_size': 4, 'image_size': 32})
  config.dataset = 'cifar10'
  config.augment = 'cifar'
  config.normalize = 'cifar10'
  config.batch_size = 512
  config.num_epochs = 200.0
  config.optimizer = 'adamw'
  config.learning_rate = 1e-3
  config.weight_decay = 0.05
  config.lr_schedule = 'warmup_cosine'
  config.warmup_epochs = 5.0
  config.half_precision = True
  return config

"""ViT-B/16 on ImageNet (TFDS `imagenet2012`) on a TPU pod slice, sharded FSDP.

The same command runs on every worker of the slice; launch/pod.sh starts it
(with jax.distributed) on all of them:

    launch/pod.sh --tpu_name=NAME run -- \
        python -m recipes.train --config=configs/imagenet_vit_b16_pod.py \
        --workdir=gs://BUCKET/imagenet_vit_b16 --config.data_dir=gs://BUCKET/tfds

TFDS cannot download ImageNet: prepare `imagenet2012` from the manual
download first (see the TFDS catalog) into `data_dir`. The mesh is
fsdp=-1: the batch, the parameters and the optimizer state are split over
every chip of the slice (fully sharded data parallelism, as big_vision's
ViT configs do), so per-chip parameter and Adam memory falls with the
slice size. For tensor parallelism on top, e.g. `--config.mesh.fsdp=-1
--config.mesh.tensor=4` (12 heads and 3072 MLP features split 4 ways).

Inception-style random-resized crops with flips at 224x224, center-crop
evaluation, bfloat16 computation, AdamW (learning rate 1e-3, weight decay
0.1), global batch 4096, 10 warmup epochs and cosine decay over 300 epochs.
Expected: Dosovitskiy et al. 2021 report 77.9% top-1 for ViT-B/16 trained on
ImageNet-1k alone (with dropout, fine-tuned at 384px); with crop + flip only
and no dropout, expect a few points less, and the DeiT recipe's stronger
augmentation (81.8%) is not implemented. Time: not measured yet.
"""

import ml_collections

from configs import default


def get_config():
  config = default.get_config()
  config.strategy = 'sharded'
  config.mesh.data = 1
  config.mesh.fsdp = -1
  config.mesh.tensor = 1
  config.model = 'vit_b16'
  config.dataset = 'imagenet2012'
  config.eval_split = 'validation'
  config.augment = 'imagenet'
  config.normalize = 'imagenet'
  config.image_size = 224
  # The model follows --config.image_size (a reference, not a copy).
  config.model_kwargs = ml_collections.ConfigDict(
      {'image_size': config.get_ref('image_size')})
  config.half_precision = True
  config.batch_size = 4096
  config.num_epochs = 300.0
  config.optimizer = 'adamw'
  config.learning_rate = 1e-3
  config.weight_decay = 0.1
  config.lr_schedule = 'warmup_cosine'
  config.warmup_epochs = 10.0
  config.log_every_steps = 100
  config.eval_every_steps = 0
  return config

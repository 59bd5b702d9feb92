"""ResNet-50 on ImageNet (TFDS `imagenet2012`) for a TPU slice, pmap recipe.

    python -m recipes.train --config=configs/imagenet_resnet50_tpu.py \
        --workdir=gs://BUCKET/imagenet_resnet50 --config.data_dir=gs://BUCKET/tfds

TFDS cannot download ImageNet: prepare `imagenet2012` from the manual
download first (see the TFDS catalog) into `data_dir`. Inception-style
random-resized crops with flips at 224x224, center-crop evaluation, bfloat16
computation, SGD with momentum 0.9 and weight decay 1e-4, global batch 1024,
learning rate 0.1 x batch / 256 with 5 warmup epochs and cosine decay over
100 epochs. Expected: about 76% top-1 (Goyal et al. 2017 report 76.3% for this
batch-size/learning-rate rule; the Flax ImageNet example reports about 76% for
100 epochs). Time: not measured yet.
"""

from configs import default


def get_config():
  config = default.get_config()
  config.model = 'resnet50'
  config.dataset = 'imagenet2012'
  config.eval_split = 'validation'
  config.augment = 'imagenet'
  config.normalize = 'imagenet'
  config.image_size = 224
  config.half_precision = True
  config.batch_size = 1024
  config.num_epochs = 100.0
  config.optimizer = 'sgd'
  config.learning_rate = 0.1 * config.batch_size / 256
  config.momentum = 0.9
  config.weight_decay = 1e-4
  config.lr_schedule = 'warmup_cosine'
  config.warmup_epochs = 5.0
  config.log_every_steps = 100
  config.eval_every_steps = 0
  return config

"""ViT-B/16 fine-tuned on ImageNet (TFDS `imagenet2012`) from Google's AugReg
ImageNet-21k weights, at 384x384.

Download the pre-trained checkpoint (391 MiB) from Google's public bucket,
https://storage.googleapis.com/vit_models/augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0.npz
(gs://vit_models/augreg/...; google-research/vision_transformer README.md
lists the others), convert it for 384x384 images, then fine-tune:

    python -m recipes.convert --source=big_vision --image_size=384 \
        B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0.npz \
        /tmp/vit_b16_i21k_384
    python -m recipes.train --config=configs/imagenet_vit_b16_finetune.py \
        --workdir=gs://BUCKET/imagenet_vit_b16_finetune \
        --config.data_dir=gs://BUCKET/tfds \
        --config.init_from=/tmp/vit_b16_i21k_384

TFDS cannot download ImageNet: prepare `imagenet2012` from the manual
download first (see the TFDS catalog) into `data_dir`. `init_from` defaults
to the converted directory of the first command. Every weight comes from the
checkpoint except the classifier head (21,843 ImageNet-21k classes there,
1,000 here), which starts at zero as in the source (the log lists it); the
position embedding was resized from 14x14 to 24x24 patches by the convert
command (bilinear, as vit_jax/checkpoint.py:236 does).

Reproduces the fine-tuning of google-research/vision_transformer
(vit_jax/configs/common.py with its imagenet2012 preset, and augreg.py, at
c6de1e53, 2024-05-21; files cited are under vit_jax/ there).

Expected: 85.49% top-1 on the ImageNet validation set (README.md:218, the
AugReg table: B/16 from i21k-300ep, fine-tuned 20k steps at learning rate
0.03 and resolution 384; Steiner et al. 2021, "How to train your ViT?",
arXiv:2106.10270). Not measured here. Differences from the source we cannot
match are marked DIFFERS there; the largest is the evaluation crop.

Every hyperparameter next to the source's, with file and line:
docs/provenance/vit_b16_finetune.md.
"""

import ml_collections

from recipes.config import defaults


def get_config():
  config = defaults.get_config()
  config.model = 'vit_b16'
  config.dataset = 'imagenet2012'
  config.train_split = 'train[:99%]'
  config.eval_split = 'validation'
  config.augment = 'imagenet'
  config.normalize = 'minus_one_to_one'
  config.image_size = 384
  # vision_transformer's crop: 5-100% of the area.
  config.crop_area_min = 0.05
  # What the converted checkpoint needs (python -m recipes.convert prints them):
  # the model follows --config.image_size (a reference, not a copy).
  config.model_kwargs = ml_collections.ConfigDict({
      'patch_size': 16, 'image_size': config.get_ref('image_size'),
      'gelu': 'tanh', 'pool': 'token', 'posemb': 'learn', 'pre_logits': 0,
      'dropout_rate': 0.0})
  config.init_from = '/tmp/vit_b16_i21k_384'
  # jax.jit over a data-parallel mesh (the source's pmap computes the same
  # update: no batch norm, no dropout).
  config.strategy = 'sharded'
  config.batch_size = 512
  config.num_train_steps = 20_000
  config.optimizer = 'sgd'
  config.momentum = 0.9
  config.learning_rate = 0.03
  config.lr_schedule = 'warmup_cosine'
  config.warmup_steps = 500
  config.grad_clip_norm = 1.0
  config.eval_every_steps = 2_000
  config.checkpoint_every_steps = 2_000
  return config

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
c6de1e53, 2024-05-21; files below are under vit_jax/ there).

Expected: 85.49% top-1 on the ImageNet validation set (README.md:218, the
AugReg table: B/16 from i21k-300ep, fine-tuned 20k steps at learning rate
0.03 and resolution 384; Steiner et al. 2021, "How to train your ViT?",
arXiv:2106.10270). Not measured here. Differences from the source we cannot
match are marked DIFFERS below; the largest is the evaluation crop.

Hyperparameter  | vision_transformer (file:line)  | This config (field=value)
--------------- | ------------------------------- | -----------------------------------------
model           | ViT-B/16, class token, no       | model='vit_b16',
                | representation layer            | model_kwargs.patch_size=16,
                | (configs/models.py:113-127)     | model_kwargs.pool='token',
                |                                 | model_kwargs.posemb='learn',
                |                                 | model_kwargs.pre_logits=0
GELU            | nn.gelu, Flax's tanh            | model_kwargs.gelu='tanh'
                | approximation                   |
                | (models_vit.py:90)              |
dropout         | 0 while fine-tuning             | model_kwargs.dropout_rate=0.0
                | (configs/augreg.py:54)          |
initial weights | the AugReg i21k checkpoint;     | init_from='/tmp/vit_b16_i21k_384'; the
                | head from the fresh model, zero | converted checkpoint; the head is left
                | (checkpoint.py:189;             | to the model's zero initialization
                | models_vit.py:306)              |
train split     | train[:99%]                     | dataset='imagenet2012',
                | (configs/common.py:101-105)     | train_split='train[:99%]'; 1,268,355
                |                                 | examples, 2,477 steps per epoch
eval split      | validation                      | eval_split='validation'
                | (configs/common.py:104)         |
resolution      | 384 (configs/common.py:105)     | image_size=384,
                |                                 | model_kwargs.image_size=384; a reference
                |                                 | to image_size
train crops     | random crop of 5-100% of the    | augment='imagenet'; DIFFERS: 8-100% of
                | area, resized to 384, flip      | the area, aspect 3/4-4/3, bicubic
                | (input_pipeline.py:199-211)     |
eval images     | whole image resized to 384x384  | —; DIFFERS: central crop of 384/416 of
                | (input_pipeline.py:213)         | the shorter side, resized to 384x384
value range     | (x - 127.5) / 127.5, [-1, 1]    | normalize='minus_one_to_one'
                | (input_pipeline.py:214)         |
batch           | 512 (configs/common.py:48)      | batch_size=512
steps           | 20,000                          | num_train_steps=20_000, num_epochs=10.0;
                | (configs/common.py:101)         | num_epochs unused (steps win)
optimizer       | SGD, momentum 0.9 in bfloat16   | optimizer='sgd', momentum=0.9; DIFFERS:
                | (train.py:138-145;              | momentum in float32
                | configs/common.py:43)           |
learning rate   | 0.03 (configs/common.py:64;     | learning_rate=0.03
                | README.md:218: lr_0.03)         |
schedule        | linear warmup over 500 steps,   | lr_schedule='warmup_cosine',
                | then cosine to 0                | warmup_epochs=500/2477; 500 steps of 2,477
                | (configs/common.py:66-68;       | per epoch
                | utils.py:57-94)                 |
weight decay    | none (train.py:138-145)         | weight_decay=0.0
label smoothing | none: one-hot targets           | label_smoothing=0.0
                | (input_pipeline.py:215;         |
                | train.py:48-50)                 |
gradient clip   | global norm 1.0                 | grad_clip_norm=1.0
                | (configs/common.py:41;          |
                | train.py:140)                   |
accumulation    | 8 micro-batches, for memory     | —; the same update in one batch; set
                | (configs/common.py:45)          | --config.grad_accum_steps=8 where memory
                |                                 | is short
precision       | float32 (models_vit.py:70, 120) | half_precision=False
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
  # What the converted checkpoint needs (python -m recipes.convert prints them):
  # the model follows --config.image_size (a reference, not a copy).
  config.model_kwargs = ml_collections.ConfigDict({
      'patch_size': 16, 'image_size': config.get_ref('image_size'),
      'gelu': 'tanh', 'pool': 'token', 'posemb': 'learn', 'pre_logits': 0,
      'dropout_rate': 0.0})
  config.init_from = '/tmp/vit_b16_i21k_384'
  config.batch_size = 512
  config.num_train_steps = 20_000
  config.optimizer = 'sgd'
  config.momentum = 0.9
  config.learning_rate = 0.03
  config.lr_schedule = 'warmup_cosine'
  config.warmup_epochs = 500 / 2477
  config.grad_clip_norm = 1.0
  config.eval_every_steps = 2_000
  config.checkpoint_every_steps = 2_000
  return config

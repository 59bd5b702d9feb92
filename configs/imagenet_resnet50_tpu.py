"""ResNet-50 on ImageNet (TFDS `imagenet2012`) for a TPU slice: Flax's ImageNet example.

    python -m recipes.train --config=configs/imagenet_resnet50_tpu.py \
        --workdir=gs://BUCKET/imagenet_resnet50 --config.data_dir=gs://BUCKET/tfds

TFDS cannot download ImageNet: prepare `imagenet2012` from the manual
download first (see the TFDS catalog) into `data_dir`.

Reproduces the recipe of google/flax examples/imagenet (files below are under
that folder, at google/flax@18f8f311, 2026-07-02): configs/default.py and
configs/tpu.py, with train.py, models.py and input_pipeline.py. The learning
rate follows the example's rule, 0.1 x batch_size / 256 (train.py:344); our
learning_rate does not rescale itself, so set both when changing the batch.

Expected: about 76.5% top-1 on the validation set after 100 epochs (125,100
steps). The example's README.md:44-46 reports 76.37% on TPU v3-8 (4.4 h),
76.54% on v3-32 (2.1 h) and 76.67% on v2-32 (2.5 h), all 125,100 steps, i.e.
batch 1024 (its pod command line, README.md:196, sets batch 32 x 256, which
would be 15,600 steps; the README's step counts imply 1024). Not measured
here.

Hyperparameter  | Flax example (file:line)       | This config (field=value)
--------------- | ------------------------------ | ----------------------------------------
dataset         | imagenet2012:5.*.*, train /    | dataset='imagenet2012',
                | validation                     | train_split='train',
                | (configs/default.py:26,        | eval_split='validation'
                | input_pipeline.py:211-220)     |
batch           | 1024 on TPU v3-8               | batch_size=1024
                | (configs/tpu.py:25)            |
learning rate   | 0.1 x batch/256 = 0.4          | learning_rate=0.1*1024/256
                | (configs/default.py:28,        |
                | train.py:344)                  |
warmup          | linear from 0 over 5 epochs    | warmup_epochs=5.0
                | (configs/default.py:29,        |
                | train.py:96-100)               |
schedule        | cosine to 0 over the remaining | lr_schedule='warmup_cosine'
                | 95 epochs (train.py:101-108)   |
epochs          | 100 (configs/default.py:35)    | num_epochs=100.0
steps           | 1281167 // 1024 x 100 = 125100 | —; ours: floor(1281167/1024) x 100 =
                | (train.py:325-332;             | 125100 steps
                | README.md:44-46)               |
optimizer       | optax.sgd (train.py:253-257)   | optimizer='sgd'
momentum        | 0.9 (configs/default.py:30)    | momentum=0.9
Nesterov        | nesterov=True (train.py:256)   | nesterov=True; the old config had plain
                |                                | momentum
weight decay    | 1e-4 x 0.5 x sum(w**2) added   | weight_decay=1e-4; ours adds 1e-4 x w to
                | to the loss, over params with  | the gradients of the params named
                | ndim > 1: conv and dense       | 'kernel' (all of those with ndim > 1)
                | kernels, not biases or BN      | before SGD: the same update on the same
                | scale/bias (train.py:123-129)  | params
label smooth    | none: plain softmax            | label_smoothing=0.0
                | cross-entropy (train.py:73-76) |
dtype           | bfloat16 on TPU, float16 on    | half_precision=True,
                | GPU (configs/tpu.py:28,        | half_precision_dtype='bfloat16'
                | train.py:50-59, 295-301)       |
loss scaling    | dynamic loss scale with        | —; ours: dynamic loss scaling whenever
                | float16 on GPU only            | half_precision_dtype is float16
                | (train.py:136-146, 247-250)    |
train crop      | distorted bbox: area 8-100%,   | augment='imagenet', image_size=224;
                | aspect 3/4-4/3, min object     | DIFFERS: when no crop is found Flax
                | 0.1, 10 attempts, bicubic      | falls back to the eval center crop
                | resize to 224                  | (input_pipeline.py:104-111), ours
                | (input_pipeline.py:80-113)     | resizes the whole image
flip            | random left-right              | —; part of augment='imagenet'
                | (input_pipeline.py:163)        |
eval crop       | center crop 224/(224+32) of    | —; part of augment='imagenet': the same
                | the shorter side, bicubic      |
                | resize to 224                  |
                | (input_pipeline.py:116-141)    |
mean/std        | ImageNet mean/std x 255 on     | normalize='imagenet'; the same on 0-1
                | 0-255 pixels                   | pixels
                | (input_pipeline.py:24-25,      |
                | 144-147)                       |
eval set        | 50000 // batch full batches    | —; DIFFERS: ours evaluates all 50,000
                | (train.py:334-340,             | validation images; Flax drops the last
                | input_pipeline.py:247)         | partial batch (49,152 of 50,000 at batch
                |                                | 1024)
model           | ResNet50 v1.5, stride on the   | model='resnet50'
                | 3x3 conv                       |
                | (configs/default.py:24,        |
                | models.py:60-143)              |
padding         | stem 7x7/2 pad 3, other convs  | model_kwargs.padding='same'
                | 'SAME', max pool 3x3/2 'SAME'  |
                | (models.py:113-122)            |
initializers    | Flax defaults: lecun_normal    | model_kwargs.kernel_init='lecun_normal'
                | conv and dense kernels, zero   |
                | dense bias, no conv bias       |
                | (models.py:103, 134)           |
BN statistics   | momentum 0.9, epsilon 1e-5     | —; zoo/layers.py batch_norm: the same
                | (models.py:104-110)            |
cross-dev BN    | axis_name='batch' over all     | cross_device_batch_norm=True
                | devices, batch_stats pmean     |
                | (models.py:110, train.py:153)  |
zero-init BN    | last BN scale of each block    | model_kwargs.zero_init_last_bn=True
                | starts at 0 (models.py:49, 79) |
seed            | random.key(0) (train.py:285)   | seed=0
"""

import ml_collections

from recipes.config import defaults


def get_config():
  config = defaults.get_config()
  config.model = 'resnet50'
  # Flax's ResNet: 'SAME' padding, lecun_normal kernels, zero-init last BN.
  config.model_kwargs = ml_collections.ConfigDict(dict(
      padding='same', kernel_init='lecun_normal', zero_init_last_bn=True))
  config.dataset = 'imagenet2012'
  config.train_split = 'train'
  config.eval_split = 'validation'
  config.augment = 'imagenet'
  config.normalize = 'imagenet'
  config.image_size = 224
  config.half_precision = True
  config.half_precision_dtype = 'bfloat16'
  config.batch_size = 1024
  config.num_epochs = 100.0
  config.optimizer = 'sgd'
  config.learning_rate = 0.1 * config.batch_size / 256
  config.momentum = 0.9
  config.nesterov = True
  config.weight_decay = 1e-4
  config.label_smoothing = 0.0
  config.lr_schedule = 'warmup_cosine'
  config.warmup_epochs = 5.0
  config.cross_device_batch_norm = True
  config.seed = 0
  config.log_every_steps = 100
  config.eval_every_steps = 0
  return config

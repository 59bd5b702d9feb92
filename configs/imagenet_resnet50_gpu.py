"""ResNet-50 on ImageNet (TFDS `imagenet2012`) on one 8-GPU machine: Flax's v100_x8.

    python -m recipes.train --config=configs/imagenet_resnet50_gpu.py \
        --workdir=/tmp/imagenet_resnet50 --config.data_dir=/data/tfds

Prepare `imagenet2012` in `data_dir` from the manual download first.
Reproduces google/flax examples/imagenet configs/v100_x8.py (google/flax@18f8f311):
the recipe of configs/imagenet_resnet50_tpu.py at global batch 512 (64 per
GPU), learning rate 0.1 x 512 / 256 = 0.2, in float32, the run its README
reports at 76.72%.

Expected: about 76.7% top-1 after 100 epochs (250,200 steps): the example's
README.md:47 reports 76.72% for v100_x8 (float32, batch 512) in 13.2 h on
8 x V100. Its other GPU run, configs/v100_x8_mixed_precision.py (float16 with
dynamic loss scaling, batch 2048, learning rate 0.8, 62,500 steps), reached
76.27% in 4.3 h (README.md:48); to follow that one instead add
`--config.batch_size=2048 --config.learning_rate=0.8
--config.half_precision=True --config.half_precision_dtype=float16`.
On Ampere and later GPUs XLA runs float32 convolutions and matmuls in TF32 by
default; V100s have no TF32. Time here: not measured; the input pipeline
decodes JPEGs on the host CPUs, which often limits GPU throughput.

Hyperparameter  | Flax example (file:line)       | This config (field=value)
--------------- | ------------------------------ | ----------------------------------------
dataset         | imagenet2012:5.*.*, train /    | dataset='imagenet2012',
                | validation                     | train_split='train',
                | (configs/default.py:26,        | eval_split='validation'
                | input_pipeline.py:211-220)     |
batch           | 512 on 8 GPUs                  | batch_size=512
                | (configs/v100_x8.py:25)        |
learning rate   | 0.1 x batch/256 = 0.2          | learning_rate=0.1*512/256
                | (configs/default.py:28,        |
                | train.py:344)                  |
warmup          | linear from 0 over 5 epochs    | warmup_epochs=5.0
                | (configs/default.py:29,        |
                | train.py:96-100)               |
schedule        | cosine to 0 over the remaining | lr_schedule='warmup_cosine'
                | 95 epochs (train.py:101-108)   |
epochs          | 100 (configs/default.py:35)    | num_epochs=100.0
steps           | 1281167 // 512 x 100 = 250200  | —; ours: floor(1281167/512) x 100 =
                | (train.py:325-332;             | 250200 steps
                | README.md:47)                  |
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
dtype           | float32: half_precision False  | half_precision=False; the 76.72% run;
                | (configs/default.py:39, not    | v100_x8_mixed_precision.py (batch 2048,
                | set in configs/v100_x8.py)     | float16) is the 76.27% run
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

from configs import imagenet_resnet50_tpu


def get_config():
  config = imagenet_resnet50_tpu.get_config()
  config.batch_size = 512
  config.learning_rate = 0.1 * config.batch_size / 256
  config.half_precision = False  # v100_x8 trains in float32.
  return config

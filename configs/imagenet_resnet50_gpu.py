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

Every hyperparameter next to the source's, with file and line:
docs/provenance/imagenet_resnet50.md.
"""

from configs import imagenet_resnet50_tpu


def get_config():
  config = imagenet_resnet50_tpu.get_config()
  config.batch_size = 512
  config.learning_rate = 0.1 * config.batch_size / 256
  config.half_precision = False  # v100_x8 trains in float32.
  return config

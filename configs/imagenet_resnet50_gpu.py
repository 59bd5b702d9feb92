"""ResNet-50 on ImageNet (TFDS `imagenet2012`) for one 8-GPU machine, pmap recipe.

    python -m recipes.train --config=configs/imagenet_resnet50_gpu.py \
        --workdir=/tmp/imagenet_resnet50 --config.data_dir=/data/tfds

The TPU recipe (configs/imagenet_resnet50_tpu.py) with global batch 512
(64 per GPU on 8 GPUs) and the learning rate scaled to 0.2. bfloat16
computation on Ampere/Hopper GPUs. Prepare `imagenet2012` in `data_dir` from
the manual download first. Expected: about 76% top-1 after 100 epochs (same
sources as the TPU config). Time: not measured yet; the input pipeline
decodes JPEGs on the host CPUs, which often limits GPU throughput.
"""

from configs import imagenet_resnet50_tpu


def get_config():
  config = imagenet_resnet50_tpu.get_config()
  config.batch_size = 512
  config.learning_rate = 0.1 * config.batch_size / 256
  return config

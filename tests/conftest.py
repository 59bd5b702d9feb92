"""Every test runs on the CPU with 8 simulated devices, set before JAX loads."""

import os

os.environ['JAX_PLATFORMS'] = 'cpu'
os.environ['JAX_NUM_CPU_DEVICES'] = '8'
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# jax 0.12's CPU compiler miscompiles some bfloat16 conv nets (NaN logits for
# resnet20/wrn28_10) through its YNNPACK fusion; jax 0.10 ignores the flag.
os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           ' --xla_cpu_experimental_ynn_fusion_type=')

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

from tests.helpers import write_fashion_mnist  # pylint: disable=g-import-not-at-top,wrong-import-position

jax.config.update('jax_num_cpu_devices', 8)


@pytest.fixture(scope='session')
def data_dir(tmp_path_factory):
  """Fashion-MNIST-shaped IDX files of random images: 64 to train, 16 to
  test (a test file may define its own)."""
  path = tmp_path_factory.mktemp('data')
  write_fashion_mnist(str(path), num_train=64, num_test=16)
  return str(path)

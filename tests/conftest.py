"""Every test runs on the CPU with 8 simulated devices, set before JAX loads."""

import os

os.environ['JAX_PLATFORMS'] = 'cpu'
os.environ['JAX_NUM_CPU_DEVICES'] = '8'
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position

jax.config.update('jax_num_cpu_devices', 8)

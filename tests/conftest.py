"""Every test runs on the CPU with 8 simulated devices, set before JAX loads."""

import atexit
import gc
import importlib.metadata
import os
import shutil
import subprocess
import tempfile


def _jaxlib_version() -> tuple[int, ...]:
  """jaxlib's (major, minor), read without loading it."""
  return tuple(int(part) for part in
               importlib.metadata.version('jaxlib').split('.')[:2])


os.environ['JAX_PLATFORMS'] = 'cpu'
os.environ['JAX_NUM_CPU_DEVICES'] = '8'
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# jax 0.12's CPU compiler miscompiles some bfloat16 conv nets (NaN logits for
# resnet20/wrn28_10) through its YNNPACK fusion; jax 0.10 ignores the flag.
_COMMAND_XLA_FLAGS = ' '.join([os.environ.get('XLA_FLAGS', ''),
                               '--xla_cpu_experimental_ynn_fusion_type='])
_IN_PROCESS_XLA_FLAGS = []
if _jaxlib_version() < (0, 11):
  # jaxlib 0.10's XLA:CPU compiles the suite's tiny programs 2-3x faster with
  # its older loop emitters (a test-size ResNet-50 step: 5.6 -> 2.7 s); later
  # jaxlibs have only the new ones and refuse the flag. With them, LLVM at -O2
  # rather than XLA's -O3 compiles random-number code (initial states,
  # dropout) 2-3x quicker (the text classifier's step: 18.8 -> 8.3 s); jaxlib
  # 0.12 gains nothing from it. Both change the last bits of some results:
  # the tests compare bits only between runs made under the same flags
  # (runs in this process with each other, commands with each other). The
  # commands the tests start keep XLA's defaults, as users run them: their
  # runs of real size train quicker with the newer emitters than they compile
  # slower (the text tests and test_pretrained.py, 197 -> 171 s of CPU).
  _IN_PROCESS_XLA_FLAGS = ['--xla_cpu_use_fusion_emitters=false',
                           '--xla_backend_optimization_level=2']
os.environ['XLA_FLAGS'] = ' '.join([_COMMAND_XLA_FLAGS,
                                    *_IN_PROCESS_XLA_FLAGS])
# Many tests compile the same steps: one compilation cache for each pytest
# process (each pytest-xdist worker makes its own), shared with the commands
# its tests start (they inherit the environment).
_CACHE = tempfile.mkdtemp(prefix='jax-cache-')
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ['JAX_COMPILATION_CACHE_DIR'] = _CACHE
os.environ['JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS'] = '0'
os.environ['JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES'] = '0'
# The libraries and the test modules a worker loads are about 600,000 objects
# that stay. The garbage collector's full passes over them cost each worker
# 14 s of the fast tier, 2.7 s of it while they load: collection is off until
# pytest has collected the tests, then what loaded is frozen out of it
# (pytest_collection below), as the commands do (recipes/runtime/startup.py).
gc.disable()

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

from tests.idx_files import write_fashion_mnist  # pylint: disable=g-import-not-at-top,wrong-import-position

jax.config.update('jax_num_cpu_devices', 8)
jax.devices()  # XLA reads XLA_FLAGS once, as the backend starts.
os.environ['XLA_FLAGS'] = _COMMAND_XLA_FLAGS


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
  del session
  yield
  gc.freeze()
  gc.enable()


@pytest.fixture(scope='module', autouse=True)
def _compiled_programs_freed_after_each_module():
  """JAX keeps every program it compiled while its function lives, and each
  compiled XLA:CPU program holds a few of the process's memory mappings. A
  pytest worker that kept them all headed for Linux's limit of 65,530
  (vm.max_map_count), and XLA segfaulted compiling or serializing programs
  late in the suite until they were freed. Each module's programs are freed
  when it ends (later modules read the compilation cache). A full garbage
  collection, for programs held in reference cycles, costs about 0.3 s in a
  worker's heap: it runs once the mappings are many."""
  yield
  jax.clear_caches()
  if _memory_mappings() > _MAPPINGS_BEFORE_COLLECTING:
    gc.collect()


# A third of Linux's limit: one module adds up to 14,000 (test_zoo.py).
_MAPPINGS_BEFORE_COLLECTING = 20_000


def _memory_mappings() -> int:
  """This process's memory mappings; where Linux's count is not there to
  read, as if over the limit."""
  try:
    with open('/proc/self/maps', 'rb') as f:
      return sum(1 for _ in f)
  except OSError:
    return 1 << 30


@pytest.fixture(scope='module')
def fast_compiles():
  """XLA without most optimizations, for a module of tiny models where
  compiling takes longer than running and the numbers need no speed.

  Those programs are not written to the compilation cache: serializing them
  (`executable.serialize()`, on the way into the cache) crashed jax 0.10's
  CPU runtime with a segfault now and then.
  """
  before = (jax.config.read('jax_disable_most_optimizations'),
            # (jax 0.12's config.read refuses this one.)
            jax.config.jax_persistent_cache_min_compile_time_secs)
  jax.config.update('jax_disable_most_optimizations', True)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 1e9)
  yield
  jax.config.update('jax_disable_most_optimizations', before[0])
  jax.config.update('jax_persistent_cache_min_compile_time_secs', before[1])


@pytest.fixture(scope='session')
def data_dir(tmp_path_factory):
  """Fashion-MNIST-shaped IDX files of random images: 64 to train, 16 to
  test (a test file may define its own)."""
  path = tmp_path_factory.mktemp('data')
  write_fashion_mnist(str(path), num_train=64, num_test=16)
  return str(path)


@pytest.fixture(autouse=True)
def _fast_tier_starts_no_processes(request, monkeypatch):
  """Tests outside the slow tier start no process (the fast tier's promise):
  one that does fails here, and belongs under @pytest.mark.slow."""
  if request.node.get_closest_marker('slow'):
    return

  def refuse(self, args, *rest, **kwargs):
    del self, rest, kwargs
    pytest.fail(f'{request.node.nodeid} starts a process ({args!r}); mark '
                'it @pytest.mark.slow', pytrace=False)

  monkeypatch.setattr(subprocess.Popen, '__init__', refuse)

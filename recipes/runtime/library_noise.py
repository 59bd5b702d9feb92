"""Keeps the libraries' start-up notices out of the log; their warnings stay.

- TensorFlow writes C++ notices to stderr while it loads (the oneDNN notice
  once per shared library, each after absl's "All log messages before
  absl::InitializeLog() ..."), before any setting can stop them: TensorFlow
  2.21 shows them whatever TF_CPP_MIN_LOG_LEVEL says. `import_tensorflow`
  loads it with stderr caught and passes on every other line.
- libtpu, where it is installed on a machine without TPUs (the `tpu`
  extra, to compile for a TPU slice: recipes/compile.py), writes a block
  to stderr each time it is loaded, saying it found no TPU (E0000 ...
  INVALID_ARGUMENT ... TPU_WORKER_HOSTNAMES), before any of its log
  settings (TPU_MIN_LOG_LEVEL, TPU_STDERR_LOG_LEVEL) are read.
  `skip_tpu_where_there_is_none` keeps JAX from loading it to look for
  TPUs where JAX found none (every command runs it: recipes/__init__.py);
  `stderr_without_no_tpu_notices` drops the block where the compile loads
  libtpu for a slice's compile-only devices (recipes/aot/topology.py).
- JAX logs at INFO each backend it could not start ("Unable to initialize
  backend 'tpu'"), orbax every checkpoint read and write, optax a warmup of
  zero steps, CLU's platform an "artifact" for each profile trace:
  `LibraryNoise` keeps their warnings only.
- orbax logs a failed save or read as errors with long tracebacks, from
  each of its threads, before the recipe reports the same failure itself in
  one line (recipes/checkpoint/store.py): `LibraryNoise` keeps those for the
  debug log too. After such a failure TensorStore's callbacks find orbax's
  event loop closed, and Python prints a traceback for each;
  `ignore_closed_event_loops` sends those to the debug log.
"""

import contextlib
import importlib.util
import logging
import os
import re
import sys
import tempfile
import traceback

import jax
import jax.extend

_TENSORFLOW_NOTICES = re.compile(
    r'All log messages before absl::InitializeLog\(\) is called are written '
    r'to STDERR|\] oneDNN custom operations are on\.|'
    # With TF_ENABLE_ONEDNN_OPTS=0, a two-line notice in the oneDNN one's place.
    r'\] This TensorFlow binary is optimized to use available CPU '
    r'instructions|^To enable the following instructions: .* rebuild '
    r'TensorFlow with the appropriate compiler flags\.')


# libtpu on a machine without TPUs: its notice that it found none, in lines
# of their own or as part of an error record.
_NO_TPU_NOTICES = re.compile(
    r'could not determine TPU|Logging before InitGoogle\(\) is written to '
    r'STDERR|^=== Source Location Trace: ===$|libtpu_init_utils\.cc:\d+$')


@contextlib.contextmanager
def _stderr_without(notices: re.Pattern):
  """Catches what is written to stderr (file descriptor 2, so also C++'s
  writes) inside the block, and passes on the lines `notices` does not
  match."""
  sys.stderr.flush()
  stderr = os.dup(2)
  # A file, not a pipe: nothing reads while the block runs.
  with tempfile.TemporaryFile() as caught:
    os.dup2(caught.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(stderr, 2)
      os.close(stderr)
      caught.seek(0)
      lines = caught.read().decode(errors='replace').splitlines(keepends=True)
      sys.stderr.write(''.join(
          line for line in lines if not notices.search(line.strip())))
      sys.stderr.flush()


# What TensorFlow's Keras imports where it is installed, for what the recipes
# never ask of Keras: pandas and matplotlib (data frames as inputs, image
# plots), the legacy Keras's scipy.sparse (sparse inputs), h5py (models
# saved as HDF5) and IPython (notebook progress bars; a notebook has it
# loaded already). Keras imports each only if it is there. About 0.7 s of a
# command's start, and matplotlib warns on stderr where the home directory
# cannot be written.
_UNUSED_BY_KERAS = ('pandas', 'matplotlib', 'scipy.sparse', 'h5py', 'IPython')


def import_tensorflow():
  """Imports TensorFlow without its start-up notices on stderr, and without
  the packages Keras loads for features the recipes do not use."""
  if 'tensorflow' in sys.modules:
    return
  with _stderr_without(_TENSORFLOW_NOTICES), _as_if_missing(_UNUSED_BY_KERAS):
    # pylint: disable-next=import-outside-toplevel,unused-import
    import tensorflow


@contextlib.contextmanager
def _as_if_missing(names):
  """Inside the block, importing one of the modules `names` not loaded yet
  raises ImportError (a None in sys.modules), as where it is not installed;
  after it, they import as usual."""
  hidden = [name for name in names if name not in sys.modules]
  for name in hidden:
    sys.modules[name] = None
  try:
    yield
  finally:
    for name in hidden:
      if sys.modules.get(name, ()) is None:
        del sys.modules[name]


def stderr_without_no_tpu_notices():
  """A context in which libtpu's notice that this machine has no TPU is
  kept out of stderr (everything else written there passes)."""
  return _stderr_without(_NO_TPU_NOTICES)


def skip_tpu_where_there_is_none():
  """Keeps JAX from loading libtpu to look for TPUs on a machine where it
  found none.

  `import jax` decides whether this is a Cloud TPU VM (TPU chips on the PCI
  bus, or JAX_FORCE_TPU_INIT) and there sets jax_platforms to 'tpu,cpu'.
  Elsewhere, unless the user names the platforms (JAX_PLATFORMS), JAX still
  tries every backend it knows when it starts them, the TPU's too: libtpu
  loads (about 1.5 s), writes its block and finds nothing. Here that backend
  fails at once, as JAX's CUDA backend does on a machine without an NVIDIA
  GPU; JAX logs it at INFO. Compiling for a TPU slice (recipes/aot/) asks
  libtpu for its devices another way, which this leaves alone.
  """
  if jax.config.jax_platforms:  # A TPU VM, or the user's choice.
    return

  def no_tpu():
    raise RuntimeError('JAX found no TPU on this machine (JAX_PLATFORMS=tpu '
                       'makes it load libtpu all the same)')

  # JAX's own priority and leniency for the TPU backend (xla_bridge.py).
  jax.extend.backend.register_backend_factory('tpu', no_tpu, priority=300,
                                              fail_quietly=True)


def _package_dirs(*names: str) -> tuple[str, ...]:
  """The directories of the packages' files, each ending in a separator."""
  dirs = []
  for name in names:
    spec = importlib.util.find_spec(name)
    locations = spec.submodule_search_locations if spec else None
    dirs += [os.path.join(path, '') for path in locations or ()]
  return tuple(dirs)


class LibraryNoise(logging.Filter):
  """Drops JAX's, orbax's, optax's, fsspec's, gcsfs's and CLU platform's
  log records below WARNING, and the storage libraries' errors that carry a
  traceback (orbax's failed saves, gcsfs's requests out of retries, and
  asyncio's "Future exception was never retrieved" of the writes that failed
  beside the one reported): the recipe reports the failure itself, in one
  line."""

  def __init__(self):
    super().__init__()
    # fsspec and gcsfs log every file they open (buckets, emulators).
    self._sources = _package_dirs('jax', 'orbax', 'optax', 'fsspec', 'gcsfs',
                                  'clu.platform')
    self._storage = _package_dirs('orbax', 'fsspec', 'gcsfs')
    self._asyncio = _package_dirs('asyncio')

  def filter(self, record):
    if record.exc_info and record.pathname.startswith(self._asyncio):
      return not self._raised_in_storage(record.exc_info[2])
    if not record.pathname.startswith(self._sources):
      return True
    if record.exc_info and record.pathname.startswith(self._storage):
      return False
    return record.levelno >= logging.WARNING

  def _raised_in_storage(self, trace) -> bool:
    return any(frame.f_code.co_filename.startswith(self._storage)
               for frame, _ in traceback.walk_tb(trace))


def keep_out(*handlers: logging.Handler):
  """What a command does to keep the noise out of its log: the filter on
  `handlers`, and closed event loops to the debug log."""
  for handler in handlers:
    handler.addFilter(LibraryNoise())
  ignore_closed_event_loops()


def ignore_closed_event_loops():
  """Callbacks' errors on finding an asyncio event loop closed go to the
  debug log; every other error Python cannot raise is printed as before."""
  previous = sys.unraisablehook

  def hook(unraisable):
    if (unraisable.exc_type is RuntimeError
        and str(unraisable.exc_value) == 'Event loop is closed'):
      logging.getLogger(__name__).debug(
          'A callback found an event loop closed (after a failed checkpoint '
          'save or read).', exc_info=(unraisable.exc_type,
                                      unraisable.exc_value,
                                      unraisable.exc_traceback))
      return
    previous(unraisable)

  sys.unraisablehook = hook

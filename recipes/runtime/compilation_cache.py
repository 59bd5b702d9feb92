"""JAX's persistent compilation cache for the recipes' commands: a resumed
or repeated run reads its compiled steps instead of compiling them again
(minutes for a large model on a TPU pod)."""

import os

from absl import logging
import jax

# Beside the other caches of the user's tools (pip's, Hugging Face's).
DEFAULT_DIR = '~/.cache/jax-model-zoo/compilation'


def use(directory: str):
  """Keeps compiled programs in `directory`, before the first compilation.

  Call it after jax.distributed is initialized: it asks how many processes
  the run has.

  Args:
    directory: a local or gs:// directory ('~' is expanded); '' turns the
      cache off. Where the environment sets JAX_COMPILATION_CACHE_DIR, that
      directory is kept (a cluster's shared one, say).
  """
  if directory and _cached_programs_hang():
    if jax.process_index() == 0:
      logging.info('The compilation cache is off: CPU processes that talk '
                   'to each other compile their steps.')
    directory = ''
  if not directory:
    jax.config.update('jax_enable_compilation_cache', False)
  elif not os.environ.get('JAX_COMPILATION_CACHE_DIR'):
    jax.config.update('jax_compilation_cache_dir',
                      os.path.expanduser(directory))


def _cached_programs_hang() -> bool:
  """Whether programs read from the cache would never finish.

  On CPU, with several processes, a step read from the cache waits forever
  in its first collective across processes (gloo); the same step compiled
  in the run works. Seen with jax 0.12.1, not with 0.10.2; such runs are
  small (tests, a laptop), so they always compile. Keeping the cache on
  process 0 alone hangs the same way: one program it reads back is enough.
  """
  return jax.process_count() > 1 and jax.default_backend() == 'cpu'

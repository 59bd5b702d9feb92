"""JAX's persistent compilation cache for the recipes' commands: a resumed
or repeated run reads its compiled steps instead of compiling them again
(minutes for a large model on a TPU pod)."""

import os

import jax

# Beside the other caches of the user's tools (pip's, Hugging Face's).
DEFAULT_DIR = '~/.cache/jax-model-zoo/compilation'


def use(directory: str):
  """Keeps compiled programs in `directory`, before the first compilation.

  Args:
    directory: a local or gs:// directory ('~' is expanded); '' turns the
      cache off. Where the environment sets JAX_COMPILATION_CACHE_DIR, that
      directory is kept (a cluster's shared one, say).
  """
  if not directory:
    jax.config.update('jax_enable_compilation_cache', False)
  elif not os.environ.get('JAX_COMPILATION_CACHE_DIR'):
    jax.config.update('jax_compilation_cache_dir',
                      os.path.expanduser(directory))

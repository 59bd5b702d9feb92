"""Where the recipe reads and writes: local disks and Cloud Storage alike.

Every path a user gives (`--workdir`, `data_dir`, `init_from`) and every
file the recipe writes under it goes through `path()`, an `etils.epath.Path`:
the filesystem layer that orbax and TFDS use too, so `gs://BUCKET/run` is a
bucket for all of them and never a local directory named `gs:`.

Who talks to Cloud Storage, and how each is pointed at a local emulator (a
test server such as `gcp-storage-emulator`, or a dry run without a cloud
account) when `STORAGE_EMULATOR_HOST=http://HOST:PORT` is set:

- epath (our files, TensorBoard event files, orbax's directories and
  metadata, TFDS's metadata) uses TensorFlow's `tf.io.gfile` for `gs://` when
  TensorFlow is installed. That always calls Google's endpoint, so with an
  emulator epath is switched to its fsspec backend (`EPATH_USE_TF=false`),
  whose gcsfs (`pip install gcsfs`; in the test extra) honours
  `STORAGE_EMULATOR_HOST`. gcsfs's probe of the bucket type over gRPC, which
  an emulator does not serve, is switched off
  (`GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`).
- TensorStore (orbax's arrays) is pointed there by `TENSORSTORE_GCS_HTTP_URL`
  and given a placeholder token (`GOOGLE_AUTH_TOKEN_FOR_TESTING`): an emulator
  checks none, and without one TensorStore looks for Google credentials.
- Readers built on TensorFlow's own file system cannot be pointed at an
  emulator: TFDS's example files (read by `tf.data`) and `tensorboard
  --logdir=gs://...` reach only the real Cloud Storage.

Variables the user set themselves are left as they are. Without
`STORAGE_EMULATOR_HOST` nothing changes: real buckets and local disks are
used exactly as the libraries do by default.
"""

import os
import uuid

from etils import epath

from recipes.runtime.errors import UserError

# URL schemes a user may give (etils.epath and fsspec read them); a path that
# starts with one and a colon but not '://' is a mistyped URL.
URL_SCHEMES = ('gs', 'gcs', 's3', 'http', 'https', 'hdfs', 'az', 'abfs',
               'file')


def _route_cloud_storage_to_emulator():
  host = os.environ.get('STORAGE_EMULATOR_HOST', '')
  if host in ('', 'default'):  # gcsfs's spelling of "not set".
    return
  url = host if '://' in host else f'http://{host}'
  os.environ.setdefault('EPATH_USE_TF', 'false')
  os.environ.setdefault('GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT', 'false')
  os.environ.setdefault('TENSORSTORE_GCS_HTTP_URL', url)
  os.environ.setdefault('GOOGLE_AUTH_TOKEN_FOR_TESTING', 'emulator')


# At import, before any library opens a gs:// path: epath decides its backend
# once, and gcsfs reads its setting when it is imported.
_route_cloud_storage_to_emulator()


def path(name: str | os.PathLike) -> epath.Path:
  """`name` (a local path or a URL such as gs://BUCKET/dir) as an epath.Path.

  Args:
    name: a local path (relative, absolute or with ~) or a URL.

  Returns:
    The path; local paths become absolute (orbax requires it), URLs are
    kept as given.

  Raises:
    UserError: for a mistyped URL such as 'gs:/bucket/run' (one slash),
      which would otherwise become a local directory named 'gs:'.
  """
  name = os.fspath(name)
  scheme, colon, rest = name.partition(':')
  if colon and scheme.lower() in URL_SCHEMES and not rest.startswith('//'):
    fixed = f'{scheme}://{rest.lstrip("/")}'
    raise UserError(f'{name!r} looks like a URL with a slash missing; write '
                    f'{fixed!r} (or ./{name} for a local directory of that '
                    'name).')
  if '://' not in name:
    name = os.path.abspath(os.path.expanduser(name))
  return epath.Path(name)


# The suffix of a file being written whole (`write_whole`), beside its name.
PARTIAL = '.partial'


def write_whole(file: epath.Path, text: str):
  """Writes `text` to `file` so that a reader never sees half of it: on a
  disk beside it (FILE.partial), then renamed; a bucket's object appears
  whole anyway.

  Raises:
    OSError: it cannot be written.
  """
  if '://' in os.fspath(file):
    file.write_text(text)
    return
  partial = file.with_name(file.name + PARTIAL)
  partial.write_text(text)
  partial.replace(file)


def create_whole(file: epath.Path, text: str) -> bool | None:
  """Writes `text` to `file` whole, only where no file of that name is.

  On a local disk this is atomic: of processes that create the same file at
  once, one gets True, the others False. It is written beside the name
  first, then hard-linked to it (a link fails where the name exists).

  Returns:
    True: written. False: a file of that name was there first. None: it
    cannot be done atomically here (a bucket, or a disk without hard
    links); nothing was written, and the caller must make sure another way.
  """
  if '://' in os.fspath(file):
    return None
  # A name of its own: a rival's file beside it is never this one.
  partial = file.with_name(f'{file.name}.{uuid.uuid4().hex}{PARTIAL}')
  partial.write_text(text)
  try:
    os.link(partial, file)
  except FileExistsError:
    return False
  except OSError:  # No hard links on this file system.
    return None
  finally:
    partial.unlink(missing_ok=True)
  return True


# Packages whose errors mean the storage service did not answer as it should.
_CLIENT_PACKAGES = ('aiohttp', 'gcsfs', 'google', 'requests', 'urllib3',
                    'fsspec')


def unreachable(error: BaseException) -> bool:
  """Whether `error` (a root cause) says the storage could not be reached:
  a refused or dropped connection, a timeout, an HTTP client's error."""
  return (isinstance(error, (ConnectionError, TimeoutError))
          or type(error).__module__.split('.')[0] in _CLIENT_PACKAGES
          or any(code in str(error) for code in ('UNAVAILABLE',
                                                 'DEADLINE_EXCEEDED')))


def checkpoint_path(name: str | os.PathLike) -> epath.Path:
  """`path(name)` for a directory that orbax checkpoints are written under
  (a workdir, the destination of a conversion).

  Raises:
    UserError: for a name with '[' or ']', which orbax reads as a pattern
      when it assembles a checkpoint: each would be written incomplete.
  """
  name = os.fspath(name)
  if '[' in name or ']' in name:
    suggestion = name.replace('[', '-').replace(']', '')
    raise UserError(f"{name!r} has '[' or ']' in it, which the checkpoint "
                    'library reads as a pattern: its checkpoints would be '
                    'written incomplete. Choose a directory without them, '
                    f'e.g. {suggestion!r}.')
  return path(name)

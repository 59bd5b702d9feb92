"""Downloading a published weights file, checked.

hf://REPO/FILE comes through `huggingface_hub` into Hugging Face's own cache
(HF_HOME, HF_HUB_CACHE; HF_ENDPOINT names another server, e.g. a mirror), so
a file timm already downloaded is not downloaded again. The Hub names each
large file by its SHA-256, which is checked. gs://BUCKET/FILE comes through
etils.epath into `directory`, its size checked against the bucket's. A file
that fails its check is downloaded once more; failing again, or without a
network, is one DownloadError that says what to download by hand.

Every Hub download ends: huggingface_hub retries a dropped connection itself
and starts counting again whenever bytes arrived, so a connection cut every
time was retried forever. Here one download makes at most ATTEMPTS requests
and starts none after SECONDS; then it is one DownloadError (a partial file
stays in Hugging Face's cache, and the next try resumes it). Bucket reads end
by gcsfs's own count (6 tries a request).
"""

import contextvars
import hashlib
import os
import re
import time

from etils import epath

_SHA256 = re.compile(r'^[0-9a-f]{64}$')

# The bounds of one Hub download (its metadata, the file, their retries):
# a healthy one makes 2 to 4 requests.
ATTEMPTS = 10
SECONDS = 60.0


class DownloadError(ValueError):
  """A file that cannot be downloaded or is damaged, in one line."""


def web_address(url: str) -> str:
  """Where a browser downloads `url` from (for the message that asks to).

  Args:
    url: 'hf://REPO/FILE' or 'gs://BUCKET/FILE'.

  Returns:
    Its https:// address.
  """
  if url.startswith('hf://'):
    repo, file = _split_hub(url)
    endpoint = os.environ.get('HF_ENDPOINT', 'https://huggingface.co')
    return f'{endpoint.rstrip("/")}/{repo}/resolve/main/{file}'
  return url.replace('gs://', 'https://storage.googleapis.com/', 1)


def _split_hub(url: str) -> tuple[str, str]:
  """'hf://owner/name/dir/file' -> ('owner/name', 'dir/file')."""
  parts = url.removeprefix('hf://').split('/')
  return '/'.join(parts[:2]), '/'.join(parts[2:])


def sha256(path: str) -> str:
  """The SHA-256 of the file at `path`, as 64 hex digits."""
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 22), b''):
      digest.update(block)
  return digest.hexdigest()


def fetch(url: str, directory: str, expected_sha256: str | None = None,
          expected_size: int | None = None) -> str:
  """The local path of the file `url`, downloaded where it is not yet here
  and checked.

  Args:
    url: 'hf://REPO/FILE' or 'gs://BUCKET/FILE' (any path etils.epath
      reads, a local one too).
    directory: where a gs:// file is kept (Hub files go to Hugging Face's
      cache).
    expected_sha256: the file's SHA-256 where its publisher gives one;
      Hub files are also checked against the Hub's.
    expected_size: the file's size in bytes, where known.

  Returns:
    The path of the checked local file.

  Raises:
    DownloadError: no network or no such file (the message gives the web
      address to download it from by hand), or the file is damaged twice.
  """
  get = _from_hub if url.startswith('hf://') else _from_bucket
  problem = None
  for again in (False, True):
    try:
      path, published_sha256, published_size = get(url, directory, again)
    except _GaveUp as e:
      raise DownloadError(f'cannot download {url}: {e}. {_by_hand(url)}') \
          from None
    except Exception as e:  # pylint: disable=broad-except
      # huggingface_hub's and gcsfs's errors: offline, not found, refused.
      reason = ' '.join(str(e).split())[:200] or type(e).__name__
      raise DownloadError(
          f'cannot download {url} ({type(e).__name__}: {reason}). '
          f'{_by_hand(url)}') from None
    problem = _problem(path, [expected_sha256, published_sha256],
                       [expected_size, published_size])
    if problem is None:
      return path
    os.remove(path)  # Damaged: never used, fetched once more.
  raise DownloadError(f'{url} was downloaded twice and is damaged both '
                      f'times ({problem}); download {web_address(url)} by '
                      'hand and load it with zoo.load_pretrained(NAME, '
                      'PATH).')


def _by_hand(url: str) -> str:
  """How to fetch `url` by hand, and where the next use finds it."""
  address = web_address(url)
  if url.startswith('hf://'):
    repo, file = _split_hub(url)
    return (f'Fetch it with `hf download {repo} {file}` (again to resume; '
            "it goes to Hugging Face's cache, where the next use finds it), "
            f'or download {address} elsewhere and load the file with '
            'zoo.load_pretrained(NAME, PATH).')
  return (f'Download {address} elsewhere (e.g. `curl -LO {address}`) and '
          'load the file with zoo.load_pretrained(NAME, PATH).')


def _problem(path: str, digests, sizes) -> str | None:
  """What is wrong with the file at `path`, or None."""
  actual = os.path.getsize(path)
  for size in sizes:
    if size is not None and actual != size:
      return f'{actual} bytes, not {size}'
  digests = [d for d in digests if d]
  if digests:
    digest = sha256(path)
    for expected in digests:
      if digest != expected:
        return f'SHA-256 {digest[:12]}..., not {expected[:12]}...'
  return None


def _from_hub(url: str, directory: str, again: bool):
  """(path, the Hub's SHA-256 of it or None, None) of a Hub file (whose
  size huggingface_hub checks)."""
  del directory  # Hugging Face's cache.
  import huggingface_hub  # pylint: disable=import-outside-toplevel
  from huggingface_hub import utils  # pylint: disable=import-outside-toplevel
  repo, file = _split_hub(url)
  hooks = utils.get_session().event_hooks['request']
  if _count_request not in hooks:  # Once per (re)created session.
    hooks.append(_count_request)
  bound = _BOUND.set(_Bound())
  try:
    # The endpoint and cache read now, not when huggingface_hub was imported.
    path = huggingface_hub.hf_hub_download(
        repo, file, force_download=again,
        endpoint=os.environ.get('HF_ENDPOINT'),
        cache_dir=os.environ.get('HF_HUB_CACHE'))
  finally:
    _BOUND.reset(bound)
  # In the cache a file is a link to its blob, named by the Hub's ETag:
  # the SHA-256 for large (LFS) files.
  blob = os.path.basename(os.path.realpath(path))
  return path, blob if _SHA256.match(blob) else None, None


class _GaveUp(Exception):
  """A download that reached its bounds (not one huggingface_hub retries)."""


class _Bound:
  """The requests one download has made, and since when."""

  def __init__(self):
    self.start = time.monotonic()
    self.requests = 0


# The bound of the download under way in this thread; None: no bound (a
# request of huggingface_hub's made for someone else).
_BOUND: contextvars.ContextVar[_Bound | None] = contextvars.ContextVar(
    'zoo_download_bound', default=None)


def _count_request(request):
  """huggingface_hub's request hook: refuses a request past the bounds."""
  del request
  bound = _BOUND.get()
  if bound is None:
    return
  seconds = time.monotonic() - bound.start
  if bound.requests >= ATTEMPTS or seconds > SECONDS:
    raise _GaveUp(f'the connection failed again and again ({bound.requests} '
                  f'requests in {seconds:.0f} s)')
  bound.requests += 1


def _from_bucket(url: str, directory: str, again: bool):
  """(path, None, the bucket's size of it) of a file in a bucket, copied
  into `directory`."""
  source = epath.Path(url)
  path = os.path.join(directory, source.name)
  if again or not os.path.exists(path):
    os.makedirs(directory, exist_ok=True)
    partial = f'{path}.partial'
    with source.open('rb') as src, open(partial, 'wb') as dst:
      for block in iter(lambda: src.read(1 << 22), b''):
        dst.write(block)
    os.replace(partial, path)
  return path, None, source.stat().length

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

Without a network a Hub download ends at once: with HF_HUB_OFFLINE set, or
when a connection to the Hub (HF_ENDPOINT) fails within PROBE_SECONDS, only
Hugging Face's cache is read, and a file not there is one DownloadError that
says how to fetch it on a machine with a network and where to put it. While
a download is under way, huggingface_hub's notice of each retry (twice in a
command's log: its own handler's and the log's) is dropped; the
DownloadError says how it ended.
"""

import contextvars
import hashlib
import logging
import os
import re
import socket
import time
import urllib.parse
import urllib.request

from etils import epath

_SHA256 = re.compile(r'^[0-9a-f]{64}$')

# The bounds of one Hub download (its metadata, the file, their retries):
# a healthy one makes 2 to 4 requests.
ATTEMPTS = 10
SECONDS = 60.0
# How long a connection to the Hub may take to tell that there is a network.
PROBE_SECONDS = 5.0


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
    except _Offline as e:
      raise DownloadError(f'cannot download {url}: {e}. {_elsewhere(url)}') \
          from None
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


def fetch_optional(url: str, directory: str) -> str | None:
  """`fetch(url, directory)` for a file that may not be there (a model's
  config.json or tokenizer_config.json beside its weights): None where it
  cannot be had."""
  try:
    return fetch(url, directory)
  except DownloadError:
    return None


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


def _elsewhere(url: str) -> str:
  """How to fetch the Hub file `url` without this machine's network, and
  where to put it so that the next use finds it."""
  # pylint: disable-next=import-outside-toplevel
  from huggingface_hub import constants, file_download
  repo, file = _split_hub(url)
  folder = file_download.repo_folder_name(repo_id=repo, repo_type='model')
  cache = os.environ.get('HF_HUB_CACHE') or constants.HF_HUB_CACHE
  return (f'On a machine with a network run `hf download {repo} {file} '
          f'--cache-dir hf_cache`, then copy hf_cache/{folder} into {cache} '
          'here (Hugging Face\'s cache), where the next use finds it.')


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
  # pylint: disable-next=import-outside-toplevel
  import huggingface_hub
  # pylint: disable-next=import-outside-toplevel
  from huggingface_hub import constants, errors, utils
  repo, file = _split_hub(url)
  hooks = utils.get_session().event_hooks['request']
  if _count_request not in hooks:  # Once per (re)created session.
    hooks.append(_count_request)
  # The endpoint and cache read now, not when huggingface_hub was imported.
  endpoint = os.environ.get('HF_ENDPOINT')
  offline = _offline(endpoint or constants.ENDPOINT)
  bound = _BOUND.set(_Bound(f'/{repo}/resolve/'))
  try:
    path = huggingface_hub.hf_hub_download(
        repo, file, force_download=again and not offline,
        local_files_only=bool(offline), endpoint=endpoint,
        cache_dir=os.environ.get('HF_HUB_CACHE'))
  except errors.LocalEntryNotFoundError:
    if offline:
      raise _Offline(offline) from None
    raise
  finally:
    _BOUND.reset(bound)
  # In the cache a file is a link to its blob, named by the Hub's ETag:
  # the SHA-256 for large (LFS) files.
  blob = os.path.basename(os.path.realpath(path))
  return path, blob if _SHA256.match(blob) else None, None


def _offline(endpoint: str) -> str | None:
  """Why the Hub at `endpoint` cannot be used now (HF_HUB_OFFLINE, or no
  connection within PROBE_SECONDS); None: try it."""
  # pylint: disable-next=import-outside-toplevel
  from huggingface_hub import constants
  # huggingface_hub's own rule, with the variable read now.
  if (constants.is_offline_mode() or
      os.environ.get('HF_HUB_OFFLINE', '').upper() in ('1', 'ON', 'YES',
                                                       'TRUE')):
    return 'HF_HUB_OFFLINE is set'
  address = urllib.parse.urlsplit(endpoint)
  proxies = urllib.request.getproxies()
  if ((address.scheme in proxies or 'all' in proxies) and
      not urllib.request.proxy_bypass(address.hostname)):
    return None  # The proxy would be probed, not the Hub.
  port = address.port or (443 if address.scheme == 'https' else 80)
  try:
    socket.create_connection((address.hostname, port), PROBE_SECONDS).close()
  except OSError as e:
    return f'{endpoint} cannot be reached ({e})'
  return None


class _GaveUp(Exception):
  """A download that reached its bounds (not one huggingface_hub retries)."""


class _Offline(Exception):
  """No network to download with, and the file not in the cache."""


class _Bound:
  """The requests one download has made for its file, and since when."""

  def __init__(self, path: str):
    self.path = path  # Of the file's URL: /REPO/resolve/REVISION/FILE.
    self.start = time.monotonic()
    self.requests = 0


# The bound of the download under way in this thread; None: no bound (a
# request of huggingface_hub's made for someone else).
_BOUND: contextvars.ContextVar[_Bound | None] = contextvars.ContextVar(
    'zoo_download_bound', default=None)


# huggingface_hub's notices of a retry or a resumed download.
_RETRY_NOTICES = re.compile(r'thrown while requesting|Retrying in|before '
                            r'retry|Trying to resume download|Max retries '
                            r'exceeded')


class _QuietRetries(logging.Filter):
  """Drops huggingface_hub's retry notices while a bounded download is
  under way (in this thread)."""

  def filter(self, record):
    return (_BOUND.get() is None or
            not _RETRY_NOTICES.search(record.getMessage()))


for _name in ('huggingface_hub.utils._http', 'huggingface_hub.file_download'):
  logging.getLogger(_name).addFilter(_QuietRetries())


def _count_request(request):
  """huggingface_hub's request hook: refuses a request for the file past
  the bounds. Its other requests (once a process: the registry of AI
  agents its user-agent header names) are not counted."""
  bound = _BOUND.get()
  if bound is None or bound.path not in request.url.path:
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

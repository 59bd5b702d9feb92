"""A local Cloud Storage server for the tests: gcp-storage-emulator.

`Emulator` starts it on 127.0.0.1 (a free port, objects in memory) and reads
and writes objects through its JSON API, so that a test sees what the bucket
holds, not the local disk.

Run as `python -m tests.gcs_emulator start ...` (the emulator's own command
line), it first adds the `x-goog-generation` header that Cloud Storage sends
with every download and the emulator leaves out: TensorStore (orbax's
arrays) takes an object's generation from it, and without it some of its
cached reads fail at random with "Malformed StorageGeneration".
"""

import socket
import subprocess
import sys
import time
import urllib.parse

import requests

from tests.helpers import ROOT


class Emulator:
  """gcp-storage-emulator serving `bucket` at `url`, in memory."""

  def __init__(self, bucket: str, log_path: str):
    with socket.socket() as s:
      s.bind(('127.0.0.1', 0))
      port = s.getsockname()[1]
    self.url = f'http://127.0.0.1:{port}'
    self.bucket = bucket
    with open(log_path, 'wb') as log:
      self._process = subprocess.Popen(
          [sys.executable, '-m', 'tests.gcs_emulator', 'start',
           '--host=127.0.0.1', f'--port={port}', f'--default-bucket={bucket}',
           '--in-memory', '--quiet'],
          cwd=ROOT,
          stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while not self._serving():
      if self._process.poll() is not None or time.monotonic() > deadline:
        self.stop()
        raise RuntimeError(f'the storage emulator did not start; see '
                           f'{log_path}')
      time.sleep(0.2)

  def _serving(self) -> bool:
    try:
      return requests.get(f'{self.url}/storage/v1/b/{self.bucket}',
                          timeout=5).ok
    except requests.ConnectionError:
      return False

  def names(self, prefix: str = '') -> list[str]:
    """The names of the bucket's objects that start with `prefix`."""
    names, token = [], None
    while True:
      reply = requests.get(f'{self.url}/storage/v1/b/{self.bucket}/o',
                           params={'prefix': prefix, 'pageToken': token},
                           timeout=30)
      reply.raise_for_status()
      names += [item['name'] for item in reply.json().get('items', [])]
      token = reply.json().get('nextPageToken')
      if not token:
        return sorted(names)

  def read(self, name: str) -> bytes:
    reply = requests.get(
        f'{self.url}/download/storage/v1/b/{self.bucket}/o/'
        f'{urllib.parse.quote(name, safe="")}', params={'alt': 'media'},
        timeout=30)
    reply.raise_for_status()
    return reply.content

  def write(self, name: str, data: bytes):
    reply = requests.post(
        f'{self.url}/upload/storage/v1/b/{self.bucket}/o',
        params={'uploadType': 'media', 'name': name}, data=data, timeout=60)
    reply.raise_for_status()

  def stop(self):
    if self._process.poll() is None:
      self._process.terminate()
      try:
        self._process.wait(10)
      except subprocess.TimeoutExpired:
        self._process.kill()
        self._process.wait()


def _main():
  # pylint: disable=g-import-not-at-top
  from gcp_storage_emulator.handlers import objects

  download = objects.download

  def download_with_generation(request, response, storage, *args, **kwargs):
    download(request, response, storage, *args, **kwargs)
    if response.status in (200, 206):
      stored = storage.get_file_obj(request.params['bucket_name'],
                                    request.params['object_id'])
      response['x-goog-generation'] = stored['generation']
      response['x-goog-metageneration'] = stored['metageneration']

  # Before the server module is imported: its routes take the function then.
  objects.download = download_with_generation
  from gcp_storage_emulator import __main__ as emulator
  emulator.main()


if __name__ == '__main__':
  _main()

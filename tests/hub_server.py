"""A local HTTP server that answers as the Hugging Face Hub does for file
downloads, for HF_ENDPOINT in tests: HEAD and GET of
/{owner}/{name}/resolve/{revision}/{file}, with the headers
huggingface_hub reads (X-Repo-Commit, the ETag that is the file's SHA-256,
Content-Length). It serves the files it is given, counts the requests, and
can serve damaged bytes a number of times or cut every download short."""

import hashlib
import http.server
import threading

import safetensors.numpy

from tests.convert_helpers import torchvision_resnet18_state_dict


class HubServer:
  """Serves {'owner/name/file': bytes} at `url` on a thread until `stop`."""

  def __init__(self, files: dict[str, bytes]):
    self.files = dict(files)
    self.requests: list[str] = []
    self.damaged = 0  # Serve this many GETs with a flipped byte.
    # Close every GET's connection after this many bytes of the file (a
    # network that always drops): None, the whole file.
    self.cut_after: int | None = None
    server = self

    class Handler(http.server.BaseHTTPRequestHandler):

      def log_message(self, *args):  # Quiet.
        del args

      def _answer(self, body: bool):
        server.requests.append(f'{self.command} {self.path}')
        parts = self.path.lstrip('/').split('/')
        data = None
        if len(parts) > 4 and parts[2] == 'resolve':  # Else not a file.
          data = server.files.get('/'.join(parts[:2] + parts[4:]))
        if data is None:
          self.send_response(404)
          self.send_header('X-Error-Code', 'EntryNotFound')
          self.end_headers()
          return
        digest = hashlib.sha256(data).hexdigest()
        if body and server.damaged:
          server.damaged -= 1
          data = bytes([data[0] ^ 1]) + data[1:]
        self.send_response(200)
        self.send_header('X-Repo-Commit', '0' * 40)
        self.send_header('ETag', f'"{digest}"')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        if body and server.cut_after is not None:
          self.wfile.write(data[:server.cut_after])
          self.close_connection = True
        elif body:
          self.wfile.write(data)

      def do_HEAD(self):  # pylint: disable=invalid-name
        self._answer(body=False)

      def do_GET(self):  # pylint: disable=invalid-name
        self._answer(body=True)

    self._httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    self.url = f'http://127.0.0.1:{self._httpd.server_address[1]}'
    # stop() waits for the loop's next poll: 0.5 s by default.
    self._thread = threading.Thread(target=self._httpd.serve_forever,
                                    kwargs={'poll_interval': 0.02},
                                    daemon=True)
    self._thread.start()

  def stop(self):
    self._httpd.shutdown()
    self._httpd.server_close()


def serve_resnet18(tmp_path, monkeypatch) -> tuple['HubServer', dict]:
  """resnet18.tv_in1k (random numbers, torchvision's names) served to zoo's
  downloads (HF_ENDPOINT), the Hub's and zoo's caches under `tmp_path`.

  Returns:
    (the server, to `stop()` after; the state dict it serves).
  """
  state = torchvision_resnet18_state_dict()
  hub = HubServer({'timm/resnet18.tv_in1k/model.safetensors':
                   safetensors.numpy.save(state)})
  monkeypatch.setenv('HF_ENDPOINT', hub.url)
  monkeypatch.setenv('HF_HUB_CACHE', str(tmp_path / 'hf'))
  monkeypatch.setenv('JAX_MODEL_ZOO_WEIGHTS', str(tmp_path / 'zoo'))
  return hub, state

"""Weights by name: `zoo.create(name, pretrained=TAG)` downloads a tag's file
once from a local server standing in for the Hugging Face Hub (HF_ENDPOINT),
checks it against the Hub's SHA-256, converts it, caches the conversion and
afterwards never touches the network. The same from a bucket is in
tests/integration/test_gcs.py."""

import os
import re
import shutil
import socket
import threading

import huggingface_hub
# Read before a test sets HF_HUB_OFFLINE: it keeps what it read at import.
import huggingface_hub.constants  # pylint: disable=unused-import
import jax
import numpy as np
import pytest
import safetensors.numpy

import zoo
from tests.convert_helpers import torchvision_resnet18_state_dict
from tests.helpers import slow_after
from tests.hub_server import HubServer
from zoo import convert, download, pretrained, weights

# Small models for a forward pass: compiling dominates (tests/conftest.py).
pytestmark = pytest.mark.usefixtures('fast_compiles')

FILE = 'timm/resnet18.tv_in1k/model.safetensors'
IMAGES = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype(
    np.float32)


@pytest.fixture
def hub(tmp_path, monkeypatch):
  """The Hub with resnet18.tv_in1k's file, and empty caches."""
  state = torchvision_resnet18_state_dict()
  server = HubServer({FILE: safetensors.numpy.save(state)})
  monkeypatch.setenv('HF_ENDPOINT', server.url)
  monkeypatch.setenv('HF_HUB_CACHE', str(tmp_path / 'hf'))
  monkeypatch.setenv('JAX_MODEL_ZOO_WEIGHTS', str(tmp_path / 'zoo'))
  server.state = state
  yield server
  server.stop()


def _assert_the_files_weights(model, state):
  """`model` is bound to the file's weights, converted without the Hub."""
  module, variables = model.unbind()
  assert module == zoo.create('resnet18')
  expected = convert.convert(state, 'torchvision').variables
  jax.tree.map(np.testing.assert_array_equal, variables, expected)


def _downloads(server) -> list[str]:
  return [r for r in server.requests if r.startswith('GET /timm/')]


def test_first_use_downloads_and_later_ones_read_the_cache_only(hub):
  model = zoo.create('resnet18', pretrained='tv_in1k')
  _assert_the_files_weights(model, hub.state)
  logits = model(IMAGES)  # A bound module is called directly.
  assert logits.shape == (2, 1000)
  assert len(_downloads(hub)) == 1
  cached = os.path.join(pretrained.cache_dir(),
                        'resnet18.tv_in1k.safetensors')
  assert os.path.isfile(cached)
  hub.stop()  # No network from now on.
  hub.requests.clear()
  again = zoo.create('resnet18', pretrained=True)  # The first tag.
  _assert_the_files_weights(again, hub.state)
  assert hub.requests == []


@pytest.mark.slow  # Initializes ResNet-18 at 224x224 for the new head.
def test_a_new_head_on_cached_weights(hub, caplog):
  zoo.create('resnet18', pretrained='tv_in1k')
  with caplog.at_level('WARNING'):
    model = zoo.create('resnet18', pretrained='tv_in1k', num_classes=10)
  variables = model.unbind()[1]
  assert variables['params']['Dense_0']['kernel'].shape == (512, 10)
  assert 'params/Dense_0/kernel' in caplog.text  # Said to be new.


def test_a_damaged_download_is_fetched_again(hub):
  hub.damaged = 1
  model = zoo.create('resnet18', pretrained='tv_in1k')
  assert len(_downloads(hub)) == 2
  _assert_the_files_weights(model, hub.state)


def test_a_download_damaged_twice_is_one_line_and_caches_nothing(hub):
  hub.damaged = 2
  with pytest.raises(download.DownloadError,
                     match='damaged both times.*SHA-256') as raised:
    zoo.create('resnet18', pretrained='tv_in1k')
  assert '\n' not in str(raised.value)
  assert not os.path.exists(pretrained.cache_dir()) or not os.listdir(
      pretrained.cache_dir())


def _truncate(path):
  with open(path, 'r+b') as f:
    f.truncate(100)


def _flip_a_byte_of_an_array(path):
  with open(path, 'r+b') as f:
    data = f.read()
    arrays = 8 + int.from_bytes(data[:8], 'little')  # After the header.
    f.seek((arrays + len(data)) // 2)
    f.write(bytes([data[(arrays + len(data)) // 2] ^ 1]))


def _replace_the_record(path):  # Well-formed JSON, not what was written.
  arrays = safetensors.numpy.load_file(path)
  safetensors.numpy.save_file(arrays, path, metadata={'zoo': '{"a": 1}'})


def _garble_the_header(path):
  with open(path, 'r+b') as f:
    f.seek(8)
    f.write(bytes(range(128, 256)))


@pytest.mark.parametrize('damage', slow_after(1, [
    _truncate, _flip_a_byte_of_an_array, _replace_the_record,
    _garble_the_header]))
def test_a_damaged_cache_is_converted_again(hub, caplog, damage):
  pretrained.published('resnet18', 'tv_in1k')
  cached = os.path.join(pretrained.cache_dir(),
                        'resnet18.tv_in1k.safetensors')
  damage(cached)
  with caplog.at_level('WARNING'):
    converted = pretrained.published('resnet18', 'tv_in1k')
  assert f'The cached weights {cached} cannot be read' in caplog.text
  jax.tree.map(np.testing.assert_array_equal, converted.variables,
               convert.convert(hub.state, 'torchvision').variables)
  assert len(_downloads(hub)) == 1  # From the file downloaded before.
  caplog.clear()
  with caplog.at_level('WARNING'):
    assert pretrained._read_cache(cached) is not None  # Written anew.
  assert caplog.text == ''


def _create_within(seconds: float):
  """What zoo.create('resnet18', pretrained='tv_in1k') returned or raised;
  fails when it runs longer than `seconds` (it ends when the server stops)."""
  outcome = {}

  def create():
    try:
      outcome['model'] = zoo.create('resnet18', pretrained='tv_in1k')
    except Exception as e:  # pylint: disable=broad-except
      outcome['error'] = e

  thread = threading.Thread(target=create, daemon=True)
  thread.start()
  thread.join(seconds)
  assert not thread.is_alive(), f'still downloading after {seconds} s'
  return outcome


# Past huggingface_hub's 10 MiB chunk: bytes arrived, so it counts its
# retries from the start again.
CUT_AFTER = 11 << 20


@pytest.mark.slow
def test_a_connection_cut_every_time_ends_in_one_line_saying_what_to_do(
    hub, monkeypatch, caplog):
  monkeypatch.setattr(download, 'ATTEMPTS', 4)
  hub.cut_after = CUT_AFTER
  with caplog.at_level('WARNING'):
    error = _create_within(60).get('error')
  assert isinstance(error, download.DownloadError), error
  # Not a notice of each retry as well: the one line tells how it ended.
  assert caplog.text == ''
  message = str(error)
  assert '\n' not in message
  assert message.startswith('cannot download hf://timm/resnet18.tv_in1k/'
                            'model.safetensors: the connection failed again '
                            'and again (4 requests in ')
  assert '`hf download timm/resnet18.tv_in1k model.safetensors`' in message
  assert 'zoo.load_pretrained(NAME, PATH)' in message
  assert len(_downloads(hub)) == 3  # And one HEAD.
  # As told: fetched by hand into Hugging Face's cache (what `hf download`
  # does), the next use finds it there, without a network.
  hub.cut_after = None
  huggingface_hub.hf_hub_download(
      'timm/resnet18.tv_in1k', 'model.safetensors',
      endpoint=os.environ['HF_ENDPOINT'],
      cache_dir=os.environ['HF_HUB_CACHE'])
  hub.stop()
  _assert_the_files_weights(_create_within(60)['model'], hub.state)


def test_a_download_starts_no_request_after_its_time(hub, monkeypatch):
  monkeypatch.setattr(download, 'SECONDS', 1)
  hub.cut_after = CUT_AFTER
  error = _create_within(60).get('error')
  assert isinstance(error, download.DownloadError), error
  assert 'the connection failed again and again' in str(error)
  assert len(_downloads(hub)) <= 2


def _closed_port_url() -> str:
  """The address of a port nothing listens on: a Hub that cannot be
  reached."""
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return f'http://127.0.0.1:{s.getsockname()[1]}'


# Hugging Face's own retries of a refused connection take about 25 s.
WITHOUT_A_NETWORK = 10


def test_offline_mode_ends_at_once_without_a_request(hub, monkeypatch):
  monkeypatch.setenv('HF_HUB_OFFLINE', '1')
  error = _create_within(WITHOUT_A_NETWORK).get('error')
  assert isinstance(error, download.DownloadError), error
  assert str(error).startswith(
      'cannot download hf://timm/resnet18.tv_in1k/model.safetensors: '
      'HF_HUB_OFFLINE is set. On a machine with a network run `hf download '
      'timm/resnet18.tv_in1k model.safetensors --cache-dir hf_cache`')
  assert '\n' not in str(error)
  assert hub.requests == []


def test_without_a_network_it_ends_at_once_saying_how_to_fetch_the_file(
    hub, tmp_path, monkeypatch, caplog):
  unreachable = _closed_port_url()
  monkeypatch.setenv('HF_ENDPOINT', unreachable)
  with caplog.at_level('WARNING'):
    error = _create_within(WITHOUT_A_NETWORK).get('error')
  assert isinstance(error, download.DownloadError), error
  message = str(error)
  assert '\n' not in message
  assert message.startswith(
      'cannot download hf://timm/resnet18.tv_in1k/model.safetensors: '
      f'{unreachable} cannot be reached (')
  assert caplog.text == ''  # No retries to tell of.
  # As told: `hf download` on a machine with a network (here, the local
  # Hub), its folder copied into this machine's cache; the next use finds
  # it there, the Hub still unreachable.
  told = re.search(r'`hf download (\S+) (\S+) --cache-dir (\S+)`, then copy '
                   r'(\S+) into (\S+) here', message)
  repo, file, elsewhere, folder, cache = told.groups()
  assert cache == os.environ['HF_HUB_CACHE']
  huggingface_hub.hf_hub_download(repo, file, endpoint=hub.url,
                                  cache_dir=str(tmp_path / elsewhere))
  shutil.copytree(tmp_path / folder, os.path.join(cache, os.path.basename(
      folder)), symlinks=True)
  _assert_the_files_weights(_create_within(60)['model'], hub.state)


def test_unknown_tags_and_models_without_weights_are_one_line():
  with pytest.raises(ValueError, match="no weights 'nope'; its tags: "
                     'tv_in1k, tv2_in1k'):
    zoo.create('resnet50', pretrained='nope')
  with pytest.raises(ValueError, match="'cnn' has no published weights"):
    zoo.create('cnn', pretrained=True)


def test_every_tag_names_a_registered_model_and_a_known_place():
  assert zoo.list_models(pretrained=True) == sorted(weights.TAGS)
  for model, tags in weights.TAGS.items():
    assert model in zoo.list_models(), model
    for tag, published in tags.items():
      assert published.url.startswith(('hf://', 'gs://')), published
      assert published.name == f'{model}.{tag}'
      assert published.top1 is None or 60 < published.top1 < 95


def test_a_cache_that_cannot_be_written_costs_a_conversion_not_the_weights(
    hub, tmp_path, monkeypatch, caplog):
  read_only = tmp_path / 'read_only'
  read_only.mkdir()
  read_only.chmod(0o500)
  monkeypatch.setenv('JAX_MODEL_ZOO_WEIGHTS', str(read_only / 'weights'))
  if os.access(read_only, os.W_OK):  # As root, modes do not stop writes.
    monkeypatch.setenv('JAX_MODEL_ZOO_WEIGHTS', '/proc/zoo-weights')
  with caplog.at_level('WARNING'):
    model = zoo.create('resnet18', pretrained='tv_in1k')
  _assert_the_files_weights(model, hub.state)
  assert 'Cannot keep the converted weights resnet18.tv_in1k' in caplog.text

"""notebooks/quickstart.ipynb: committed without outputs, and run top to
bottom in a Jupyter kernel of this Python as a user runs it: it trains,
plots, evaluates, and converts and fine-tunes ResNet-18 weights, which a
local server standing in for the Hugging Face Hub serves (random numbers in
torchvision's layout). Offline, its cells that need the weights say so and
skip the rest of their section."""

import asyncio
import os
import re
import sys

import jax
import jax.numpy as jnp
import nbformat
import pytest
import safetensors.numpy
from huggingface_hub import constants
from jupyter_client import AsyncKernelManager
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

from recipes.data.sources import idx
from tests.convert_helpers import torchvision_resnet18_state_dict
from tests.helpers import ROOT, command_env
from tests.hub_server import HubServer
import zoo
from zoo import weights

NOTEBOOK = os.path.join(ROOT, 'notebooks', 'quickstart.ipynb')
# The whole notebook: 2 to 3 minutes on a 2-core CPU, 5.5 on a busy one.
TIMEOUT = 900


def _code_cells(notebook):
  return [c for c in notebook.cells if c.cell_type == 'code']


def test_the_committed_notebook_has_no_outputs():
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(notebook)
  assert notebook.metadata.kernelspec.name == 'python3'
  assert _code_cells(notebook)
  for cell in _code_cells(notebook):
    assert cell.outputs == [] and cell.execution_count is None, cell.source
    assert 'execution' not in cell.metadata, cell.source  # Its times.


def _cell_with(notebook, text: str) -> str:
  """The source of the code cell that contains `text`."""
  return next(c.source for c in _code_cells(notebook) if text in c.source)


def test_offline_the_weights_cells_say_what_to_fetch_and_skip(
    tmp_path, monkeypatch, capsys):
  # HF_HUB_OFFLINE=1 as huggingface_hub reads it when the kernel starts.
  monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', True)
  monkeypatch.setenv('HF_HUB_CACHE', str(tmp_path / 'hf'))
  monkeypatch.setenv('JAX_MODEL_ZOO_WEIGHTS', str(tmp_path / 'weights'))
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  # Only what the notebook's earlier cells define that these cells need
  # offline: a cell that trained anyway would fail on a missing name.
  names = {'zoo': zoo, 'jax': jax, 'jnp': jnp}
  for text in ("zoo.create('resnet18', pretrained=", 'train.run(finetune'):
    exec(_cell_with(notebook, text), names)  # pylint: disable=exec-used
  printed = capsys.readouterr().out.splitlines()
  assert printed[1:] == [
      'Skipping the pretrained weights: cannot download '
      'hf://timm/resnet18.tv_in1k/model.safetensors: HF_HUB_OFFLINE is set. '
      'On a machine with a network run `hf download timm/resnet18.tv_in1k '
      'model.safetensors --cache-dir hf_cache`, then copy '
      'hf_cache/models--timm--resnet18.tv_in1k into '
      f'{tmp_path / "hf"} here (Hugging Face\'s cache), where the next use '
      'finds it.',
      'Skipping the fine-tuning: it starts from the pretrained weights.']


def _stream(cell) -> str:
  return ''.join(o.text for o in cell.outputs if o.output_type == 'stream')


def _run(notebook, cwd: str, env: dict):
  """Executes `notebook` in place in a kernel of this Python (whatever
  kernels Jupyter has installed), in `cwd`, within TIMEOUT seconds."""
  specs = KernelSpecManager(kernel_dirs=[])  # Only this Python's own.
  manager = AsyncKernelManager(kernel_name='python3',
                               kernel_spec_manager=specs)
  assert manager.kernel_spec.argv[0] == sys.executable
  client = NotebookClient(notebook, km=manager, timeout=TIMEOUT,
                          shutdown_kernel='immediate',
                          resources={'metadata': {'path': cwd}})
  # The kernel ends with the run, at an error or the timeout too.
  asyncio.run(asyncio.wait_for(
      client.async_execute(env=env, cleanup_kc=True), TIMEOUT))


@pytest.mark.slow  # A kernel trains two models: 2 to 3 minutes.
@pytest.mark.skipif(not os.path.isdir(idx.FASHION_MNIST_DIR),
                    reason='needs Debian\'s dataset-fashion-mnist in '
                    f'{idx.FASHION_MNIST_DIR}')
def test_the_notebook_runs_top_to_bottom(tmp_path):
  resnet18 = weights.find('resnet18', 'tv_in1k')
  hub = HubServer({resnet18.url.removeprefix('hf://'): safetensors.numpy.save(
      torchvision_resnet18_state_dict())})
  env = command_env(HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(tmp_path / 'hf'),
                    JAX_MODEL_ZOO_WEIGHTS=str(tmp_path / 'weights'))
  env.pop('JAX_NUM_CPU_DEVICES')  # One device, as on a user's CPU.
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  try:
    _run(notebook, str(tmp_path), env)  # Raises at a cell's error.
  finally:
    hub.stop()
  cells = _code_cells(notebook)
  text = '\n'.join(_stream(c) for c in cells)
  cnn = float(re.search(r'CNN test accuracy: ([\d.]+)', text)[1])
  assert cnn > 0.8, text[-3000:]  # 300 steps: 0.848.
  # The weights were downloaded once and every array but the head loaded.
  assert sum(r.startswith('GET /timm/') for r in hub.requests) == 1
  assert ('Initialized 60 parameter arrays and 40 batch statistics from '
          'resnet18.tv_in1k.') in text
  assert ('trained from scratch: params/Dense_0/bias, '
          'params/Dense_0/kernel.') in text
  tuned = float(re.search(r'ResNet-18 test accuracy: ([\d.]+)', text)[1])
  assert tuned > 0.5, text[-3000:]  # Random weights, 30 steps: 0.67.
  # The curves of both runs, as images.
  plots = [o for c in cells for o in c.outputs
           if 'image/png' in o.get('data', {})]
  assert len(plots) == 2
  assert (tmp_path / 'quickstart_runs' / 'cnn' / 'checkpoints').is_dir()

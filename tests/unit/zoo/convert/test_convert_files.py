"""Reading checkpoint files: .safetensors without torch, .npz, .pth."""

import json
import struct
import sys

import ml_dtypes
import numpy as np
import pytest

from tests.convert_helpers import against, optional, write_safetensors
from zoo import convert
from zoo.convert import files, torchvision_resnet, transformers_decoder
from zoo.convert.transfer import ConversionError

torch, = optional('torch')  # Importing it starts a process (ldconfig).


def _arrays():
  rng = np.random.default_rng(0)
  return {'conv1.weight': rng.normal(size=(4, 3, 2, 2)).astype(np.float32),
          'bn1.num_batches_tracked': np.array(5, np.int64),
          'half': rng.normal(size=(3,)).astype(np.float16),
          'brain': rng.normal(size=(2, 3)).astype(ml_dtypes.bfloat16),
          'empty': np.zeros((0, 4), np.float32)}


def test_safetensors_are_read_without_torch(tmp_path, monkeypatch):
  arrays = _arrays()
  write_safetensors(tmp_path / 'm.safetensors', arrays, {'format': 'pt'})
  monkeypatch.setitem(sys.modules, 'torch', None)  # Importing it fails.
  read = files.read(tmp_path / 'm.safetensors')
  assert list(read) == list(arrays)  # The file's order; no __metadata__.
  for name, array in arrays.items():
    assert read[name].dtype == array.dtype and read[name].shape == array.shape
    np.testing.assert_array_equal(read[name], array)
  with pytest.raises(ConversionError, match='needs torch'):
    files.read_torch(str(tmp_path / 'm.pth'))


def test_safetensors_written_by_the_safetensors_package(tmp_path):
  safetensors_numpy = pytest.importorskip(
      'safetensors.numpy', reason='the safetensors package (in the '
      'convert-test extra) writes the reference file')
  arrays = {k: v for k, v in _arrays().items()
            if v.dtype != ml_dtypes.bfloat16}  # numpy has no bfloat16.
  safetensors_numpy.save_file(arrays, str(tmp_path / 'm.safetensors'))
  read = files.read(tmp_path / 'm.safetensors')
  assert set(read) == set(arrays)
  for name, array in arrays.items():
    np.testing.assert_array_equal(read[name], array)


def test_damaged_safetensors_are_one_error(tmp_path):
  write_safetensors(tmp_path / 'm.safetensors', _arrays())
  whole = (tmp_path / 'm.safetensors').read_bytes()
  (tmp_path / 'short.safetensors').write_bytes(whole[:-5])
  with pytest.raises(ConversionError, match="'empty'|'brain'|truncated"):
    files.read(tmp_path / 'short.safetensors')
  (tmp_path / 'junk.safetensors').write_bytes(b'\xff' * 64)
  with pytest.raises(ConversionError, match='not a safetensors file'):
    files.read(tmp_path / 'junk.safetensors')
  (tmp_path / 'json.safetensors').write_bytes(struct.pack('<Q', 4) + b'{{{{')
  with pytest.raises(ConversionError, match='not JSON'):
    files.read(tmp_path / 'json.safetensors')


@pytest.mark.parametrize('header,match', [
    ([1, 2], 'its header is a JSON list'),
    ({'w': 3}, "the header entry of tensor 'w' is not a table"),
    ({'w': {'dtype': 'F32', 'data_offsets': [0, 4]}}, "'w' does not fit"),
    ({'w': {'dtype': 'F32', 'shape': 'x', 'data_offsets': [0, 4]}},
     "'w' does not fit"),
    ({'w': {'dtype': 'F32', 'shape': [1], 'data_offsets': [-4, 0]}},
     "'w' does not fit"),
    ({'w': {'dtype': 'F32', 'shape': [1], 'data_offsets': [4, 0]}},
     "'w' does not fit"),
    ({'w': {'dtype': 'I4', 'shape': [1], 'data_offsets': [0, 4]}},
     "'w' has dtype 'I4', which is not supported"),
])
def test_damaged_safetensors_headers_are_one_error(tmp_path, header, match):
  header = json.dumps(header).encode()
  (tmp_path / 'm.safetensors').write_bytes(
      struct.pack('<Q', len(header)) + header + bytes(4))
  with pytest.raises(ConversionError, match=match):
    files.read(tmp_path / 'm.safetensors')


def test_a_file_without_tensors_is_one_error(tmp_path):
  write_safetensors(tmp_path / 'm.safetensors', {}, {'format': 'pt'})
  assert files.read(tmp_path / 'm.safetensors') == {}
  with pytest.raises(ConversionError, match='holds no tensors'):
    convert.load(tmp_path / 'm.safetensors', 'timm')


def test_npz_keeps_names_and_recovers_bfloat16(tmp_path):
  brain = np.arange(6, dtype=np.float32).reshape(2, 3).astype(
      ml_dtypes.bfloat16)
  # numpy stores bfloat16 as 2-byte void, as big_vision's checkpoints have it.
  np.savez(tmp_path / 'c.npz', **{'Transformer/encoder_norm/scale':
                                  np.ones(3, np.float32),
                                  'head/kernel': brain.view('V2')})
  read = files.read(tmp_path / 'c.npz')
  assert set(read) == {'Transformer/encoder_norm/scale', 'head/kernel'}
  assert read['head/kernel'].dtype == ml_dtypes.bfloat16
  np.testing.assert_array_equal(read['head/kernel'].astype(np.float32),
                                brain.astype(np.float32))


def test_missing_and_unknown_files_are_one_error(tmp_path):
  with pytest.raises(ConversionError, match='not found'):
    files.read(tmp_path / 'no.safetensors')
  (tmp_path / 'weights.h5').write_bytes(b'x')
  with pytest.raises(ConversionError, match=r'must end in \.safetensors'):
    files.read(tmp_path / 'weights.h5')
  (tmp_path / 'bad.npz').write_bytes(b'not a zip')
  with pytest.raises(ConversionError, match='is not an .npz archive'):
    files.read(tmp_path / 'bad.npz')


def _template_tensors(module, name, kwargs):
  """Zeros of the names and shapes of `module`'s file of `name`."""
  return {k: np.zeros(v, np.float32)
          for k, v in module.template(name, kwargs).items()}


def test_the_config_json_beside_a_file_is_read_where_it_matters(tmp_path):
  """transformers' decoders take their heads from it (without torch); a
  converter without read_config takes none."""
  sizes = dict(vocab_size=11, hidden_size=64, num_layers=1, num_heads=1,
               mlp_dim=32, max_length=8)
  path = tmp_path / 'model.safetensors'
  write_safetensors(path, _template_tensors(transformers_decoder, 'gpt2',
                                            sizes))
  assert transformers_decoder.read_config(path) is None
  assert convert.load(path, name='gpt2').kwargs['num_heads'] == 1
  (tmp_path / 'config.json').write_text(json.dumps({'n_head': 4}))
  assert transformers_decoder.read_config(path) == {'n_head': 4}
  assert convert.load(path, name='gpt2').kwargs['num_heads'] == 4
  (tmp_path / 'config.json').write_text('{"n_head": ')
  with pytest.raises(ConversionError, match='config.json is not JSON'):
    convert.load(path, name='gpt2')
  resnet = _template_tensors(torchvision_resnet, 'resnet18',
                             dict(num_filters=8, num_classes=3))
  with pytest.raises(ConversionError, match='takes no config'):
    convert.convert(resnet, config={'n_head': 4})


@against(torch, '.pth files written by torch')
def test_pth_state_dicts_are_unwrapped(tmp_path):
  state = {'module.fc.weight': torch.randn(3, 2),
           'module.fc.bias': torch.randn(3).to(torch.bfloat16),
           'module.bn.num_batches_tracked': torch.tensor(4)}
  torch.save({'epoch': 3, 'state_dict': state}, tmp_path / 'ckpt.pth')
  read = files.read(tmp_path / 'ckpt.pth')
  assert list(read) == ['fc.weight', 'fc.bias', 'bn.num_batches_tracked']
  np.testing.assert_array_equal(read['fc.weight'], state['module.fc.weight'])
  assert read['fc.bias'].dtype == ml_dtypes.bfloat16
  np.testing.assert_array_equal(read['fc.bias'].astype(np.float32),
                                state['module.fc.bias'].float().numpy())
  torch.save([1, 2], tmp_path / 'list.pth')
  with pytest.raises(ConversionError, match='holds no state dict'):
    files.read(tmp_path / 'list.pth')

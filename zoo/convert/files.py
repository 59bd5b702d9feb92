"""Reading a checkpoint file into {name: numpy array}, in the file's order.

A local file, or one in a bucket (gs://..., read whole into memory through
etils.epath, the file layer that orbax and TFDS use too).

- `.safetensors`: parsed here with numpy (the format is an 8-byte header
  length, a JSON table of dtype, shape and byte offsets, then the raw
  little-endian bytes), so reading one needs neither torch nor the
  `safetensors` package.
- `.pth`, `.pt`, `.bin`: a pickled PyTorch state dict, read with
  `torch.load(..., weights_only=True)`, so these need torch. A training
  checkpoint that wraps the state dict (under 'state_dict', 'model' or
  'state_dict_ema') and the 'module.' prefix of DistributedDataParallel are
  unwrapped.
- `.npz`: numpy's archive, as Google's JAX ViT code and big_vision save
  them; bfloat16 arrays, which numpy stores as 2-byte void, are recovered.
"""

import io
import json
import os
import struct
import zipfile

import ml_dtypes
import numpy as np
from etils import epath

from zoo.convert.transfer import ConversionError

EXTENSIONS = ('.safetensors', '.pth', '.pt', '.bin', '.npz')

_SAFETENSORS_DTYPES = {
    'BOOL': np.bool_, 'U8': np.uint8, 'I8': np.int8, 'U16': np.uint16,
    'I16': np.int16, 'U32': np.uint32, 'I32': np.int32, 'U64': np.uint64,
    'I64': np.int64, 'F16': np.float16, 'F32': np.float32, 'F64': np.float64,
    'BF16': ml_dtypes.bfloat16, 'F8_E4M3': ml_dtypes.float8_e4m3fn,
    'F8_E5M2': ml_dtypes.float8_e5m2,
}


def read(path: str | os.PathLike) -> dict[str, np.ndarray]:
  """The tensors of the checkpoint file at `path` (local, or a URL such as
  gs://BUCKET/file.npz, read whole into memory), by name.

  Args:
    path: the file; its extension (one of EXTENSIONS, any case) picks the
      reader.

  Returns:
    {name: numpy array} in the file's order.

  Raises:
    ConversionError: the extension is not one of EXTENSIONS, the file does
      not exist, or its reader fails (see `read_safetensors`, `read_torch`,
      `read_npz`).
  """
  path = os.fspath(path)
  ext = os.path.splitext(path)[1].lower()
  if ext not in EXTENSIONS:
    raise ConversionError(f'cannot read {path!r}: the file name must end in '
                          f'{", ".join(EXTENSIONS)}.')
  source = path
  if '://' in path:
    location = epath.Path(path)
    if not location.is_file():
      raise ConversionError(f'checkpoint file {path!r} not found.')
    source = io.BytesIO(location.read_bytes())
  elif not os.path.isfile(path):
    raise ConversionError(f'checkpoint file {path!r} not found.')
  if ext == '.safetensors':
    return read_safetensors(source, path)
  if ext == '.npz':
    return read_npz(source, path)
  return read_torch(source, path)


def read_safetensors(source: str | io.BytesIO,
                     name: str | None = None) -> dict[str, np.ndarray]:
  """A .safetensors file's tensors, memory-mapped (a local file) or in
  memory, without torch.

  Args:
    source: a local path, or the file's bytes.
    name: what to call the file in error messages; None: `source`.

  Returns:
    {name: numpy array} in the header's order, '__metadata__' left out;
    views of the file's bytes, not copies.

  Raises:
    ConversionError: the header is damaged, a dtype is not supported, or a
      tensor does not fit its bytes.
  """
  name = name or source
  if isinstance(source, str):
    data = (np.memmap(source, np.uint8, mode='r')
            if os.path.getsize(source) else np.zeros(0, np.uint8))
  else:
    data = np.frombuffer(source.getbuffer(), np.uint8)
  header_size = (struct.unpack('<Q', data[:8].tobytes())[0]
                 if data.size >= 8 else -1)
  if not 0 < header_size <= data.size - 8:
    raise ConversionError(f'{name!r} is not a safetensors file (its header '
                          'length is wrong): damaged, or of another format?')
  try:
    header = json.loads(data[8:8 + header_size].tobytes())
  except ValueError as e:
    raise ConversionError(f'{name!r} is not a safetensors file (its header '
                          f'is not JSON: {e}).') from None
  if not isinstance(header, dict):
    raise ConversionError(f'{name!r} is not a safetensors file (its header '
                          f'is a JSON {type(header).__name__}, not a table).')
  data = data[8 + header_size:]
  return {tensor: _safetensors_tensor(name, tensor, entry, data)
          for tensor, entry in header.items() if tensor != '__metadata__'}


def _safetensors_tensor(path: str, name: str, entry, data: np.ndarray):
  """One tensor of a safetensors file, after checking its header entry."""
  if not isinstance(entry, dict):
    raise ConversionError(f'{path!r}: the header entry of tensor {name!r} is '
                          'not a table (a damaged file?).')
  dtype = _SAFETENSORS_DTYPES.get(entry.get('dtype'))
  if dtype is None:
    raise ConversionError(f'{path!r}: tensor {name!r} has dtype '
                          f'{entry.get("dtype")!r}, which is not supported.')
  shape, offsets = entry.get('shape'), entry.get('data_offsets')
  if not (_naturals(shape) and _naturals(offsets) and len(offsets) == 2
          and offsets[0] <= offsets[1] <= data.size
          and offsets[1] - offsets[0] == np.dtype(dtype).itemsize *
          int(np.prod(shape, dtype=np.int64))):
    raise ConversionError(f'{path!r}: tensor {name!r} does not fit its '
                          'bytes (a truncated or damaged file?).')
  begin, end = offsets
  return data[begin:end].view(dtype).reshape(shape)


def _naturals(value) -> bool:
  """Whether `value` is a list of non-negative integers."""
  return isinstance(value, list) and all(
      isinstance(v, int) and not isinstance(v, bool) and v >= 0
      for v in value)


def read_torch(source: str | io.BytesIO,
               name: str | None = None) -> dict[str, np.ndarray]:
  """A PyTorch state dict saved with torch.save.

  A state dict wrapped in a training checkpoint ('state_dict_ema',
  'state_dict' or 'model', first found) is unwrapped, and a 'module.'
  prefix on every name (DistributedDataParallel) dropped.

  Args:
    source: a local path, or the file's bytes.
    name: what to call the file in error messages; None: `source`.

  Returns:
    {name: numpy array} in the state dict's order; bfloat16 tensors as
    ml_dtypes.bfloat16 arrays.

  Raises:
    ConversionError: torch is not installed, cannot read the file
      (weights_only=True), or the file holds no dict of tensors.
  """
  path = name or source
  try:
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ConversionError(
        f'reading {path!r} needs torch (pip install torch); or save its '
        'state dict as .safetensors, which reads without it.') from None
  try:
    loaded = torch.load(source, map_location='cpu', weights_only=True)
  except Exception as e:  # pylint: disable=broad-except
    raise ConversionError(f'torch cannot read {path!r} ({type(e).__name__}: '
                          f'{" ".join(str(e).split())[:200]}).') from None
  for key in ('state_dict_ema', 'state_dict', 'model'):
    if isinstance(loaded, dict) and isinstance(loaded.get(key), dict):
      loaded = loaded[key]
      break
  if not isinstance(loaded, dict) or not all(
      isinstance(v, torch.Tensor) for v in loaded.values()):
    raise ConversionError(f'{path!r} holds no state dict (a dict of tensors '
                          f'by name) but a {type(loaded).__name__}.')
  if loaded and all(k.startswith('module.') for k in loaded):
    loaded = {k.removeprefix('module.'): v for k, v in loaded.items()}

  def to_numpy(tensor):
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
      return tensor.float().numpy().astype(ml_dtypes.bfloat16)
    return tensor.numpy()

  return {name: to_numpy(tensor) for name, tensor in loaded.items()}


def read_npz(source: str | io.BytesIO,
             name: str | None = None) -> dict[str, np.ndarray]:
  """A numpy .npz archive of arrays named by their '/'-joined paths.

  Args:
    source: a local path, or the file's bytes.
    name: what to call the file in error messages; None: `source`.

  Returns:
    {name: numpy array} in the archive's order; 2-byte void arrays (how
    numpy saves bfloat16) as ml_dtypes.bfloat16.

  Raises:
    ConversionError: the file is not a zip archive, or numpy cannot read it
      (pickled objects included, which are not loaded).
  """
  path = name or source
  if not zipfile.is_zipfile(source):
    raise ConversionError(f'{path!r} is not an .npz archive (not a zip '
                          'file): damaged, or of another format?')
  try:
    with np.load(source, allow_pickle=False) as archive:
      tensors = {name: archive[name] for name in archive.files}
  except Exception as e:  # pylint: disable=broad-except
    raise ConversionError(f'numpy cannot read {path!r} as .npz '
                          f'({type(e).__name__}: {e}).') from None
  return {name: (array.view(ml_dtypes.bfloat16)
                 if array.dtype.kind == 'V' and array.dtype.itemsize == 2
                 else array)
          for name, array in tensors.items()}

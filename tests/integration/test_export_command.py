"""`python -m recipes.export`: a run's or a converted model written back as
the original library's state dict. Each family's export is verified against
timm or torchvision themselves in tests/unit/zoo/convert/ (loading the file
with strict=True and comparing logits); here the command: the sources it
reads, the file it writes, and its mistakes."""

import contextlib
import io
import json
import os

import numpy as np
import pytest
import safetensors.numpy
from flax import traverse_util

from recipes import convert as convert_command
from recipes import export as command
from recipes import loop
from recipes.checkpoint import resume, store
from tests.convert_helpers import (torchvision_resnet18_state_dict,
                                   write_safetensors)
from tests.helpers import tiny_config
from tests.hub_server import serve_resnet18
from tests.idx_files import write_fashion_mnist
from zoo import convert
from zoo.convert.transfer import target_shapes

# ResNet-18 at 28x28 for a step: compiling dominates (tests/conftest.py).
pytestmark = pytest.mark.usefixtures('fast_compiles')


def _export(capsys, *argv):
  code = command.main(list(argv))
  out, err = capsys.readouterr()
  return code, out, err


@pytest.fixture(name='converted', scope='module')
def _converted(tmp_path_factory):
  """A torchvision ResNet-18 file and the directory recipes.convert made
  (read, never written, by the tests)."""
  path = tmp_path_factory.mktemp('converted')
  state = torchvision_resnet18_state_dict()
  write_safetensors(path / 'r18.safetensors', state)
  with contextlib.redirect_stdout(io.StringIO()):
    assert convert_command.main(['--source=torchvision',
                                 str(path / 'r18.safetensors'),
                                 str(path / 'converted')]) == 0
  return state, str(path / 'converted')


@pytest.mark.slow  # Restores and traces ResNet-18: about 15 s.
def test_a_converted_model_goes_back_to_the_same_file(converted, tmp_path,
                                                      capsys):
  state, directory = converted
  dst = str(tmp_path / 'back.safetensors')
  code, out, err = _export(capsys, '--to=torchvision', directory, dst)
  assert code == 0, err
  assert out.startswith('Wrote resnet18 as a torchvision state dict: 122 '
                        'tensors, ')
  back = safetensors.numpy.load_file(dst)
  assert set(back) == set(state)
  for name, value in state.items():
    if name.endswith('num_batches_tracked'):  # Not kept: written as 0.
      assert back[name].dtype == np.int64 and back[name] == 0
    else:
      np.testing.assert_array_equal(back[name], value, err_msg=name)


@pytest.mark.slow  # Trains ResNet-18 for a step first.
def test_a_run_fine_tuned_from_a_tag_on_grey_images_exports(tmp_path, capsys,
                                                            monkeypatch):
  """--config.pretrained on Fashion-MNIST's 28x28 grey images: they become
  RGB, so the weights' first convolution is trained (not dropped), the
  config.json says so, and the run's latest checkpoint (or its step
  directory) exports as a torchvision ResNet-18 that converts back to the
  run's own parameters and statistics, the ten classes of the data
  included. (One run for both: a trained run's export and a fine-tuned
  one's.)"""
  hub, state = serve_resnet18(tmp_path, monkeypatch)
  (tmp_path / 'data').mkdir()
  write_fashion_mnist(str(tmp_path / 'data'), num_train=16, num_test=8)
  workdir = str(tmp_path / 'work')
  try:
    loop.train_and_evaluate(tiny_config(
        model='resnet18', pretrained='tv_in1k', dataset='fashion_mnist_idx',
        data_dir=str(tmp_path / 'data'), batch_size=8, num_train_steps=1,
        eval_every_steps=1, learning_rate=0.0), workdir)
  finally:
    hub.stop()
  saved = json.loads((tmp_path / 'work' / 'config.json').read_text())
  assert (saved['image_channels'], saved['normalize']) == (3, 'imagenet')
  dst = str(tmp_path / 'run.safetensors')
  code, _, err = _export(capsys, '--to=torchvision', workdir, dst)
  assert code == 0, err
  back = safetensors.numpy.load_file(dst)
  # The weights' own first convolution, trained at learning rate 0.
  np.testing.assert_array_equal(back['conv1.weight'], state['conv1.weight'])
  assert back['fc.weight'].shape == (10, 512)
  # The file converts back to the run's own parameters and statistics.
  run = convert.load(dst, 'torchvision')
  assert run.kwargs == {'num_classes': 10}
  ours = traverse_util.flatten_dict(run.variables, sep='/')
  shapes = resume.saved_shapes(resume.step_directory(workdir))
  assert set(ours) == set(shapes)
  loaded, missing = resume.load_params(workdir, traverse_util.unflatten_dict(
      {k: _abstract(v) for k, v in ours.items()}, sep='/'))
  assert missing == []
  for name, value in loaded.items():
    np.testing.assert_array_equal(ours[name], np.asarray(value),
                                  err_msg=name)
  # A step directory of it gives the same file.
  step = str(resume.step_directory(workdir))
  code, _, err = _export(capsys, '--to=torchvision', step,
                         str(tmp_path / 'step.safetensors'))
  assert code == 0, err
  assert (open(dst, 'rb').read() ==
          open(tmp_path / 'step.safetensors', 'rb').read())


def _abstract(array):
  import jax  # pylint: disable=import-outside-toplevel
  return jax.ShapeDtypeStruct(array.shape, np.float32,
                              sharding=jax.sharding.SingleDeviceSharding(
                                  jax.devices()[0]))


@pytest.mark.slow  # Each mistake restores nothing, but the fixture converts.
def test_mistakes_are_one_line_and_overwrite_nothing(converted, tmp_path,
                                                     capsys):
  _, directory = converted
  existing = tmp_path / 'existing.safetensors'
  existing.write_bytes(b'keep me')
  cases = [
      (['--to=torchvision', directory, str(existing)],
       'exists; give a new file (nothing is overwritten)'),
      (['--to=torchvision', directory, str(tmp_path / 'x.pth')],
       'must end in .safetensors'),
      (['--to=torchvision', str(tmp_path), str(tmp_path / 'a.safetensors')],
       'is not a workdir, a checkpoint of one, or a directory'),
      (['--to=timm', directory, str(tmp_path / 'b.safetensors')],
       'resnet18 has no timm counterpart'),
      (['--to=torchvision', directory,
        str(tmp_path / 'missing' / 'c.safetensors')], 'cannot write'),
  ]
  for argv, said in cases:
    code, out, err = _export(capsys, *argv)
    assert (code, out) == (1, ''), (argv, err)
    assert err.count('\n') == 1 and err.startswith('error: ') and said in err, (
        argv, err)
  assert existing.read_bytes() == b'keep me'
  assert not any(name.endswith('.partial') for name in os.listdir(tmp_path))



@pytest.mark.slow
def test_a_damaged_checkpoint_is_one_line_naming_the_one_before(tmp_path,
                                                                capsys):
  # A workdir of a ViT-Ti/16 (on 32x32 images: 5.5 M parameters) with
  # checkpoints 2 and 4, as a run saves them (with checksums); one byte of
  # 4's array data flipped.
  workdir = tmp_path / 'work'
  kwargs = {'image_size': 32, 'gelu': 'exact'}  # timm's GELU.
  rng = np.random.default_rng(0)
  variables = traverse_util.unflatten_dict(
      {name: rng.standard_normal(shape, np.float32) for name, shape in
       target_shapes('vit_ti16', {**kwargs, 'num_classes': 3}).items()},
      sep='/')
  with store.opened(workdir) as mngr:
    for step in (2, 4):
      store.save(mngr, step, variables)
  (workdir / 'config.json').write_text(json.dumps(
      {'model': 'vit_ti16', 'model_kwargs': kwargs}))
  latest, before = workdir / 'checkpoints' / '4', workdir / 'checkpoints' / '2'
  damaged = max((p for p in latest.rglob('*') if p.is_file()),
                key=lambda p: p.stat().st_size)  # The arrays' data.
  data = bytearray(damaged.read_bytes())
  data[len(data) // 2] ^= 0xFF
  damaged.write_bytes(bytes(data))
  files = sorted(str(p) for p in workdir.rglob('*'))
  says = (f' is damaged ({damaged} does not match its checksum); nothing was '
          f'read from it: give an earlier one instead: {before} is intact.\n')
  dst = tmp_path / 'vit.safetensors'
  for src, which in ((workdir, f'the latest checkpoint of {workdir}, '
                                f'{latest},'),
                     (latest, f'the checkpoint {latest}')):
    code, out, err = _export(capsys, '--to=timm', str(src), str(dst))
    assert (code, out, err) == (1, '', f'error: {which}{says}')
  assert not dst.exists()
  assert sorted(str(p) for p in workdir.rglob('*')) == files  # Only read.
  code, _, err = _export(capsys, '--to=timm', str(before), str(dst))
  assert code == 0, err  # The one named instead.


@pytest.mark.parametrize('content', [
    b'\x89PNG\r\n\x1a\n\xff', b'[1, 2]', b'{"dataset": "mnist"}',
    b'{"model": "resnet18", "model_kwargs": 5}',
], ids=['binary', 'list', 'no-model', 'bad-kwargs'])
def test_a_damaged_config_json_is_one_line_naming_it(tmp_path, capsys,
                                                     content):
  (tmp_path / 'config.json').write_bytes(content)
  code, out, err = _export(capsys, '--to=timm', str(tmp_path),
                           str(tmp_path / 'out.safetensors'))
  assert (code, out, err) == (1, '', (
      f"error: {tmp_path / 'config.json'} is damaged (not a JSON object with "
      "the model's name and its model_kwargs); restore it, or write "
      '{"model": NAME, "model_kwargs": {...}} into it as the model was '
      'made.\n'))
  assert (tmp_path / 'config.json').read_bytes() == content

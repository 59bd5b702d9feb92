"""zoo.load_pretrained, `python -m recipes.convert`, and fine-tuning from its
checkpoint with --config.init_from (batch statistics included).

These run without torch: the files are the fixtures of
tests/convert_helpers.py, named as torchvision's and Google's files are (the
conversions themselves are verified against the originals in
test_convert_torchvision.py, test_convert_timm.py and
test_convert_big_vision.py).
"""

import json
import os
import re
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow_datasets as tfds
from flax import traverse_util

import zoo
from recipes import convert as command
from recipes import experiment, train
from recipes.checkpoint import converted, resume
from recipes.config import defaults
from recipes.data.sources import tfds_source
from tests.convert_helpers import (GoogleViT, google_vit_npz,
                                   torchvision_resnet18_state_dict,
                                   write_safetensors, zoo_logits)
from tests.helpers import (ROOT, command_env, config_from_command_line,
                           small_disk)
from tests.hub_server import serve_resnet18
from tests.idx_files import write_fashion_mnist
from zoo import convert

SIZES = GoogleViT()


@pytest.fixture(name='vit_file')
def _vit_file(tmp_path):
  path = tmp_path / 'Ti_16.npz'
  np.savez(path, **google_vit_npz(SIZES, 'vit_jax'))
  return path


@pytest.mark.slow
def test_load_pretrained_gives_the_files_model_and_variables(vit_file):
  model, variables = zoo.load_pretrained('vit_ti16', vit_file)
  assert (model.gelu, model.patch_size, model.image_size, model.pool,
          model.num_classes) == ('tanh', 16, 48, 'token', SIZES.num_classes)
  converted = convert.load(vit_file)
  flat = traverse_util.flatten_dict(variables, sep='/')
  assert set(flat) == set(traverse_util.flatten_dict(converted.variables,
                                                     sep='/'))
  x = np.random.default_rng(0).normal(size=(1, 3, 48, 48)).astype(np.float32)
  logits = np.asarray(model.apply(variables, x.transpose(0, 2, 3, 1)))
  np.testing.assert_allclose(
      logits, zoo_logits('vit_ti16', converted.kwargs, converted.variables,
                         x), rtol=1e-5, atol=1e-5)
  # The name may be left out (the file's), or be timm's.
  assert zoo.load_pretrained(None, vit_file)[0].hidden_size == 192
  assert zoo.load_pretrained('vit_tiny_patch16_224',
                             vit_file)[0].hidden_size == 192


def test_a_file_that_does_not_fit_is_one_error_naming_the_tensor(vit_file):
  with pytest.raises(ValueError) as error:
    zoo.load_pretrained('vit_s16', vit_file)
  message = str(error.value)
  assert "'embedding/kernel'" in message and '\n' not in message
  with pytest.raises(ValueError, match='unknown model'):
    zoo.load_pretrained('vit_x16', vit_file)


@pytest.mark.parametrize('argument', [
    {'num_classes': 0}, {'num_classes': -3}, {'num_classes': 2.5},
    {'num_classes': True}, {'image_size': 0}, {'image_size': 224.0}])
def test_sizes_that_are_not_positive_ints_are_one_error(vit_file, argument):
  (name, value), = argument.items()
  with pytest.raises(ValueError, match=re.escape(
      f'{name} must be a positive int, not {value!r}.')):
    zoo.load_pretrained('vit_ti16', vit_file, **argument)


@pytest.mark.slow  # Compiles the ViT's initialization for the new head.
def test_another_number_of_classes_reinitializes_the_head_and_says_so(
    vit_file, caplog):
  with caplog.at_level('WARNING'):
    model, variables = zoo.load_pretrained('vit_ti16', vit_file,
                                           num_classes=10)
  assert model.num_classes == 10
  assert ('params/head/kernel, params/head/bias re-initialized' in caplog.text
          and f'{SIZES.num_classes} classes, not 10' in caplog.text)
  assert variables['params']['head']['kernel'].shape == (192, 10)
  assert not np.asarray(variables['params']['head']['kernel']).any()
  np.testing.assert_array_equal(
      variables['params']['cls'],
      convert.load(vit_file).variables['params']['cls'])


def _convert(argv, capsys):
  """(exit status, stdout, stderr) of `python -m recipes.convert ARGV`, in
  this process."""
  try:
    status = command.main([str(a) for a in argv])
  except SystemExit as e:  # argparse's usage errors.
    status = e.code
  out, err = capsys.readouterr()
  return status, out, err


def _resnet18_checkpoint(tmp_path, capsys):
  """A torchvision-named ResNet-18 file and its conversion by the command."""
  write_safetensors(tmp_path / 'resnet18.safetensors',
                    torchvision_resnet18_state_dict())
  status, out, err = _convert(['--source=torchvision',
                               tmp_path / 'resnet18.safetensors',
                               tmp_path / 'r18'], capsys)
  assert status == 0, err
  assert f'--config.model=resnet18 --config.init_from={tmp_path}/r18' in out
  record = json.loads((tmp_path / 'r18' / 'model.json').read_text())
  assert record['model'] == 'resnet18' and record['source'] == 'torchvision'
  return (str(tmp_path / 'r18'),
          convert.load(tmp_path / 'resnet18.safetensors').variables)


def test_a_relative_destination_is_made_absolute(tmp_path, capsys,
                                                 monkeypatch):
  write_safetensors(tmp_path / 'resnet18.safetensors',
                    torchvision_resnet18_state_dict())
  monkeypatch.chdir(tmp_path)
  status, out, err = _convert(['--source=torchvision', 'resnet18.safetensors',
                               'r18'], capsys)
  assert status == 0, err
  assert f'--config.init_from={tmp_path}/r18\n' in out
  assert sorted(os.listdir(tmp_path / 'r18')) == ['0', 'model.json']


def _flat(tree):
  return {k: np.asarray(v)
          for k, v in traverse_util.flatten_dict(tree, sep='/').items()}


def test_the_command_writes_what_init_from_reads_batch_statistics_too(
    tmp_path, capsys):
  _assert_init_from_reads(*_resnet18_checkpoint(tmp_path, capsys))


def _assert_init_from_reads(path, converted):
  """`--config.init_from=path` gives the `converted` ResNet-18 variables."""
  # This run's variables: ResNet-18 for 10 classes.
  model = zoo.create('resnet18', num_classes=10)
  target = nn.meta.unbox(jax.eval_shape(lambda: model.init(
      jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3)), train=False)))
  loaded, kept = resume.load_params(path, target)
  assert kept == ['params/Dense_0/bias', 'params/Dense_0/kernel']
  expected = {k: v for k, v in _flat(converted).items()
              if not k.startswith('params/Dense_0/')}
  assert set(loaded) == set(expected)
  assert any(k.startswith('batch_stats/') for k in loaded)
  for name, value in expected.items():
    np.testing.assert_array_equal(loaded[name], value, err_msg=name)


def _resnet18_run(monkeypatch, **overrides):
  """A ResNet-18 run on CIFAR-10 (mock data) with its moving average."""
  monkeypatch.setattr(tfds_source, 'first_unreachable_url', lambda b: None)
  config = defaults.get_config()
  config.update(model='resnet18', dataset='cifar10', batch_size=16,
                num_train_steps=1, ema_decay=0.99, **overrides)
  with tfds.testing.mock_data(num_examples=16):
    exp = experiment.build(config)
  return config, exp


def _assert_started_from(exp, state, converted):
  """`state` holds the `converted` ResNet-18 but its 1000-class head."""
  whole = exp.strategy.to_checkpoint(state)
  # Everything but the 1000-class head, the batch statistics included.
  for collection in ('params', 'batch_stats'):
    ours = _flat(getattr(whole, collection))
    theirs = _flat(converted[collection])
    assert set(ours) == set(theirs)
    differ = [k for k in ours if ours[k].shape != theirs[k].shape
              or not np.array_equal(ours[k], theirs[k])]
    assert differ == (['Dense_0/bias', 'Dense_0/kernel']
                      if collection == 'params' else []), differ
  assert whole.params['Dense_0']['kernel'].shape == (512, 10)
  # The parameters' moving average starts from them too.
  ema = _flat(whole.ema_params)
  for name, value in _flat(whole.params).items():
    np.testing.assert_array_equal(ema[name], value, err_msg=name)


@pytest.mark.slow  # Builds and initializes a ResNet-18 run: about 20 s.
def test_init_from_and_pretrained_put_the_weights_into_the_train_state(
    tmp_path, capsys, monkeypatch, caplog):
  """One ResNet-18 run, started from the command's conversion
  (--config.init_from) and from published weights (--config.pretrained)."""
  hub, state_dict = serve_resnet18(tmp_path, monkeypatch)
  try:  # Building the run downloads and converts the weights ...
    config, exp = _resnet18_run(monkeypatch, pretrained='tv_in1k')
  finally:
    hub.stop()
  with caplog.at_level('INFO'):  # ... and starting it reads the cache only.
    state = resume.init_from_weights(
        experiment.pretrained_weights(config).variables, 'resnet18.tv_in1k',
        exp.strategy, exp.create_state())
  converted = convert.convert(state_dict, 'torchvision').variables
  _assert_started_from(exp, state, converted)
  assert ('Initialized 60 parameter arrays and 40 batch statistics from '
          'resnet18.tv_in1k') in caplog.text

  path, converted = _resnet18_checkpoint(tmp_path, capsys)
  state = resume.init_from(path, exp.strategy, exp.create_state())
  _assert_started_from(exp, state, converted)


def test_command_mistakes_are_one_line(tmp_path, capsys, vit_file):
  (tmp_path / 'full').mkdir()
  (tmp_path / 'full' / 'x').write_text('x')
  cases = [
      (['--source=timx', vit_file, tmp_path / 'a'], 2,
       "error: argument --source: invalid choice: 'timx'"),
      (['--source=big_vision', tmp_path / 'no.npz', tmp_path / 'a'], 1,
       'error: checkpoint file'),
      (['--source=timm', vit_file, tmp_path / 'a'], 1,
       'is a big_vision checkpoint'),
      (['--source=big_vision', '--model=vit_b16', vit_file, tmp_path / 'a'],
       1, "its tensor 'embedding/kernel' has shape (16, 16, 3, 192) where "
       'vit_b16 with 16x16 patches needs (16, 16, 3, 768)'),
      (['--source=big_vision', vit_file, tmp_path / 'full'], 1,
       'is not empty'),
      (['--source=big_vision', vit_file], 2, 'error: the following '
       'arguments are required: dst_dir'),
  ]
  for argv, expected_status, expected in cases:
    status, out, err = _convert(argv, capsys)
    assert status == expected_status, (argv, err)
    assert out == '' and err.count('\n') == 1 and expected in err, (argv, err)
    assert err.startswith('error: ')
  assert not (tmp_path / 'a').exists()
  assert os.listdir(tmp_path / 'full') == ['x']


@pytest.mark.slow  # New processes, for the log as users see it.
def test_a_full_disk_is_one_line_and_the_same_command_then_succeeds(
    tmp_path, capsys):
  write_safetensors(tmp_path / 'resnet18.safetensors',
                    torchvision_resnet18_state_dict())

  def convert_to(dst):
    return subprocess.run(
        [sys.executable, '-m', 'recipes.convert', '--source=torchvision',
         str(tmp_path / 'resnet18.safetensors'), str(dst)],
        cwd=ROOT, env=command_env(), capture_output=True, text=True,
        timeout=300, check=False)

  # ResNet-18's 46 MB do not fit.
  with small_disk(tmp_path / 'disk', '8m') as disk:
    (disk / 'empty').mkdir()
    for dst in (disk / 'new', disk / 'empty'):
      done = convert_to(dst)
      assert done.returncode == 1 and done.stdout == '', done
      assert done.stderr.startswith(f'error: writing {dst} failed (')
      assert done.stderr.count('\n') == 1, done.stderr
      assert 'No space left on device' in done.stderr
    # At most orbax's unfinished checkpoint is left, which the next
    # conversion replaces.
    for dst in (disk / 'new', disk / 'empty'):
      left = os.listdir(dst) if dst.exists() else []
      assert all(converted.UNFINISHED in name for name in left), left
    subprocess.run(['mount', '-o', 'remount,size=200m', str(disk)],
                   check=True)
    for dst in (disk / 'new', disk / 'empty'):  # The same, in-process.
      status, _, err = _convert(['--source=torchvision',
                                 tmp_path / 'resnet18.safetensors', dst],
                                capsys)
      assert status == 0, err
      assert sorted(os.listdir(dst)) == ['0', 'model.json']
    _assert_init_from_reads(
        str(disk / 'empty'),
        convert.load(tmp_path / 'resnet18.safetensors').variables)


@pytest.mark.slow  # Compiles ViT-Ti's training step.
@pytest.mark.usefixtures('fast_compiles')
def test_convert_then_fine_tune_is_two_commands(tmp_path, capsys, caplog):
  """docs/pretrained.md's two commands, in-process: convert a Google ViT
  file, then train from it with the fine-tuning config (here on
  Fashion-MNIST-shaped files, 28x28 images in 4x4 patches, for one step).
  Both commands run as processes in tests/integration (test_gcs.py,
  test_first_contact.py and the train command's)."""
  np.savez(tmp_path / 'vit.npz',
           **google_vit_npz(GoogleViT(patch=4, grid=7), 'vit_jax'))
  write_fashion_mnist(str(tmp_path), num_train=16, num_test=8)
  status, out, err = _convert(['--source=big_vision', tmp_path / 'vit.npz',
                               tmp_path / 'converted'], capsys)
  assert status == 0, err
  assert '--config.model_kwargs.patch_size=4' in out
  config = config_from_command_line([
      'train', f'--config={ROOT}/configs/imagenet_vit_b16_finetune.py',
      f'--config.init_from={tmp_path / "converted"}',
      '--config.model=vit_ti16', '--config.model_kwargs.patch_size=4',
      '--config.image_size=28', '--config.dataset=fashion_mnist_idx',
      f'--config.data_dir={tmp_path}', '--config.train_split=train',
      '--config.eval_split=test', '--config.augment=none',
      '--config.batch_size=8', '--config.num_train_steps=1',
      '--config.warmup_steps=0', '--config.stall_timeout_seconds=0'])
  with caplog.at_level('INFO'):
    train.run(config, str(tmp_path / 'work'))
  # All but the patch embedding (1 channel here, 3 there) and the head
  # (10 classes, 7 there): 197 of ViT-Ti's 200 parameter arrays.
  assert (f'Initialized 197 parameter arrays from {tmp_path / "converted"}'
          in caplog.text), caplog.text[-3000:]
  assert ('trained from scratch: params/embedding/kernel, params/head/bias, '
          'params/head/kernel') in caplog.text, caplog.text[-3000:]

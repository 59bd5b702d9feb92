"""`python -m recipes.zero_shot`, run in process on a tiny SigLIP with random
weights, written in transformers' layout by our own exporter, a SentencePiece
tokenizer trained here and PNG folders: its predictions are the argmax of
SigLIP's logits computed here through zoo.siglip for the same pixels and
token ids (made without the command's code), its accuracy is counted right,
the CSV has a row per image, a Hub repository downloads, and each bad input
is one line with status 1. (test_zero_shot_transformers.py compares its
logits and ids with transformers'.)"""

import csv
import io
import json
import os
import re

import jax
import numpy as np
import pytest
import tensorflow as tf
from flax.core import meta
from PIL import Image

import zoo
from recipes import zero_shot
from recipes.data.text import prompts
from tests.helpers import write_png_folder
from zoo import siglip
from zoo.convert import transformers_siglip

sentencepiece = pytest.importorskip('sentencepiece')
safetensors_numpy = pytest.importorskip('safetensors.numpy')

pytestmark = pytest.mark.usefixtures('fast_compiles')

# The converter's test sizes: heads of 64 features, as siglip_b16's (a file
# does not say how many heads it has; the named model's width does).
IMAGE = dict(hidden_size=128, num_layers=2, num_heads=2, mlp_dim=192,
             patch_size=8, image_size=32)
TEXT = dict(vocab_size=64, hidden_size=128, num_layers=2, num_heads=2,
            mlp_dim=192, max_length=16, projection_size=None)
CLASSES = ('cat', 'dog', 'golden_retriever')
TEMPLATES = 'a photo of a {}.|A blurry photo of the {}!'
SAMPLE = ('a photo of a cat. a blurry photo of the dog. the golden retriever '
          'sat on a mat; a picture of a small red fox').split('. ') * 30


def _tiny():
  return siglip.SigLIP(zoo.create('siglip_b16', **IMAGE),
                       zoo.create('siglip_b16_text', **TEXT))


def write_tokenizer(folder):
  """SigLIP's kind of tokenizer: SentencePiece with '<pad>' 0, '</s>' 1,
  '<unk>' 2, and a tokenizer_config.json that pads with '</s>'."""
  model = io.BytesIO()
  sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=iter(SAMPLE), model_writer=model, vocab_size=60,
      hard_vocab_limit=False, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
      character_coverage=1.0, minloglevel=2)
  with open(os.path.join(folder, 'spiece.model'), 'wb') as f:
    f.write(model.getvalue())
  with open(os.path.join(folder, 'tokenizer_config.json'), 'w') as f:
    json.dump({'eos_token': '</s>', 'pad_token': '</s>',
               'unk_token': '<unk>'}, f)


@pytest.fixture(scope='module')
def siglip_folder(tmp_path_factory):
  """A SiglipModel's folder (model.safetensors, the tokenizer) and the
  model's variables."""
  folder = str(tmp_path_factory.mktemp('siglip'))
  model = _tiny()
  variables = jax.jit(model.init)(
      jax.random.PRNGKey(0), np.zeros((1, 32, 32, 3), np.float32),
      np.zeros((1, 16), np.int32))
  variables = jax.tree.map(np.asarray, meta.unbox(variables))
  params = variables['params']
  params['logit_scale'], params['logit_bias'] = (
      np.array([np.log(30.0)], np.float32), np.array([-3.0], np.float32))
  tensors = transformers_siglip.export_model(
      'siglip_b16', IMAGE, 'siglip_b16_text', TEXT, variables)
  safetensors_numpy.save_file(tensors, os.path.join(folder,
                                                    'model.safetensors'))
  write_tokenizer(folder)
  return folder, variables


def pictures(n, seed=0):
  """n images of other sizes, some grey."""
  rng = np.random.default_rng(seed)
  return [rng.integers(0, 256, (20 + 3 * i, 30 - 2 * i) + (
      () if i % 3 == 2 else (3,)), dtype=np.uint8) for i in range(n)]


@pytest.fixture(scope='module')
def class_folder(tmp_path_factory):
  """FOLDER/{val,test}/{label}_{class}/NNNNN.png: 7 images of 3 classes in
  val, 2 in test."""
  folder = str(tmp_path_factory.mktemp('images'))
  labels = [0, 1, 2, 0, 1, 2, 2]
  write_png_folder(folder, {'val': (pictures(7), labels),
                            'test': (pictures(2), [0, 1])}, CLASSES)
  return folder, labels


def _run(*argv) -> int:
  return zero_shot.main([str(a) for a in argv])


def _pixels(file) -> np.ndarray:
  """The image tower's input, made here: RGB, resized bilinearly to 32x32
  (big_vision's resize), in [-1, 1]."""
  image = np.asarray(Image.open(file).convert('RGB'), np.float32) / 255
  image = tf.image.resize(image, [32, 32]).numpy()
  return (image - 0.5) / 0.5


def _ids(folder, texts) -> np.ndarray:
  """SigLIP's token ids, made here: canonical text, EOS, '</s>' to 16."""
  processor = sentencepiece.SentencePieceProcessor(
      model_file=os.path.join(folder, 'spiece.model'))
  ids = np.ones((len(texts), 16), np.int32)  # '</s>'
  for row, text in zip(ids, texts):
    text = re.sub(r'[^\w\s]|_', '', text.lower())
    encoded = processor.encode(' '.join(text.split()))[:15] + [1]
    row[:len(encoded)] = encoded
  return ids


def _logits(variables, folder, files, classes, templates) -> np.ndarray:
  """SigLIP's logits of each file against each class, through zoo.siglip:
  a class's prompts' embeddings averaged and normalized."""
  model = _tiny()
  texts = [t.replace('{}', c) for c in classes for t in templates]
  images = np.stack([_pixels(f) for f in files])
  out = model.apply(variables, images, _ids(folder, texts))
  text = np.asarray(out.text_embeddings).reshape(len(classes),
                                                 len(templates), -1)
  mean = text.mean(axis=1)
  mean /= np.linalg.norm(mean, axis=-1, keepdims=True)
  params = variables['params']
  return (np.asarray(out.image_embeddings) @ mean.T *
          np.exp(params['logit_scale']) + params['logit_bias'])


def _files(folder):
  return sorted(os.path.join(root, f) for root, _, files in os.walk(folder)
                for f in files)


def test_predictions_are_siglips_argmax_and_accuracy_is_counted(
    siglip_folder, class_folder, capsys):
  weights, variables = siglip_folder
  images, _ = class_folder
  status = _run(f'--weights={weights}', '--model=siglip_b16',
                f'--templates={TEMPLATES}', '--top_k=2', '--batch_size=3',
                f'folder:{images}/val')
  out, err = capsys.readouterr()
  assert status == 0, err
  files = _files(f'{images}/val')
  names = [c.replace('_', ' ') for c in CLASSES]
  expected = _logits(variables, weights, files,
                     [f'{i} {n}' for i, n in enumerate(names)],
                     TEMPLATES.split('|'))
  lines = out.splitlines()
  assert len(lines) == len(files) + 1
  for line, file, logits in zip(lines, files, expected):
    name, predicted = line.split(': ')
    assert name == os.path.relpath(file, f'{images}/val')
    best = np.argsort(-logits)[:2]
    shown = [p.rsplit(' ', 1) for p in predicted.split(', ')]
    assert [c for c, _ in shown] == [f'{i} {names[i]}' for i in best]
    np.testing.assert_allclose([float(p) for _, p in shown],
                               1 / (1 + np.exp(-logits[best])), atol=2e-3)
  # In the files' order: by class folder ('0_cat', ...), then name.
  labels = [int(os.path.basename(os.path.dirname(f))[0]) for f in files]
  top1 = int((expected.argmax(axis=1) == labels).sum())
  assert top1 not in (0, len(files))  # The count tells right from wrong.
  assert lines[-1].startswith(
      f'top-1 accuracy {100 * top1 / 7:.2f}% ({top1}/7), top-3 100.00% '
      '(7/7) over 7 images of 3 classes; ')
  assert 'images/s' in lines[-1]


@pytest.mark.slow  # Another folder and batch shape: compiles again.
def test_a_flat_folder_is_labeled_into_a_csv(siglip_folder, tmp_path,
                                             capsys):
  weights, variables = siglip_folder
  files = [tmp_path / 'images' / f'p{i}.png' for i in range(5)]
  os.makedirs(files[0].parent)
  for file, picture in zip(files, pictures(5, seed=1)):
    Image.fromarray(picture).save(file)
  output = tmp_path / 'predictions.csv'
  status = _run(f'--weights={weights}/model.safetensors',
                f'--tokenizer={weights}', '--model=siglip_b16',
                '--classes=red fox, mat,cat', f'--output={output}',
                files[0].parent)
  out, err = capsys.readouterr()
  assert status == 0, err
  assert out.splitlines() == [
      'Labeled 5 images with 3 classes; ' + out.split('; ')[1].split('\n')[0],
      f'Wrote the predictions to {output}.']
  with open(output, newline='') as f:
    rows = list(csv.reader(f))
  assert rows[0] == ['file', 'class', 'prediction_1', 'score_1',
                     'prediction_2', 'score_2', 'prediction_3', 'score_3']
  expected = _logits(variables, weights, files,
                     ['red fox', 'mat', 'cat'], [prompts.DEFAULT])
  assert [r[0] for r in rows[1:]] == [f'p{i}.png' for i in range(5)]
  for row, logits in zip(rows[1:], expected):
    assert row[1] == ''
    assert row[2::2] == [['red fox', 'mat', 'cat'][i]
                         for i in np.argsort(-logits)]


@pytest.mark.slow  # A local Hub server and a download.
def test_a_hub_repository_is_downloaded_once(siglip_folder, class_folder,
                                             tmp_path, monkeypatch, capsys):
  from tests.hub_server import HubServer  # pylint: disable=g-import-not-at-top
  weights, _ = siglip_folder
  files = {f'google/siglip-tiny/{name}': open(os.path.join(weights, name),
                                              'rb').read()
           for name in ('model.safetensors', 'spiece.model',
                        'tokenizer_config.json')}
  server = HubServer(files)
  monkeypatch.setenv('HF_ENDPOINT', server.url)
  monkeypatch.setenv('HF_HUB_CACHE', str(tmp_path / 'hf'))
  monkeypatch.setenv('JAX_MODEL_ZOO_WEIGHTS', str(tmp_path / 'zoo'))
  images, _ = class_folder
  try:
    argv = ('--weights=google/siglip-tiny', '--model=siglip_b16',
            f'{images}/val')
    assert _run(*argv) == 0
    first = capsys.readouterr().out
    assert _run(*argv) == 0  # From Hugging Face's cache.
    assert capsys.readouterr().out.split('; ')[0] == first.split('; ')[0]
  finally:
    server.stop()
  # The tokenizer.json it looked for first is not there; the rest came once.
  gets = [r for r in server.requests
          if r.startswith('GET') and '/resolve/' in r]
  assert sorted(r.split('/')[-1] for r in gets) == [
      'model.safetensors', 'spiece.model', 'tokenizer_config.json']


def _write_large_vocabulary(path):
  tokenizers = pytest.importorskip('tokenizers')
  vocab = {f'w{i}': i for i in range(100)}
  vocab['</s>'] = 100
  tokenizers.Tokenizer(tokenizers.models.WordLevel(
      vocab, unk_token='w0')).save(str(path))
  return path


@pytest.mark.parametrize('case, says', [
    ('no folder', 'does not exist'),
    ('empty folder', 'holds no JPEG or PNG images'),
    ('flat without classes', 'name the classes'),
    ('template', 'must hold one {}'),
    ('no tokenizer', 'holds none of tokenizer.json'),
    ('vocabulary', 'has 101 tokens but the text tower'),
    ('not siglip', 'holds no transformers SigLIP weights'),
    ('no weights', 'holds none of model.safetensors'),
    ('top_k 0', '--top_k=0 must be 1 or more'),
    ('top_k negative', '--top_k=-2 must be 1 or more'),
    ('classes', '--classes names 2 classes but the folder'),
    ('splits', 'choose one with --split'),
])
def test_bad_input_is_one_line_and_status_1(siglip_folder, class_folder,
                                            tmp_path, capsys, case, says):
  weights, _ = siglip_folder
  images, _ = class_folder
  os.makedirs(tmp_path / 'empty')
  argv = {'weights': f'--weights={weights}', 'model': '--model=siglip_b16',
          'images': f'{images}/val'}
  if case == 'no folder':
    argv['images'] = tmp_path / 'nowhere'
  elif case == 'empty folder':
    argv['images'] = tmp_path / 'empty'
  elif case == 'flat without classes':
    Image.fromarray(pictures(1)[0]).save(tmp_path / 'empty' / 'a.png')
    argv['images'] = tmp_path / 'empty'
  elif case == 'template':
    argv['templates'] = '--templates=a photo|a {}'
  elif case == 'no tokenizer':
    argv['tokenizer'] = f'--tokenizer={tmp_path / "empty"}'
  elif case == 'vocabulary':
    argv['tokenizer'] = ('--tokenizer=' + str(
        _write_large_vocabulary(tmp_path / 'tokenizer.json')))
  elif case == 'not siglip':
    safetensors_numpy.save_file({'fc.weight': np.zeros((2, 2), np.float32)},
                                str(tmp_path / 'model.safetensors'))
    argv['weights'] = f'--weights={tmp_path / "model.safetensors"}'
  elif case == 'no weights':
    argv['weights'] = f'--weights={tmp_path / "empty"}'
  elif case.startswith('top_k'):
    argv['top_k'] = f'--top_k={0 if case == "top_k 0" else -2}'
  elif case == 'classes':
    argv['classes'] = '--classes=a,b'
  elif case == 'splits':
    argv['images'] = images
  status = _run(*argv.values())
  out, err = capsys.readouterr()
  assert status == 1
  assert err.startswith('error: ') and err.count('\n') == 1, err
  assert says in err, err
  assert 'Traceback' not in err and out == ''

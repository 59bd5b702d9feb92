"""Labelled text for a text classifier: the sources' labels as classes
(recipes/data/sources/labelled_texts.py), the prepared records
(recipes/data/text/labelled_records.py) and their batches
(recipes/data/pipeline/token_batches.py)."""

import json
import os

import numpy as np
import pytest

from recipes.data import prepare
from recipes.data.pipeline import token_batches
from recipes.data.sources import (fortune_source, jsonl_source,
                                  labelled_texts, parquet_source)
from recipes.data.text import labelled_records
from recipes.runtime.errors import UserError
from tests.helpers import (CLASS_WORDS, write_labelled_text,
                           write_word_tokenizer)


def _jsonl(path, rows) -> str:
  with open(path, 'w') as f:
    for row in rows:
      f.write(json.dumps(row) + '\n')
  return str(path)


def _fortunes(folder, collections: dict[str, list[str]]) -> str:
  """A folder of fortune files (with their .dat beside them)."""
  os.makedirs(folder, exist_ok=True)
  for name, entries in collections.items():
    with open(os.path.join(folder, name), 'w') as f:
      f.write('\n%\n'.join(entries) + '\n%\n')
    open(os.path.join(folder, name + '.dat'), 'wb').close()
  return str(folder)


def test_string_labels_are_sorted_class_names(tmp_path):
  file = _jsonl(tmp_path / 'a.jsonl', [
      {'text': 'one', 'label': 'pos'}, {'text': '', 'label': 'zzz'},
      {'text': 'two', 'label': 'neg'}, {'text': 'three', 'label': 'pos'}])
  text = labelled_texts.labelled(jsonl_source.open(file, 'text', 'label'))
  # The row without text is no document: its label is no class.
  assert text.class_names == ('neg', 'pos')
  assert text.labels['train'].tolist() == [1, 0, 1]
  assert text.splits['train'].read([1]) == ['two']


def test_integer_labels_are_the_class_ids(tmp_path):
  file = _jsonl(tmp_path / 'a.jsonl', [{'text': 'a', 'label': 2},
                                       {'text': 'b', 'label': 0}])
  text = labelled_texts.labelled(jsonl_source.open(file, 'text', 'label'))
  assert text.class_names == ('0', '1', '2')
  assert text.labels['train'].tolist() == [2, 0]


def test_parquet_labels(tmp_path):
  pa = pytest.importorskip('pyarrow')
  pq = pytest.importorskip('pyarrow.parquet')
  pq.write_table(pa.table({'body': ['x', None, 'y'], 'y': ['b', 'c', 'a']}),
                 tmp_path / 'd.parquet')
  text = labelled_texts.labelled(parquet_source.open(
      str(tmp_path / 'd.parquet'), 'body', 'y'))
  assert text.class_names == ('a', 'b')
  assert text.labels['train'].tolist() == [1, 0]


def test_fortune_collections_are_the_classes_and_classes_picks_some(
    tmp_path):
  folder = _fortunes(tmp_path / 'f', {
      'art': [f'art {i}' for i in range(30)],
      'zippy': [f'YOW {i}' for i in range(30)],
      'law': [f'law {i}' for i in range(30)]})
  source = fortune_source.open(folder, '', 'collection')
  every = labelled_texts.labelled(source)
  assert every.class_names == ('art', 'law', 'zippy')
  picked = labelled_texts.labelled(source, ('zippy', 'art'))
  assert picked.class_names == ('art', 'zippy')
  for split in ('train', 'validation'):
    texts, labels = picked.splits[split], picked.labels[split]
    for text, label in zip(texts.read(range(len(texts))), labels):
      assert text.startswith({0: 'art', 1: 'YOW'}[label])
  # The validation rule of the unlabelled source: CRC-32 % 20.
  assert sum(len(t) for t in picked.splits.values()) == 60
  assert len(picked.splits['validation']) == len(
      fortune_source.open(folder).splits['validation']) - sum(
          t.startswith('law') for t in fortune_source.open(folder).splits[
              'validation'].read(range(len(fortune_source.open(
                  folder).splits['validation']))))


@pytest.mark.parametrize('rows, labels, classes, error', [
    ([{'text': 'a'}], 'label', (), "has no label column 'label' (it has "
     'text)'),
    ([{'text': 'a', 'label': 'x'}, {'text': 'b', 'label': 'x'}], 'label', (),
     "has one class ('x'); a classifier needs two or more"),
    ([{'text': 'a', 'label': None}], 'label', (), "label 'label' is None, "
     'not a class'),
    ([{'text': 'a', 'label': 1}, {'text': 'b', 'label': 'x'}], 'label', (),
     'mixes integers and strings'),
    ([{'text': 'a', 'label': 'x'}, {'text': 'b', 'label': 'y'}], 'label',
     ('x', 'w'), "has no class 'w' (it has 'x', 'y')"),
    ([{'text': '', 'label': 'x'}, {'text': None, 'label': 'y'}], 'label', (),
     "column 'text' of split 'train'"),
])
def test_bad_labels_are_one_line(tmp_path, rows, labels, classes, error):
  file = _jsonl(tmp_path / 'a.jsonl', rows)
  with pytest.raises(UserError, match='.*'.join(
      map(__import__('re').escape, error.split('(')))) as e:
    labelled_texts.labelled(jsonl_source.open(file, 'text', labels), classes)
  assert '\n' not in str(e.value)


def test_fortune_has_one_label_column(tmp_path):
  folder = _fortunes(tmp_path / 'f', {'art': ['a', 'b']})
  with pytest.raises(UserError, match="the one label of fortune files is "
                     "'collection'"):
    fortune_source.open(folder, '', 'label')


@pytest.fixture(scope='module', name='prepared')
def _prepared(tmp_path_factory):
  """(the prepared directory at seq_len 6, the tokenizer file, the text)."""
  root = tmp_path_factory.mktemp('labelled')
  words = [w for ws in CLASS_WORDS.values() for w in ws]
  tokenizer = write_word_tokenizer(root / 'tok', words)
  text = write_labelled_text(root / 'text')
  dst = str(root / 'tokens')
  prepare.prepare(f'jsonl:{text}', dst, 40, text=prepare.Text(
      tokenizer, 6, label_column='label'))
  return dst, tokenizer, text


def test_prepared_documents_start_end_truncate_and_pad(prepared):
  dst, tokenizer, text = prepared
  manifest = json.load(open(os.path.join(dst, 'manifest.json')))
  assert manifest['class_names'] == ['cat', 'dog', 'eel']
  tokens = manifest['tokens']
  # [CLS] 0, [SEP] 1, [PAD] 2 of the word tokenizer.
  assert (tokens['start_id'], tokens['eos_id'], tokens['pad_id']) == (0, 1, 2)
  assert manifest['splits']['train']['num_examples'] == 96  # One a document.
  vocab = json.load(open(tokenizer))['model']['vocab']
  rows = [json.loads(line) for line in open(os.path.join(text,
                                                         'train.jsonl'))]
  data = token_batches.open(dst, eval_splits=['train'])
  assert data.class_names == ('cat', 'dog', 'eel') and data.num_classes == 3
  assert data.image_shape == (6,)
  batch = next(data.eval_batches(batch_size=8))
  assert set(batch) == {'tokens', 'mask', 'label'}
  for i in range(8):
    ids = [vocab[w] for w in rows[i]['text'].split()]
    expected = [0, *ids[:4], 1]  # Cut to 6 with the start and end kept.
    expected += [2] * (6 - len(expected))
    assert batch['tokens'][i].tolist() == expected
    assert batch['mask'][i].tolist() == [j < min(len(ids) + 2, 6)
                                         for j in range(6)]
    assert batch['label'][i] == ['cat', 'dog', 'eel'].index(rows[i]['label'])


def test_batches_are_a_function_of_seed_and_step_and_eval_pads(prepared):
  dst, _, _ = prepared
  data = token_batches.open(dst, eval_splits=['validation'])
  whole = list(data.train_batches(batch_size=16, seed=3, start_step=0,
                                  num_steps=9))
  resumed = list(data.train_batches(batch_size=16, seed=3, start_step=7,
                                    num_steps=9))
  for a, b in zip(whole[7:], resumed):
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])
  evals = list(data.eval_batches(batch_size=16))
  assert len(evals) == 2  # 21 documents: 16 and 5 padded to 16.
  assert evals[1]['mask'][:5, 0].all() and not evals[1]['mask'][5:].any()


def test_the_prepare_command_reports_and_verifies(prepared, tmp_path, capsys):
  _, tokenizer, text = prepared
  dst = str(tmp_path / 'out')
  assert prepare.main([f'jsonl:{text}', dst, f'--tokenizer={tokenizer}',
                       '--seq_len=8', '--label_column=label',
                       '--classes=eel,cat', '--verify']) == 0
  out = capsys.readouterr().out
  assert 'documents of 2 classes' in out and 'text classifier' in out
  assert labelled_records.is_labelled(json.load(open(os.path.join(
      dst, 'manifest.json'))))
  assert token_batches.open(dst).class_names == ('cat', 'eel')
  assert prepare.main([f'jsonl:{text}', str(tmp_path / 'x'),
                       f'--tokenizer={tokenizer}', '--seq_len=8',
                       '--classes=eel']) == 1
  assert 'name the label column too' in capsys.readouterr().err


def test_bytes_start_and_end_with_the_end_of_text_id(tmp_path):
  text = write_labelled_text(tmp_path / 'text', num_train=6,
                             num_validation=3)
  dst = str(tmp_path / 'tokens')
  prepare.prepare(f'jsonl:{text}', dst, 100, text=prepare.Text(
      'bytes', 128, label_column='label'))
  batch = next(token_batches.open(dst).eval_batches(batch_size=1))
  first = json.loads(open(os.path.join(text, 'train.jsonl')).readline())
  ids = list(first['text'].encode())
  assert batch['tokens'][0, :len(ids) + 2].tolist() == [256, *ids, 256]
  assert batch['mask'][0].sum() == len(ids) + 2

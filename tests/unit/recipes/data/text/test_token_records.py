"""`prepare SRC DST --tokenizer=FILE --seq_len=N` in process: the records
are the packing of the tokenizer's ids, with the images' manifest and
checksums; a stopped prepare continues to the same files; every mistake
is one line and writes nothing."""

import json
import logging
import os
import re

import numpy as np
import pytest

from recipes.data import prepare
from recipes.data.sources import array_records, jsonl_source
from recipes.data.text import packing, token_records
from recipes.data.text import tokenizer as tokenizer_lib
from recipes.runtime.errors import UserError
from tests.helpers import prepare_in_process
from tests.unit.recipes.data.text.conftest import documents, write_jsonl

SEQ_LEN = 16
PER_SHARD = 10  # Documents.


@pytest.fixture
def corpus(tmp_path):
  folder = tmp_path / 'corpus'
  folder.mkdir()
  write_jsonl(folder / 'train.jsonl', documents(45))
  write_jsonl(folder / 'validation.jsonl', documents(7, seed=1))
  return folder


def _text(bpe_file, seq_len=SEQ_LEN, column=''):
  return prepare.Text(bpe_file, seq_len, column)


def _prepare(corpus, dst, bpe_file, **kwargs):
  return prepare.prepare(f'jsonl:{corpus}', str(dst), PER_SHARD,
                         text=_text(bpe_file, **kwargs))


def _files(path):
  return {name: (path / name).read_bytes() for name in os.listdir(path)}


def test_the_records_are_the_packed_ids_of_each_shard(corpus, tmp_path,
                                                       bpe_file):
  dst = tmp_path / 'tokens'
  written = _prepare(corpus, dst, bpe_file)
  tokenizer = tokenizer_lib.load(bpe_file)
  records = token_records.open(str(dst))
  assert records.seq_len == SEQ_LEN
  texts = [t for t in documents(45) if t]  # Empty rows are no documents.
  sequences = records.splits['train']
  tokens, segments = sequences.read(range(len(sequences)))
  expected = [packing.pack(tokenizer.encode_batch(texts[k:k + PER_SHARD]),
                           SEQ_LEN, eos_id=0, pad_id=1)
              for k in range(0, len(texts), PER_SHARD)]
  np.testing.assert_array_equal(tokens, np.concatenate([t for t, _ in
                                                        expected]))
  np.testing.assert_array_equal(segments, np.concatenate([s for _, s in
                                                          expected]))
  # Every document's ids and its EOS come back, in order: each shard's
  # first token, then its targets that are not padding.
  stream = []
  for t, s in expected:
    stream += [t[0, 0], *packing.model_inputs(t, s)['targets'][s[:, 1:] > 0]]
  assert stream == [i for text in texts for i in tokenizer.encode(text) + [0]]
  assert written.examples_written == len(texts) + len(
      [t for t in documents(7, seed=1) if t])


def test_the_manifest_records_the_tokenizer_and_checksums(corpus, tmp_path,
                                                          bpe_file):
  dst = tmp_path / 'tokens'
  _prepare(corpus, dst, bpe_file)
  manifest = json.loads((dst / 'manifest.json').read_text())
  assert manifest['source'] == f'jsonl:{corpus}'
  assert 'class_names' not in manifest
  assert manifest['tokens'] == {
      'tokenizer': bpe_file,
      'tokenizer_sha256': array_records.sha256(bpe_file),
      'text_column': 'text', 'seq_len': SEQ_LEN,
      'vocab_size': tokenizer_lib.load(bpe_file).vocab_size,
      'bos_id': None, 'eos_id': 0, 'pad_id': 1}
  train = manifest['splits']['train']
  assert train['num_documents'] == len([t for t in documents(45) if t])
  assert [s['num_documents'] for s in train['shards']] == [10, 10, 10, 8]
  assert sum(s['num_examples'] for s in train['shards']) == (
      train['num_examples'])
  for shard in train['shards']:
    assert shard['sha256'] == array_records.sha256(dst / shard['file'])
  assert array_records.verify(str(dst))[0] == 5


def test_a_stopped_prepare_continues_to_the_same_files(corpus, tmp_path,
                                                       bpe_file, monkeypatch):
  whole = tmp_path / 'whole'
  _prepare(corpus, whole, bpe_file)
  dst = tmp_path / 'stopped'
  reads = []
  real = jsonl_source._Lines.read  # pylint: disable=protected-access

  def read_then_stop(self, indices):
    reads.append(1)
    if len(reads) == 3:
      raise KeyboardInterrupt
    return real(self, indices)

  monkeypatch.setattr(jsonl_source._Lines, 'read', read_then_stop)  # pylint: disable=protected-access
  with pytest.raises(KeyboardInterrupt):
    _prepare(corpus, dst, bpe_file)
  assert not (dst / 'manifest.json').exists()
  monkeypatch.undo()
  written = _prepare(corpus, dst, bpe_file)
  assert written.shards_written == 3  # Two were finished before the stop.
  assert _files(dst) == _files(whole)


def test_another_tokenizer_or_length_does_not_continue(corpus, tmp_path,
                                                       bpe_file):
  dst = tmp_path / 'tokens'
  _prepare(corpus, dst, bpe_file)
  before = _files(dst)
  with pytest.raises(UserError, match='tokens.seq_len 16 there, 8 here\\)'):
    _prepare(corpus, dst, bpe_file, seq_len=8)
  assert _files(dst) == before


def test_images_and_tokens_are_not_mistaken(corpus, tmp_path, bpe_file):
  dst = tmp_path / 'tokens'
  _prepare(corpus, dst, bpe_file)
  with pytest.raises(UserError, match='holds token sequences .* not images'):
    array_records.open(str(dst))
  with pytest.raises(UserError, match='is text: give the tokenizer'):
    prepare.prepare('jsonl:' + str(corpus), str(dst), PER_SHARD)


@pytest.mark.parametrize('content, says', [
    ('[{"text": ""}, {"text": null}]', "column 'text' of split 'train' of "
     'jsonl:.* has no text'),
    (b'{"text": "ok"}\n{"text": "\xff"}\n', 'line 2 of .* is not UTF-8'),
])
def test_bad_text_is_one_line_and_nothing_is_written(tmp_path, bpe_file,
                                                     content, says):
  path = tmp_path / 'bad.jsonl'
  if isinstance(content, str):
    write_jsonl(path, [r['text'] for r in json.loads(content)])
  else:
    path.write_bytes(content)
  dst = tmp_path / 'tokens'
  code, _, err = prepare_in_process(f'jsonl:{path}', dst,
                                    f'--tokenizer={bpe_file}', '--seq_len=8')
  assert code == 1 and len(err.splitlines()) == 1
  assert re.search(says, err), err
  assert not dst.exists()


@pytest.mark.parametrize('flags, says', [
    (['--tokenizer=MISSING', '--seq_len=8'], 'there is no tokenizer file'),
    (['--tokenizer=DAMAGED', '--seq_len=8'], 'tokenizer file .* cannot be '
     'read'),
    (['--tokenizer=BPE', '--seq_len=0'], '--seq_len=0 must be a positive'),
    (['--tokenizer=BPE', '--seq_len=-3'], '--seq_len=-3 must be a positive'),
    (['--tokenizer=BPE'], 'needs both --tokenizer=FILE and --seq_len=N'),
    (['--seq_len=8'], 'needs both --tokenizer=FILE and --seq_len=N'),
    (['--tokenizer=BPE', '--seq_len=8', '--text_column=body'],
     "has no 'body'"),
    ([], 'is text: give the tokenizer'),
])
def test_bad_flags_are_one_line_and_nothing_is_written(corpus, tmp_path,
                                                       bpe_file, flags, says):
  damaged = tmp_path / 'damaged.json'
  damaged.write_text('{"model": ')
  flags = [f.replace('MISSING', str(tmp_path / 'none.json'))
           .replace('DAMAGED', str(damaged)).replace('BPE', bpe_file)
           for f in flags]
  dst = tmp_path / 'tokens'
  code, _, err = prepare_in_process(f'jsonl:{corpus}', dst, *flags)
  assert code == 1 and len(err.splitlines()) == 1, err
  assert re.search(says, err), err
  assert not dst.exists()


def test_a_source_of_images_with_a_tokenizer_is_refused(tmp_path, bpe_file):
  code, _, err = prepare_in_process(f'folder:{tmp_path}', tmp_path / 'tokens',
                                    f'--tokenizer={bpe_file}', '--seq_len=8')
  assert code == 1 and "SRC 'folder:" in err and 'is not text' in err


def test_a_tokenizer_without_end_of_text_is_refused(corpus, tmp_path):
  tokenizers = pytest.importorskip('tokenizers')
  from tokenizers import models  # pylint: disable=g-import-not-at-top
  bare = tokenizers.Tokenizer(models.WordLevel({'a': 0, '[UNK]': 1},
                                               unk_token='[UNK]'))
  path = tmp_path / 'bare.json'
  bare.save(str(path))
  code, _, err = prepare_in_process(f'jsonl:{corpus}', tmp_path / 'tokens',
                                    f'--tokenizer={path}', '--seq_len=8')
  assert code == 1 and 'has no end-of-text token' in err
  assert not (tmp_path / 'tokens').exists()


def test_the_command_reports_sequences_and_verifies(corpus, tmp_path,
                                                    bpe_file, caplog):
  with caplog.at_level(logging.INFO, logger='absl'):
    code, out, _ = prepare_in_process(
        f'jsonl:{corpus}', tmp_path / 'tokens', f'--tokenizer={bpe_file}',
        '--seq_len=16', '--examples_per_shard=10', '--verify')
    # It quiets absl's notices while it runs, then gives its caller (a
    # notebook, this test process) its logging back.
    assert logging.getLogger('absl').level == logging.INFO
  assert code == 0
  assert 'sequences of 16 tokens from 38 documents in 4 shards' in out
  assert 'OK, 5 shards' in out


def test_jsonl_parquet_and_hf_give_the_same_sequences(corpus, tmp_path,
                                                      bpe_file):
  pa = pytest.importorskip('pyarrow')
  pq = pytest.importorskip('pyarrow.parquet')
  texts = documents(45)
  (tmp_path / 'pq').mkdir()
  pq.write_table(pa.table({'body': texts}), tmp_path / 'pq' / 'train.parquet')
  sources = {'jsonl': f'jsonl:{corpus / "train.jsonl"}',
             'parquet': f'parquet:{tmp_path / "pq"}'}
  try:
    import datasets  # pylint: disable=g-import-not-at-top,unused-import
    sources['hf'] = f'hf:{tmp_path / "pq" / "train.parquet"}'
  except ImportError:
    pass
  shards = {}
  for name, src in sources.items():
    text = _text(bpe_file, column='text' if name == 'jsonl' else 'body')
    dst = tmp_path / name
    prepare.prepare(src, str(dst), PER_SHARD, text=text)
    shards[name] = {f: b for f, b in _files(dst).items()
                    if f.endswith('.array_record')}
  assert len(shards['jsonl']) == 4
  for name in sources:
    assert shards[name] == shards['jsonl'], name


@pytest.mark.parametrize('damage, says', [
    (lambda m: m['tokens'].pop('seq_len'), 'tokens.seq_len is missing'),
    (lambda m: m['tokens'].update(eos_id=-1), 'tokens.eos_id is -1, not a '
     'token id'),
    (lambda m: m['splits']['train']['shards'][0].update(num_documents=3),
     'splits.train.num_documents is 38, but its shards hold 31'),
])
def test_a_damaged_manifest_is_one_line(corpus, tmp_path, bpe_file, damage,
                                        says):
  dst = tmp_path / 'tokens'
  _prepare(corpus, dst, bpe_file)
  manifest = json.loads((dst / 'manifest.json').read_text())
  damage(manifest)
  (dst / 'manifest.json').write_text(json.dumps(manifest))
  with pytest.raises(UserError, match=says):
    token_records.open(str(dst))


def test_a_record_of_another_size_is_named(tmp_path):
  from array_record.python.array_record_module import ArrayRecordWriter  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / 'x.array_record')
  writer = ArrayRecordWriter(path, array_records.WRITER_OPTIONS)
  writer.write(token_records.encode(np.arange(5), np.ones(5)))
  writer.write(b'short')
  writer.close()
  sequences = token_records.Sequences([(path, 2)], 'here', seq_len=4)
  tokens, segments = sequences.read([0])
  assert tokens.tolist() == [[0, 1, 2, 3, 4]] and segments.tolist() == [[1] * 5]
  with pytest.raises(UserError, match='record 1 of shard .* is damaged '
                     '\\(5 bytes, not the 40 of a sequence of 4 tokens\\)'):
    sequences.read([1])

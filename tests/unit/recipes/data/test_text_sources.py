"""Text columns of JSONL files, parquet files and Hugging Face datasets as
documents by index: the rows with text, in order; bad lines and empty
columns named in one line when opened."""

import json

import pytest

from recipes.data.sources import hf_source, jsonl_source, parquet_source
from recipes.runtime.errors import UserError

pa = pytest.importorskip('pyarrow')
pq = pytest.importorskip('pyarrow.parquet')

TEXTS = ['First document.', 'Zweites Dokument: äöü ß', '三番目',
         'A\nmulti-line\ttext']


def _jsonl(path, rows):
  path.write_text(''.join(json.dumps(row) + '\n' for row in rows),
                  encoding='utf-8')
  return path


def test_jsonl_reads_the_rows_with_text_in_any_order(tmp_path):
  rows = [{'text': TEXTS[0], 'id': 1}, {'text': ''}, {'text': None},
          {'text': TEXTS[1]}, {'text': TEXTS[2]}, {'text': TEXTS[3]}]
  path = tmp_path / 'web.jsonl'
  path.write_text(''.join(json.dumps(r, ensure_ascii=False) + '\n'
                          for r in rows) + '\n  \n', encoding='utf-8')
  source = jsonl_source.open(str(path))
  assert source.name == f'jsonl:{path}' and source.column == 'text'
  texts = source.splits['train']
  assert len(texts) == 4
  assert texts.read([3, 0, 2, 1]) == [TEXTS[3], TEXTS[0], TEXTS[2], TEXTS[1]]
  assert texts.describe(1) == f'line 4 of {path}'


def test_a_jsonl_folder_has_a_split_a_file(tmp_path):
  _jsonl(tmp_path / 'train.jsonl', [{'body': t} for t in TEXTS])
  _jsonl(tmp_path / 'validation.jsonl', [{'body': 'held out'}])
  (tmp_path / 'notes.txt').write_text('not a split')
  source = jsonl_source.open(str(tmp_path), column='body')
  assert sorted(source.splits) == ['train', 'validation']
  assert source.splits['validation'].read([0]) == ['held out']


@pytest.mark.parametrize('line, says', [
    (b'{"text": "caf\xe9"}\n', 'line 2 of .* is not UTF-8 \\(byte 0xe9'),
    (b'{"text": "cut\n', 'line 2 of .* is not JSON'),
    (b'{"body": "x"}\n', "line 2 of .* has no 'text' \\(it has body\\)"),
    (b'{"text": 7}\n', "line 2 of .*: 'text' is a int, not text"),
    (b'["text"]\n', "line 2 of .* has no 'text' \\(it has list\\)"),
])
def test_a_bad_jsonl_line_is_one_line(tmp_path, line, says):
  path = tmp_path / 'bad.jsonl'
  path.write_bytes(b'{"text": "fine"}\n' + line)
  with pytest.raises(UserError, match=says) as error:
    jsonl_source.open(str(path))
  assert '\n' not in str(error.value)


@pytest.mark.parametrize('rows', [[], [{'text': ''}, {'text': None}]])
def test_a_jsonl_column_without_text_is_one_line(tmp_path, rows):
  path = _jsonl(tmp_path / 'empty.jsonl', rows)
  with pytest.raises(UserError, match="column 'text' of split 'train' of "
                     'jsonl:.* has no text'):
    jsonl_source.open(str(path))


def test_missing_jsonl_path(tmp_path):
  with pytest.raises(UserError, match='there is no file or folder'):
    jsonl_source.open(str(tmp_path / 'nope.jsonl'))
  with pytest.raises(UserError, match='holds no .jsonl files'):
    jsonl_source.open(str(tmp_path))


def _parquet(path, column, **others):
  pq.write_table(pa.table({'text': column, **others}), path)
  return path


def test_parquet_reads_the_rows_with_text(tmp_path):
  path = _parquet(tmp_path / 'web.parquet',
                  [TEXTS[0], None, '', TEXTS[1], TEXTS[2]], id=[1, 2, 3, 4, 5])
  texts = parquet_source.open(str(path)).splits['train']
  assert len(texts) == 3
  assert texts.read([2, 0, 1]) == [TEXTS[2], TEXTS[0], TEXTS[1]]
  assert texts.describe(1) == f"row 3 of split 'train' of parquet:{path}"


def test_a_parquet_folder_is_split_by_file_name(tmp_path):
  _parquet(tmp_path / 'train-00000-of-00002.parquet', TEXTS[:2])
  _parquet(tmp_path / 'train-00001-of-00002.parquet', TEXTS[2:])
  _parquet(tmp_path / 'test.parquet', ['held out'])
  source = parquet_source.open(str(tmp_path))
  assert sorted(source.splits) == ['test', 'train']
  assert source.splits['train'].read(range(4)) == TEXTS


def test_a_parquet_column_of_utf8_bytes_is_text(tmp_path):
  path = _parquet(tmp_path / 'b.parquet', pa.array(
      [t.encode() for t in TEXTS], pa.binary()))
  assert parquet_source.open(str(path)).splits['train'].read([1]) == [
      TEXTS[1]]


@pytest.mark.parametrize('column, says', [
    (pa.array([b'fine', b'caf\xe9'], pa.binary()),
     "row 1 of split 'train' of parquet:.* is not UTF-8 text \\(byte 0xe9"),
    (pa.array([1, 2]), "column 'text' of .* holds int64, not text"),
    (pa.array(['', None], pa.string()), "column 'text' .* has no text"),
    (pa.array([], pa.string()), "column 'text' .* has no text"),
])
def test_bad_parquet_text_is_one_line(tmp_path, column, says):
  path = _parquet(tmp_path / 'bad.parquet', column)
  with pytest.raises(UserError, match=says):
    parquet_source.open(str(path))


def test_parquet_without_the_column_or_damaged(tmp_path):
  path = _parquet(tmp_path / 'a.parquet', TEXTS)
  with pytest.raises(UserError, match="has no column 'body' \\(its columns: "
                     'text\\); name the text column with --text_column'):
    parquet_source.open(str(path), column='body')
  (tmp_path / 'a.parquet').write_bytes(b'PAR1 damaged')
  with pytest.raises(UserError, match='cannot be read as parquet'):
    parquet_source.open(str(path))


def test_hf_text_column(tmp_path, monkeypatch):
  datasets = pytest.importorskip('datasets')
  monkeypatch.setenv('HF_HOME', str(tmp_path / 'hf_home'))
  data = datasets.DatasetDict({
      'train': datasets.Dataset.from_dict({'content': ['', *TEXTS]}),
      'test': datasets.Dataset.from_dict({'content': ['held out']})})
  data.save_to_disk(str(tmp_path / 'saved'))
  source = hf_source.open_text(str(tmp_path / 'saved'), 'content')
  assert sorted(source.splits) == ['test', 'train']
  assert source.splits['train'].read([3, 0]) == [TEXTS[3], TEXTS[0]]
  assert source.splits['train'].describe(0) == (
      f"row 1 of split 'train' of hf:{tmp_path / 'saved'}")
  with pytest.raises(UserError, match="split '.*' of hf:.* has no column "
                     "'text' \\(its columns: content\\)"):
    hf_source.open_text(str(tmp_path / 'saved'))
  # A parquet file through hf:, as for images.
  path = _parquet(tmp_path / 'web.parquet', TEXTS)
  assert hf_source.open_text(str(path)).splits['train'].read([2]) == [
      TEXTS[2]]

"""Text with a tokenizer is prepared on a run's first use, once per
settings and source files, by however many processes at once."""

import json
import os
import subprocess
import sys

import pytest

from recipes.data import prepared_text
from recipes.data.sources import array_records
from recipes.runtime.errors import UserError
from tests.helpers import ROOT, command_env


def _corpus(folder, count=50, word='word'):
  os.makedirs(folder, exist_ok=True)
  for split in ('train', 'validation'):
    with open(os.path.join(folder, f'{split}.jsonl'), 'w') as f:
      for i in range(count):
        f.write(json.dumps({'text': f'{split} {word} {i}'}) + '\n')
  return str(folder)


def _manifest(dataset):
  return array_records.read_manifest(dataset.removeprefix('tokens:'))


def test_prepared_once_then_read_and_again_when_anything_changes(tmp_path):
  corpus = _corpus(tmp_path / 'corpus')
  cache = str(tmp_path / 'cache')
  dataset = prepared_text.tokens_dataset(f'jsonl:{corpus}', 'bytes', 32, '',
                                         cache)
  manifest = _manifest(dataset)
  assert manifest['tokens']['vocab_size'] == 257
  assert manifest['splits']['train']['num_documents'] == 50
  written = os.path.join(dataset.removeprefix('tokens:'), 'manifest.json')
  before = os.stat(written).st_mtime_ns
  assert prepared_text.tokens_dataset(f'jsonl:{corpus}', 'bytes', 32, '',
                                      cache) == dataset
  assert os.stat(written).st_mtime_ns == before  # Read, not written again.

  other_length = prepared_text.tokens_dataset(f'jsonl:{corpus}', 'bytes', 16,
                                              '', cache)
  _corpus(tmp_path / 'corpus', count=60, word='changed')
  changed = prepared_text.tokens_dataset(f'jsonl:{corpus}', 'bytes', 32, '',
                                         cache)
  assert len({dataset, other_length, changed}) == 3
  assert _manifest(changed)['splits']['train']['num_documents'] == 60
  assert _manifest(dataset)['splits']['train']['num_documents'] == 50  # Kept.


@pytest.mark.slow  # Three processes.
def test_processes_started_together_prepare_it_once(tmp_path):
  corpus = _corpus(tmp_path / 'corpus', count=2000)
  code = ('import sys; from absl import logging; '
          'from recipes.data import prepared_text; '
          'logging.set_verbosity("info"); '
          'print(prepared_text.tokens_dataset(*sys.argv[1:3], 64, "", '
          'sys.argv[3]))')
  processes = [subprocess.Popen(
      [sys.executable, '-c', code, f'jsonl:{corpus}', 'bytes',
       str(tmp_path / 'cache')], cwd=ROOT, env=command_env(),
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(3)]
  results = [p.communicate(timeout=120) for p in processes]
  assert all(p.returncode == 0 for p in processes), results
  assert len({out for out, _ in results}) == 1
  assert sum('Preparing jsonl:' in err for _, err in results) == 1, results
  assert _manifest(results[0][0].strip())['splits']['train'][
      'num_documents'] == 2000


def test_mistakes_are_one_line_and_write_nothing(tmp_path):
  corpus = _corpus(tmp_path / 'corpus')
  cache = tmp_path / 'cache'
  cases = [
      (('tokens:/data/tokens', 'bytes', 32), 'is not text'),
      (('folder:/data/pets', 'bytes', 32), 'is not text'),
      ((f'jsonl:{corpus}', 'bytes', 0), 'seq_len is 0'),
      ((f'jsonl:{corpus}', str(tmp_path / 'none.json'), 32),
       'no tokenizer file'),
  ]
  for args, message in cases:
    with pytest.raises(UserError, match=message):
      prepared_text.tokens_dataset(*args, '', str(cache))
  with pytest.raises(UserError, match='not a local folder'):
    prepared_text.tokens_dataset(f'jsonl:{corpus}', 'bytes', 32, '',
                                 'gs://bucket/tokens')
  blocked = tmp_path / 'a_file'
  blocked.write_text('')
  with pytest.raises(UserError, match='cannot write in .*set --config.data_dir'):
    prepared_text.tokens_dataset(f'jsonl:{corpus}', 'bytes', 32, '',
                                 str(blocked / 'tokens'))
  assert not cache.exists()

"""`python -m recipes.data.prepare SRC DST --tokenizer=FILE --seq_len=N` as
a user runs it, on real English text: the ~10 MB of Vim's help files
(Debian's vim-runtime) or, without them, the licenses in
/usr/share/common-licenses, one JSONL document a paragraph. Killed mid-run
and run again it gives the files of a run never stopped; --verify passes;
the records decode to every paragraph, in order; token batches read back
the same for 1 and 2 processes."""

import glob
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from recipes.data.pipeline import token_batches
from recipes.data.text import packing, token_records
from recipes.data.text import tokenizer as tokenizer_lib
from tests.helpers import ROOT, command_env, sigkill_prepare_after

pytestmark = pytest.mark.slow

TIMEOUT = 300  # Seconds; a prepare here takes about 10.
SEQ_LEN = 512
PER_SHARD = 2000  # Paragraphs: about 20 shards of Vim's help.
TEXT_FILES = ('/usr/share/vim/vim*/doc/*.txt', '/usr/share/common-licenses/*')


def _paragraphs() -> list[str]:
  for pattern in TEXT_FILES:
    files = sorted(f for f in glob.glob(pattern) if os.path.isfile(f))
    if files:
      break
  else:
    pytest.skip(f'no English text here ({", ".join(TEXT_FILES)})')
  paragraphs = []
  for file in files:
    with open(file, encoding='utf-8', errors='replace') as f:
      paragraphs += [p for p in f.read().split('\n\n') if p.strip()]
  return paragraphs


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  """(JSONL path, tokenizer.json path, paragraphs): a byte-level BPE of
  4,000 tokens trained on the first paragraphs."""
  tokenizers = pytest.importorskip('tokenizers')
  from tokenizers import (decoders, models, pre_tokenizers,  # pylint: disable=g-import-not-at-top
                          trainers)
  folder = tmp_path_factory.mktemp('text')
  paragraphs = _paragraphs()
  path = folder / 'help.jsonl'
  with open(path, 'w', encoding='utf-8') as f:
    for paragraph in paragraphs:
      f.write(json.dumps({'text': paragraph}) + '\n')
  bpe = tokenizers.Tokenizer(models.BPE())
  bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  bpe.decoder = decoders.ByteLevel()
  bpe.train_from_iterator(paragraphs[:5000], trainers.BpeTrainer(
      vocab_size=4000, special_tokens=['<|endoftext|>'], show_progress=False,
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
  bpe.save(str(folder / 'tokenizer.json'))
  return path, str(folder / 'tokenizer.json'), paragraphs


def _command(corpus, dst):
  path, tokenizer, _ = corpus
  return [sys.executable, '-m', 'recipes.data.prepare', f'jsonl:{path}',
          str(dst), f'--tokenizer={tokenizer}', f'--seq_len={SEQ_LEN}',
          f'--examples_per_shard={PER_SHARD}']


def _run(args):
  return subprocess.run(args, cwd=ROOT, capture_output=True, text=True,
                        timeout=TIMEOUT, env=command_env())


def _files(path):
  return {name: (path / name).read_bytes() for name in os.listdir(path)}


@pytest.fixture(scope='module')
def whole(corpus, tmp_path_factory):
  dst = tmp_path_factory.mktemp('whole') / 'tokens'
  began = time.monotonic()
  result = _run(_command(corpus, dst) + ['--verify'])
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  count = len(corpus[2])
  assert f'documents in {-(-count // PER_SHARD)} shards' in result.stdout
  assert f'{dst}: OK, {-(-count // PER_SHARD)} shards' in result.stdout
  print(f'prepared {count:,} paragraphs in {time.monotonic() - began:.1f} s')
  return dst


def test_the_records_decode_to_every_paragraph(corpus, whole):
  _, tokenizer_file, paragraphs = corpus
  tokenizer = tokenizer_lib.load(tokenizer_file)
  sequences = token_records.open(str(whole)).splits['train']
  tokens, segments = sequences.read(range(len(sequences)))
  manifest = json.loads((whole / 'manifest.json').read_text())
  decoded, first = [], 0
  for shard in manifest['splits']['train']['shards']:
    t = tokens[first:first + shard['num_examples']]
    s = segments[first:first + shard['num_examples']]
    first += shard['num_examples']
    # Each shard's stream: its first token, then its real targets.
    stream = np.concatenate([t[:1, 0], packing.model_inputs(t, s)[
        'targets'][s[:, 1:] > 0]])
    ends = np.flatnonzero(stream == tokenizer.eos_id)
    decoded += [tokenizer.decode(d) for d in np.split(stream, ends + 1)[:-1]]
  assert first == len(sequences)
  assert decoded == paragraphs


def test_killed_run_continues_to_the_same_files(corpus, whole, tmp_path):
  dst = tmp_path / 'tokens'
  sigkill_prepare_after(_command(corpus, dst), dst, 2, TIMEOUT)
  assert 'manifest.json' not in os.listdir(dst)
  result = _run(_command(corpus, dst))
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'the others were there' in result.stdout, result.stdout
  assert _files(dst) == _files(whole)


def test_two_processes_read_the_batches_of_one(whole, monkeypatch):
  def batches():
    data = token_batches.open(str(whole))
    return list(data.train_batches(batch_size=32, seed=0, start_step=100,
                                   num_steps=110))

  one = batches()
  halves = []
  for index in range(2):
    monkeypatch.setattr('jax.process_count', lambda: 2)
    monkeypatch.setattr('jax.process_index', lambda i=index: i)
    halves.append(batches())
  for step, batch in enumerate(one):
    assert batch['mask'].mean() > 0.9  # Long paragraphs: few boundaries.
    for name, array in batch.items():
      np.testing.assert_array_equal(
          np.concatenate([halves[0][step][name], halves[1][step][name]]),
          array)

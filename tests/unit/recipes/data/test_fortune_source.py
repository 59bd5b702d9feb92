"""fortune:PATH reads the entries of fortune files as documents, split into
train and validation by a checksum of their text."""

import glob
import os
import struct
import zlib

import pytest

from recipes.data.sources import fortune_source
from recipes.runtime.errors import UserError

DEBIAN = '/usr/share/games/fortunes'


def _write(folder, name, entries, index=True, raw=None):
  """A fortune file of `entries` (and an index beside it, as strfile
  writes; its contents are not read)."""
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, name)
  with open(path, 'wb') as f:
    f.write(raw if raw is not None else
            ('\n%\n'.join(entries) + '\n%\n').encode('utf-8'))
  if index:
    with open(path + '.dat', 'wb') as f:
      f.write(b'\0' * 24)
  return path


def _all(source):
  return {split: texts.read(range(len(texts)))
          for split, texts in source.splits.items()}


def test_entries_are_documents_split_by_their_checksum(tmp_path):
  entries = [f'Saying number {i}.\n\t\t-- Someone {i}' for i in range(200)]
  _write(tmp_path, 'b', entries[100:])
  _write(tmp_path, 'a', entries[:100])
  _write(tmp_path, 'notes.txt', ['not a fortune file'], index=False)
  source = fortune_source.open(str(tmp_path))
  assert source.name == f'fortune:{tmp_path}'
  found = _all(source)
  held_out = [e for e in entries if zlib.crc32(e.encode()) % 20 == 0]
  assert found['validation'] == held_out and 0 < len(held_out) < 40
  assert found['train'] == [e for e in entries if e not in held_out]
  first = found['train'].index(entries[1])
  assert source.splits['train'].describe(first) == (
      f'entry 2 of {tmp_path / "a"}')


def test_blank_entries_crlf_and_the_last_separator_are_handled(tmp_path):
  more = ''.join(f'entry {i}\n%\n' for i in range(100)).encode()
  path = _write(tmp_path, 'f', [], raw=more + (
      b'one\r\nline two\r\n%\r\n%\n\n  \n%\nthree\nends without %\n'))
  found = sum(_all(fortune_source.open(path)).values(), [])
  assert sorted(found) == sorted([f'entry {i}' for i in range(100)] + [
      'one\nline two', 'three\nends without %'])


def test_mistakes_are_one_line(tmp_path):
  with pytest.raises(UserError, match='no file or folder.*apt-get install'):
    fortune_source.open(str(tmp_path / 'missing'))
  with pytest.raises(UserError, match='holds no fortune files'):
    fortune_source.open(str(tmp_path))
  bad = _write(tmp_path, 'latin1', [], raw=b'ok\n%\ncaf\xe9\n%\n')
  with pytest.raises(UserError, match=r'line 3 of .*latin1 is not UTF-8 '
                     r'\(byte 0xe9\)'):
    fortune_source.open(bad)
  with pytest.raises(UserError, match='no columns'):
    fortune_source.open(bad, 'quote')
  empty = _write(tmp_path / 'empty', 'e', [], raw=b'%\n\n%\n')
  with pytest.raises(UserError, match='no entries for its train split'):
    fortune_source.open(empty)


@pytest.mark.skipif(not os.path.isdir(DEBIAN),
                    reason=f'needs Debian\'s fortunes package in {DEBIAN}')
def test_the_debian_package_gives_every_entry_strfile_counted():
  """strfile's index of each file counts its entries (the big-endian
  second word of NAME.dat): the source finds every one of them."""
  counted = 0
  for index in glob.glob(os.path.join(DEBIAN, '*.dat')):
    with open(index, 'rb') as f:
      counted += struct.unpack('>II', f.read(8))[1]
  source = fortune_source.open(DEBIAN)
  sizes = {split: len(texts) for split, texts in source.splits.items()}
  assert sum(sizes.values()) == counted > 10_000
  assert 0.04 < sizes['validation'] / counted < 0.06

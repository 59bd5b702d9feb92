"""SHA-256 checksums of every file of a checkpoint, checked before it is used.

Orbax and TensorStore do not checksum array data: a checkpoint with flipped
bytes restores without notice, and the run goes on from corrupted weights.
So when a save is complete, every file of the checkpoint's item directory
(`checkpoints/STEP/default`) is hashed into `checksums.sha256` inside it (in
the format of `sha256sum`: `cd checkpoints/STEP/default && sha256sum -c
checksums.sha256` checks it by hand), and `problem` compares them before the
checkpoint is restored. Paths go through etils.epath, so this works in
buckets too.
"""

import hashlib
import re

from etils import epath

from recipes.runtime.errors import describe

FILE_NAME = 'checksums.sha256'
_CHUNK = 1 << 22
# One line of `sha256sum`'s output: 64 hex digits, two spaces, the name.
_LINE = re.compile(r'([0-9a-f]{64})  (\S.*)')


def _digest(path: epath.Path) -> str:
  sha = hashlib.sha256()
  with path.open('rb') as f:
    while chunk := f.read(_CHUNK):
      sha.update(chunk)
  return sha.hexdigest()


def _files(directory: epath.Path, prefix: str = '') -> list[str]:
  """Every file under `directory` but the checksums, relative, sorted."""
  found = []
  # iterdir, not walk: with gcsfs, epath's walk names folders without gs://.
  for path in directory.iterdir():
    name = prefix + path.name
    if path.is_dir():
      found += _files(path, name + '/')
    elif name != FILE_NAME:
      found.append(name)
  return sorted(found)


def write(directory: epath.Path):
  """Writes the checksums of every file under `directory` into it."""
  lines = [f'{_digest(directory / name)}  {name}\n'
           for name in _files(directory)]
  (directory / FILE_NAME).write_text(''.join(lines))


def problem(directory: epath.Path) -> str | None:
  """What is wrong with the files under `directory`, or None.

  Args:
    directory: a checkpoint's item directory (checkpoints/STEP/default).

  Returns:
    None when every listed file matches its checksum; else what is wrong,
    naming the file: one missing, one that does not match, or a checksum
    file that cannot be read or parsed (damage like any other). A
    directory without checksums (written before they were kept) passes;
    files added since are ignored.
  """
  listing = directory / FILE_NAME
  if not listing.exists():
    return None
  try:
    lines = listing.read_bytes().decode('ascii').splitlines()
  except (OSError, UnicodeDecodeError) as e:
    return f'{listing} cannot be read ({describe(e)})'
  expected = {}
  for number, line in enumerate(lines, 1):
    match = _LINE.fullmatch(line)
    if not match:
      return (f'{listing} is garbled: line {number} is not a SHA-256 digest '
              'and a file name')
    expected[match[2]] = match[1]
  if not expected:
    return f'{listing} lists no files'
  for name, digest in expected.items():
    path = directory / name
    if not path.exists():
      return f'{path} is missing'
    if _digest(path) != digest:
      return f'{path} does not match its checksum'
  return None

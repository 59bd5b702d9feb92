"""Errors told in one line: a library's long message keeps its reason."""

import tensorstore as ts

from recipes.runtime.errors import describe, shorten


def test_a_tensorstore_error_keeps_its_reason_not_its_spec(tmp_path):
  # A real failed write (a file where a directory must go): TensorStore's
  # message names the reason, then appends its whole spec as JSON, which
  # a cut to the message's end would have kept instead of the reason.
  (tmp_path / 'file').write_text('')
  spec = {'driver': 'zarr', 'kvstore': {
      'driver': 'file', 'path': str(tmp_path / 'file' / ('deep' * 40))}}
  try:
    ts.open(spec, create=True, dtype=ts.float32, shape=[4]).result()
  except ValueError as e:
    error = e
  assert 'tensorstore_spec' in str(error)
  line = describe(error)
  assert line.startswith('ValueError: ') and 'tensorstore_spec' not in line
  assert 'Not a directory' in line, line


def test_a_long_message_keeps_its_end_and_a_long_line_both_ends():
  assert describe(OSError('x' * 300 + ' No space left')) == (
      'OSError: ...' + ('x' * 300 + ' No space left')[-200:])
  line = shorten('a' * 2000 + 'what to do', limit=300)
  assert line.startswith('a' * 200) and line.endswith('what to do')
  assert '[... 1,710 characters left out ...]' in line

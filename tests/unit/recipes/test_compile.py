"""`python -m recipes.compile`'s checks that come before any compile."""

import pytest
from absl import flags
from absl.testing import flagsaver

from recipes import compile as aot_compile
from tests.helpers import ROOT


@pytest.mark.parametrize('location, says', [
    # /sys refuses new files even to root, as a read-only folder would.
    ('/sys/report.json', "(Permission denied: /sys/report.json.partial)"),
    ('{tmp}/a_file/report.json', "({tmp}/a_file is a file, not a folder)"),
    ('{tmp}', '(a directory)'),
])
def test_a_json_path_that_cannot_be_written_is_one_line_before_compiling(
    tmp_path, monkeypatch, location, says):
  (tmp_path / 'a_file').write_text('kept')
  location, says = (text.format(tmp=tmp_path) for text in (location, says))

  def compile_config(*args, **kwargs):
    raise AssertionError('compiled before the --json path was checked')

  monkeypatch.setattr(aot_compile, 'compile_config', compile_config)
  with flagsaver.flagsaver():
    flags.FLAGS(['compile', f'--config={ROOT}/configs/fashion_mnist_sharded.py',
                 '--topology=v5e:2x2', f'--json={location}'])
    with pytest.raises(SystemExit) as stop:
      aot_compile.main(['compile'])
  assert str(stop.value.code) == (
      f"error: cannot write --json='{location}' {says}; give a file path "
      'that can be written.')
  assert (tmp_path / 'a_file').read_text() == 'kept'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['a_file']

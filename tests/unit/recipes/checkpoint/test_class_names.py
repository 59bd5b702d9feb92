"""WORKDIR/class_names.json: recorded by the first run, the same names
required of every later one."""

import json

import pytest

from recipes.checkpoint import class_names
from recipes.runtime.errors import UserError


def test_the_first_run_records_and_a_later_one_must_match(tmp_path):
  names = ('ant', 'bee', 'cat')
  class_names.check_and_record(str(tmp_path), names, 'folder:/a')
  file = tmp_path / class_names.FILE
  assert json.loads(file.read_text()) == list(names)
  class_names.check_and_record(str(tmp_path), names, 'folder:/a')  # Same.
  with pytest.raises(UserError) as e:
    class_names.check_and_record(str(tmp_path), ('ant', 'cat', 'dog'),
                                 'folder:/b')
  message = str(e.value)
  assert '\n' not in message
  assert "label 1 was 'bee', is 'cat'" in message and 'folder:/b' in message
  assert json.loads(file.read_text()) == list(names)  # Not overwritten.
  with pytest.raises(UserError, match='4 classes'):
    class_names.check_and_record(str(tmp_path), names + ('dog',), 'x')


def test_data_without_names_writes_nothing(tmp_path):
  class_names.check_and_record(str(tmp_path), (), 'mnist')
  assert not (tmp_path / class_names.FILE).exists()


def test_a_damaged_file_is_one_line_and_left_alone(tmp_path):
  file = tmp_path / class_names.FILE
  file.write_text('["ant", ')
  with pytest.raises(UserError, match='damaged'):
    class_names.check_and_record(str(tmp_path), ('ant',), 'x')
  assert file.read_text() == '["ant", '

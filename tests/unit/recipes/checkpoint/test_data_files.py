"""WORKDIR/data_files.json: an image folder's files, recorded by the first
run, the same required of a resumed one."""

import json
import os
import shutil

import numpy as np
import pytest

from recipes import train
from recipes.checkpoint import class_names, data_files
from recipes.runtime.errors import UserError
from tests.helpers import tiny_config, write_png_folder

FILES = {'train': [('train/0/00000.png', 70), ('train/1/00001.png', 71)],
         'test': [('test/0/00000.png', 72)]}


def test_a_changed_split_is_one_line_saying_where(tmp_path):
  workdir = str(tmp_path)
  data_files.check_and_record(workdir, FILES, 'folder:/a', False)
  recorded = (tmp_path / data_files.FILE).read_text()
  data_files.check_and_record(workdir, FILES, 'folder:/a', False)  # Same.
  for changed, what in (
      ([('train/0/00000.png', 70), ('train/1/00001.png', 71),
        ('train/1/00002.png', 9)], "folder 'train/1' has 2 files, had 1"),
      ([('train/0/00000.png', 70)], "folder 'train/1' has 0 files, had 1"),
      ([('train/0/00000.png', 70), ('train/1/00001.png', 99)],
       "the 1 files of folder 'train/1' have other names or sizes"),
      ([('train/0/00001.png', 71), ('train/1/00000.png', 70)],
       "folder 'train/0' have other names or sizes (and 1 more folder)")):
    with pytest.raises(UserError) as e:
      data_files.check_and_record(workdir, {**FILES, 'train': changed},
                                  'folder:/a', False)
    message = str(e.value)
    assert '\n' not in message
    assert message.startswith("split 'train' of folder:/a is not the files ")
    assert what in message, message
    assert 'allow_changed_data=True' in message
    assert (tmp_path / data_files.FILE).read_text() == recorded  # Kept.
  # Allowed: recorded anew, so the next resume compares with these.
  added = [*FILES['train'], ('train/1/00002.png', 9)]
  data_files.check_and_record(workdir, {'train': added}, 'folder:/a', True)
  data_files.check_and_record(workdir, {**FILES, 'train': added}, 'x', False)


def test_data_not_from_files_writes_nothing(tmp_path):
  data_files.check_and_record(str(tmp_path), {}, 'mnist', False)
  assert not (tmp_path / data_files.FILE).exists()


@pytest.mark.parametrize('content', [
    b'\x89PNG\r\n\x1a\n\x00\xff', b'{"train": {"train/0": [1, ', b'',
    b'null', b'5', b'[1, 2]', b'{"train": {"train/0": "abc"}}',
    b'{"train": [1, 2]}'])
@pytest.mark.parametrize('module', [data_files, class_names])
def test_a_damaged_record_is_one_line_and_left_alone(tmp_path, content,
                                                     module):
  file = tmp_path / module.FILE
  file.write_bytes(content)
  with pytest.raises(UserError) as e:
    if module is data_files:
      data_files.check_and_record(str(tmp_path), FILES, 'x', False)
    else:
      class_names.check_and_record(str(tmp_path), ('ant',), 'x')
  assert str(e.value).startswith(f'{file} is damaged (not ')
  assert '\n' not in str(e.value)
  assert file.read_bytes() == content


@pytest.mark.slow
def test_a_resume_on_changed_images_stops_before_writing(tmp_path,
                                                         fast_compiles):
  """The real loop on an image folder: files added to the training split
  stop the resumed run; evaluation, which reads only the test split, goes
  on, until a test image changes."""
  del fast_compiles
  images = np.random.default_rng(0).integers(0, 255, (20, 8, 8, 1), np.uint8)
  labels = np.arange(20) % 2
  folder = write_png_folder(str(tmp_path / 'pets'), {
      'train': (images[:16], labels[:16]), 'test': (images[16:], labels[16:])})
  workdir = tmp_path / 'work'
  config = tiny_config(dataset=f'folder:{folder}', batch_size=8,
                       num_train_steps=2, eval_every_steps=2)
  train.run(config, str(workdir))
  shutil.copy(f'{folder}/train/1/00001.png', f'{folder}/train/1/new.png')
  before = sorted(os.walk(workdir))
  with pytest.raises(SystemExit) as e:
    train.run(tiny_config(**{**config, 'num_train_steps': 4}), str(workdir))
  assert str(e.value).startswith(
      f"error: split 'train' of folder:{folder} is not the files ")
  assert "folder 'train/1' has 9 files, had 8" in str(e.value)
  assert sorted(os.walk(workdir)) == before  # Nothing written.
  evaluate = tiny_config(**{**config, 'mode': 'eval'})
  train.run(evaluate, str(workdir))
  os.rename(f'{folder}/test/0/00000.png', f'{folder}/test/0/00009.png')
  with pytest.raises(SystemExit) as e:
    train.run(evaluate, str(workdir))
  assert ("the 2 files of folder 'test/0' have other names or sizes"
          in str(e.value))
  recorded = json.loads((workdir / data_files.FILE).read_text())
  assert set(recorded) == {'train', 'test'}

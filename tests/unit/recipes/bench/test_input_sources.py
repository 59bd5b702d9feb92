"""`python -m recipes.bench.input_sources` in-process on tiny images: a row
per source, preset and path, each with a positive rate; a second run
reuses what the first generated and built."""

import os

import numpy as np
import pytest

from recipes.bench import input_sources
from tests.helpers import write_png_folder

PATHS = ('folder', 'records', 'tf.data')


def _run(tmp_path, png_folder) -> dict:
  return input_sources.main([
      f'--cache_dir={tmp_path / "cache"}', '--num_images=64',
      '--image_height=24', '--image_width=32', '--image_size=16',
      f'--png_folder={png_folder}', '--threads=2', '--batch_size=16',
      '--warmup=1', '--batches=2'])


@pytest.mark.slow
def test_a_row_per_path_with_positive_rates(tmp_path, capsys):
  rng = np.random.default_rng(0)
  png_folder = write_png_folder(
      str(tmp_path / 'png'), {'train': (
          rng.integers(0, 256, (48, 8, 8, 1), np.uint8), np.arange(48) % 3)})
  result = _run(tmp_path, png_folder)
  rows = {(r['source'], r['preset'], r['path']): r for r in result['rows']}
  assert set(rows) == {(source, preset, path)
                       for source, preset in (('JPEG 32x24', 'imagenet'),
                                              ('JPEG 32x24', 'none'),
                                              ('PNG 8x8', 'none'))
                       for path in PATHS}
  assert not result['notes']
  cores = len(os.sched_getaffinity(0))
  for row in rows.values():
    assert row['images_per_sec'] > 0
    assert row['images_per_sec_per_core'] * cores == pytest.approx(
        row['images_per_sec'])
    assert row['vs_tf_data'] > 0 and row['cores_busy'] > 0
    assert row['threads'] == ('2' if row['path'] != 'tf.data'
                              else f'AUTOTUNE ({cores})')
  assert result['settings']['images'] == {'JPEG 32x24': 64, 'PNG 8x8': 48}
  table = capsys.readouterr().out
  assert table.count('\n| JPEG 32x24 |') + table.count('\n| PNG 8x8 |') == 9
  assert f'{cores} cores' in table

  # The images, the records and the TFDS builds are kept and reused.
  jpegs = tmp_path / 'cache' / 'jpeg-64-32x24'
  before = {p: p.stat().st_mtime_ns for p in jpegs.rglob('*.jpg')}
  assert len(before) == 64
  builds = sorted((tmp_path / 'cache' / 'tfds').iterdir())
  _run(tmp_path, png_folder)
  assert {p: p.stat().st_mtime_ns for p in jpegs.rglob('*.jpg')} == before
  assert sorted((tmp_path / 'cache' / 'tfds').iterdir()) == builds

"""Input throughput of the streamed sources against tf.data, on the same images.

    python -m recipes.bench.input_sources --cache_dir=/tmp/input_sources \
        --num_images=20000 --png_folder=/tmp/fashion_mnist_png

A user's own images are streamed by index with Grain
(recipes/data/pipeline/random_access.py) so that the data order is the in-memory
one at any size; TFDS datasets too large for memory are streamed with
tf.data (recipes/data/pipeline/streaming.py), which reads its files in sequence. This
measures what the new path costs against today's, side by side in one run,
on the same encoded bytes, for the same training batches:

- folder: `folder:PATH` streamed (`data_source='stream'`), for each of
  `--threads` (Grain's batches made at once, `data_threads`);
- records: the same images copied into ArrayRecord shards by `python -m
  recipes.data.prepare` (`records:PATH`), for each of `--threads`;
- tf.data: StreamingDataset over a TFDS build (TFRecord) of the same files,
  made offline by a builder defined here; TFDS keeps a file's bytes as they
  are (it encodes only arrays), which the run checks on a sample.

The images: `--num_images` generated RGB JPEGs (smooth random shapes plus
noise, quality 90, 10 class folders; ImageNet-like sizes and file sizes),
timed with the 'imagenet' preset (random-resized crop decoded from the JPEG,
to --image_size) and with 'none' (decoded whole, scaled to [0, 1]); and,
with `--png_folder`, a folder of PNGs such as Fashion-MNIST's 70,000 28x28
(tests/helpers.py `write_fashion_mnist_folder`), timed with 'none', where
the per-batch overhead shows. Everything generated or built is kept under
`--cache_dir` and reused by the next run.

Each row warms up (`--warmup` batches: TF functions are traced, buffers
fill, the shuffle buffer of tf.data too), then times `--batches` batches;
with `--repeats` the paths take turns and the median is kept, so that all
see the same machine. Rates are per process and per core: the cores this
process may use (`os.sched_getaffinity`), which every path shares; 'cores
busy' is the process's CPU time over the wall time (on a shared machine,
fewer busy cores than threads means others took them). The files are read
from the page cache after the first row: this measures the CPU cost of the
input, not the disk.
"""

import argparse
import concurrent.futures
import dataclasses
import hashlib
import os
import statistics
import sys
import time
from typing import Callable, Iterator

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from recipes.data import datasets
from recipes.data.images.preprocess import Preprocessing
from recipes.data.pipeline import in_memory, streaming
from recipes.data.sources import image_folder
from recipes.runtime import startup

_CLASSES = 10  # Class folders of the generated JPEGs.
_QUALITY = 90
_NOISE_SIDE = 1024  # The bank of noise the images take a window of.
_VERIFIED_RECORDS = 64  # TFDS records checked to hold a file's bytes.
_EXAMPLES_PER_SHARD = 1000  # ArrayRecord shards, as the prepare default.
# One main split; the evaluation split a dataset needs, not timed.
_TRAIN, _EVAL = 'train', 'train[:1]'


def parse_args(argv: list[str] | None) -> argparse.Namespace:
  """The command line, checked; bad flags exit with argparse's message."""
  p = argparse.ArgumentParser(prog='python -m recipes.bench.input_sources',
                              description=__doc__.split('\n')[0])
  p.add_argument('--cache_dir', default='/tmp/recipes_input_sources',
                 help='where the generated JPEGs, the ArrayRecord copies and '
                 'the TFDS builds are kept for the next run')
  p.add_argument('--num_images', type=int, default=1000,
                 help='generated JPEGs (the documented run: 20000)')
  p.add_argument('--image_height', type=int, default=375)
  p.add_argument('--image_width', type=int, default=500)
  p.add_argument('--image_size', type=int, default=224,
                 help="the 'imagenet' preset's output side")
  p.add_argument('--png_folder', default='',
                 help='a folder of PNGs (PATH/CLASS/ or PATH/SPLIT/CLASS/) '
                 "timed with 'none' too; '': none")
  p.add_argument('--threads', default='1,2,4',
                 help="the new path's data_threads to time, comma-separated")
  p.add_argument('--batch_size', type=int, default=128)
  p.add_argument('--warmup', type=int, default=10,
                 help='untimed batches before each timing')
  p.add_argument('--batches', type=int, default=30,
                 help='timed batches of each row')
  p.add_argument('--repeats', type=int, default=1,
                 help='timings of each row, taking turns; the median counts')
  p.add_argument('--no_records', action='store_true',
                 help='leave out the ArrayRecord rows')
  args = p.parse_args(argv)
  try:
    args.threads = [int(t) for t in args.threads.split(',') if t.strip()]
  except ValueError:
    p.error(f'--threads={args.threads!r} must be whole numbers, e.g. 1,2,4')
  if min([args.num_images, args.batch_size, args.batches, args.repeats,
          args.image_height, args.image_width, args.image_size,
          *args.threads] or [0]) < 1 or args.warmup < 0:
    p.error('--num_images, --batch_size, --batches, --repeats, the sizes and '
            '--threads must be positive, --warmup at least 0')
  if args.num_images < args.batch_size:
    p.error(f'--num_images={args.num_images} is smaller than one batch of '
            f'{args.batch_size}')
  return args


def _log(message: str):
  print(message, file=sys.stderr, flush=True)


def write_jpegs(folder: str, n: int, height: int, width: int) -> str:
  """`n` RGB JPEGs of height x width in `_CLASSES` class folders of
  `folder`; those already there are kept (a second run reuses them).

  Each is smooth random colour (bicubic upsampling of a coarse grid) plus
  a window of fixed noise: photo-like file sizes (about 60 KB at 375x500),
  cheap to make. Image i is the same on every run.

  Returns:
    `folder`.
  """
  from PIL import Image  # pylint: disable=g-import-not-at-top
  done = os.path.join(folder, '.complete')  # Hidden: not a class folder.
  if os.path.exists(done):
    return folder
  noise = np.random.default_rng(0).normal(
      0, 8, (_NOISE_SIDE, _NOISE_SIDE, 3)).astype(np.int16)

  def write(i: int):
    path = os.path.join(folder, f'class_{i % _CLASSES}', f'{i:06d}.jpg')
    if os.path.exists(path):
      return
    rng = np.random.default_rng(i)
    coarse = rng.integers(0, 256, (height // 25 + 2, width // 25 + 2, 3),
                          np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize(
        (width, height), Image.BICUBIC), np.int16)
    y, x = (rng.integers(0, max(1, _NOISE_SIDE - s)) for s in (height, width))
    window = noise[y:y + height, x:x + width]
    if window.shape[:2] != (height, width):  # Larger than the bank.
      window = np.resize(window, (height, width, 3))
    pixels = np.clip(smooth + window, 0, 255).astype(np.uint8)
    # Renamed when whole: a stopped run leaves no truncated JPEG.
    Image.fromarray(pixels).save(path + '.partial', 'JPEG', quality=_QUALITY)
    os.replace(path + '.partial', path)

  for label in range(_CLASSES):
    os.makedirs(os.path.join(folder, f'class_{label}'), exist_ok=True)
  start = time.perf_counter()
  cores = len(os.sched_getaffinity(0))
  with concurrent.futures.ThreadPoolExecutor(cores) as pool:
    list(pool.map(write, range(n)))  # PIL encodes without the GIL.
  _log(f'wrote {n:,} JPEGs of {width}x{height} in {folder} '
       f'({time.perf_counter() - start:.0f} s)')
  open(done, 'w', encoding='utf-8').close()
  return folder


class InputSourcesBenchImages(tfds.core.GeneratorBasedBuilder):
  """A folder's training images as a TFDS dataset, offline: today's
  streamed source (TFRecord files read by tf.data), of the same bytes."""

  VERSION = tfds.core.Version('1.0.0')

  def __init__(self, *, files: tuple[str, ...], labels: np.ndarray,
               class_names: tuple[str, ...], shape: tuple[int, int, int],
               encoding_format: str, **kwargs):
    self._files, self._labels = files, labels
    self._class_names, self._shape = class_names, shape
    self._encoding_format = encoding_format
    super().__init__(**kwargs)

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self, features=tfds.features.FeaturesDict({
            'image': tfds.features.Image(
                shape=self._shape, encoding_format=self._encoding_format),
            'label': tfds.features.ClassLabel(names=self._class_names)}))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {_TRAIN: self._generate_examples()}

  def _generate_examples(self):
    # A path: TFDS stores the file's bytes (it would encode an array).
    for i, (file, label) in enumerate(zip(self._files, self._labels)):
      yield i, {'image': file, 'label': int(label)}


def _sha1(data: bytes) -> str:
  return hashlib.sha1(data).hexdigest()


def tfds_build(folder: str, cache_dir: str) -> tfds.core.DatasetBuilder:
  """The TFDS build of `folder`'s training split, made (once) under
  `cache_dir`; checks that a sample of its records holds a file's bytes.

  Raises:
    ValueError: a record whose image is none of the files (re-encoded).
  """
  source = image_folder.open(folder)
  train = source.splits[_TRAIN]
  first, _ = train.read([0])
  decoded = tf.io.decode_image(first[0], expand_animations=False)
  shape = tuple(int(d) for d in decoded.shape)
  if shape[-1] in (2, 4):  # Alpha dropped, as the folder reader does.
    shape = shape[:-1] + (shape[-1] - 1,)
  data_dir = os.path.join(cache_dir, 'tfds', _key(folder, len(train)))
  builder = InputSourcesBenchImages(
      files=train.files, labels=train.labels, class_names=source.class_names,
      shape=shape, encoding_format='jpeg' if first[0][:2] == b'\xff\xd8'
      else 'png', data_dir=data_dir)
  if not builder.is_prepared():
    _log(f'building the TFDS dataset of {folder} in {data_dir}...')
    start = time.perf_counter()
    builder.download_and_prepare(
        download_dir=os.path.join(data_dir, 'downloads'),
        file_format='tfrecord')
    _log(f'built in {time.perf_counter() - start:.0f} s')
  sample = min(_VERIFIED_RECORDS, len(train))
  stored = builder.as_dataset(split=f'{_TRAIN}[:{sample}]',
                              decoders={'image': tfds.decode.SkipDecoding()})
  files = {_sha1(train.read([i])[0][0]) for i in range(len(train))}
  for example in stored.as_numpy_iterator():
    if _sha1(example['image']) not in files:
      raise ValueError(f'a record of the TFDS build in {data_dir} holds an '
                       'image that is none of the files: re-encoded?')
  return builder


def _key(folder: str, count: int) -> str:
  """A cache entry's name for `folder` with `count` training images."""
  path = os.path.realpath(folder)
  return (f'{os.path.basename(path)}-{count}-'
          f'{hashlib.sha1(path.encode()).hexdigest()[:8]}')


def prepared_records(folder: str, cache_dir: str) -> str:
  """The ArrayRecord copy of `folder`'s training split under `cache_dir`
  (written by `python -m recipes.data.prepare`'s function, once)."""
  # pylint: disable-next=g-import-not-at-top
  from recipes.data import prepare
  count = len(image_folder.open(folder).splits[_TRAIN])
  dst = os.path.join(cache_dir, 'records', _key(folder, count))
  written = prepare.prepare(f'folder:{folder}', dst, _EXAMPLES_PER_SHARD,
                            splits=[_TRAIN])
  if written.shards_written:
    _log(f'prepared {dst} ({written.examples_per_second:,.0f} examples/s)')
  return dst


@dataclasses.dataclass
class Path:
  """One way of reading a source: a row of the table."""

  name: str  # 'folder', 'records', 'tf.data'.
  threads: str  # For the table.
  # (preprocessing) -> a Dataset (recipes/data/pipeline/dataset.py).
  dataset: Callable
  rates: list[float] = dataclasses.field(default_factory=list)
  busy: list[float] = dataclasses.field(default_factory=list)


def images_per_sec(batches: Iterator, warmup: int, timed: int,
                   batch_size: int) -> tuple[float, float]:
  """The rate of `batches` over `timed` batches after `warmup` others, and
  the cores the process kept busy meanwhile (its CPU time over the wall
  time: on a shared machine, a low rate with few cores busy was starved)."""
  for _ in range(warmup):
    next(batches)
  start, cpu = time.perf_counter(), time.process_time()
  for _ in range(timed):
    batch = next(batches)
  seconds = time.perf_counter() - start
  busy = (time.process_time() - cpu) / seconds
  assert len(batch['label']) == batch_size
  return timed * batch_size / seconds, busy


def _paths(folder: str, records: str | None, builder, threads: list[int],
           cores: int) -> list[Path]:
  paths = []
  for name, where in (('folder', folder), ('records', records)):
    if where is None:
      continue
    for n in threads:
      paths.append(Path(name, str(n), lambda prep, n=n, name=name, where=where:
                        datasets.load(f'{name}:{where}', None, _TRAIN,
                                      [_EVAL], prep, 'stream',
                                      datasets.EncodedOptions(data_threads=n))))
  num_classes = builder.info.features['label'].num_classes
  paths.append(Path('tf.data', f'AUTOTUNE ({cores})', lambda prep:
                    streaming.StreamingDataset(builder, _TRAIN, (_EVAL,),
                                               num_classes, prep)))
  return paths


def _time_source(source: str, presets: dict[str, Preprocessing],
                 paths: list[Path], args) -> list[dict]:
  """Rows of the table for one source: every path with every preset."""
  rows = []
  for preset, prep in presets.items():
    timed = [dataclasses.replace(p, rates=[], busy=[]) for p in paths]
    for _ in range(args.repeats):  # Turns, so all see the same machine.
      for path in timed:
        _log(f'{source}, {preset}: {path.name}, threads {path.threads}...')
        data = path.dataset(prep)
        batches = data.train_batches(
            batch_size=args.batch_size, seed=0, start_step=0,
            num_steps=args.warmup + args.batches)
        rate, busy = images_per_sec(batches, args.warmup, args.batches,
                                    args.batch_size)
        path.rates.append(rate)
        path.busy.append(busy)
        del batches, data
    baseline = statistics.median(timed[-1].rates)
    for path in timed:
      rate = statistics.median(path.rates)
      rows.append({'source': source, 'preset': preset, 'path': path.name,
                   'threads': path.threads, 'images_per_sec': rate,
                   'images_per_sec_per_core': rate / args.cores,
                   'vs_tf_data': rate / baseline,
                   'cores_busy': statistics.median(path.busy)})
  return rows


def _cpu_model() -> str:
  try:
    with open('/proc/cpuinfo', encoding='utf-8') as f:
      for line in f:
        if line.startswith('model name'):
          return line.split(':', 1)[1].strip()
  except OSError:
    pass
  return 'unknown CPU'


def measure(args: argparse.Namespace) -> dict:
  """Builds what is missing under --cache_dir, times every row.

  Returns:
    {'settings': ..., 'rows': [...], 'notes': [...]}.
  """
  in_memory.hide_accelerators_from_tensorflow()
  tfds.disable_progress_bar()
  args.cores = len(os.sched_getaffinity(0))
  load_before = os.getloadavg()[0]
  jpegs = write_jpegs(
      os.path.join(args.cache_dir, f'jpeg-{args.num_images}-'
                   f'{args.image_width}x{args.image_height}'),
      args.num_images, args.image_height, args.image_width)
  sources = {f'JPEG {args.image_width}x{args.image_height}': (jpegs, {
      'imagenet': Preprocessing('imagenet', image_size=args.image_size),
      'none': Preprocessing('none')})}
  if args.png_folder:
    source = image_folder.open(args.png_folder)
    first, _ = source.splits[_TRAIN].read([0])
    shape = tf.io.decode_image(first[0], expand_animations=False).shape
    sources[f'PNG {shape[1]}x{shape[0]}'] = (args.png_folder,
                                             {'none': Preprocessing('none')})
  notes, counts, rows = [], {}, []
  for name, (folder, presets) in sources.items():
    records = None
    if not args.no_records:
      try:
        records = prepared_records(folder, args.cache_dir)
      except Exception as e:  # pylint: disable=broad-except
        # Another engineer's module, still changing: say why it is left out.
        notes.append(f'{name}: records left out ({type(e).__name__}: '
                     f'{" ".join(str(e).split())[:200]})')
    builder = tfds_build(folder, args.cache_dir)
    counts[name] = builder.info.splits[_TRAIN].num_examples
    paths = _paths(folder, records, builder, args.threads, args.cores)
    rows += _time_source(name, presets, paths, args)
  settings = {'cores': args.cores, 'cpu': _cpu_model(),
              'batch_size': args.batch_size, 'image_size': args.image_size,
              'images': counts, 'warmup': args.warmup,
              'batches': args.batches, 'repeats': args.repeats,
              'tensorflow': tf.__version__,
              # Others' work on a shared machine: the 1-minute load average.
              'load_average': (load_before, os.getloadavg()[0])}
  return {'settings': settings, 'rows': rows, 'notes': notes}


def table(result: dict) -> str:
  """The settings, then the rows as a Markdown table, then the notes."""
  s = result['settings']
  images = ', '.join(f'{name}: {n:,}' for name, n in s['images'].items())
  lines = [f"{s['cores']} cores ({s['cpu']}); batch {s['batch_size']}; "
           f"'imagenet' image_size {s['image_size']}; training images: "
           f"{images}; {s['warmup']} warm-up and {s['batches']} timed "
           f"batches per row, median of {s['repeats']}; TensorFlow "
           f"{s['tensorflow']}; load average {s['load_average'][0]:.1f} "
           f"before, {s['load_average'][1]:.1f} after",
           '| source | preset | path | threads | images/s | '
           'images/s per core | vs tf.data | cores busy |',
           '|---|---|---|---|---|---|---|---|']
  for r in result['rows']:
    lines.append(f"| {r['source']} | {r['preset']} | {r['path']} | "
                 f"{r['threads']} | {r['images_per_sec']:,.0f} | "
                 f"{r['images_per_sec_per_core']:,.0f} | "
                 f"{r['vs_tf_data']:.2f} | {r['cores_busy']:.1f} |")
  lines += [f'Note: {n}' for n in result['notes']]
  return '\n'.join(lines)


def main(argv: list[str] | None = None) -> dict:
  """The command line; prints the table and returns the result."""
  result = measure(parse_args(argv))
  print(table(result))
  return result


if __name__ == '__main__':
  startup.loaded()
  main()

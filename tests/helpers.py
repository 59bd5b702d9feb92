"""Small builders shared by the tests: configs, models, PNG folders, scalars,
a small disk."""

import contextlib
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from ml_collections import config_flags

from recipes import checkpoint
from recipes.config import defaults as default
from recipes.data import prepare
from recipes.runtime import summaries

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCAL_LAUNCHER = os.path.join(ROOT, 'launch', 'local.sh')


@contextlib.contextmanager
def lowerings():
  """Yields a list that gets an entry for each program JAX lowers inside
  the block (to compile it, or to find it in the compilation cache)."""
  lowered = []

  def count(event, duration, **kwargs):
    del duration, kwargs
    if event == '/jax/core/compile/jaxpr_to_mlir_module_duration':
      lowered.append(event)

  jax.monitoring.register_event_duration_secs_listener(count)
  try:
    yield lowered
  finally:
    jax.monitoring.unregister_event_duration_listener(count)


@contextlib.contextmanager
def small_disk(path, size: str):
  """A filesystem of `size` (e.g. '9m') mounted at the new directory `path`
  for the block; the test is skipped where mounting is not allowed."""
  os.mkdir(path)
  mounted = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size}',
                            'tmpfs', str(path)], capture_output=True,
                           text=True, check=False)
  if mounted.returncode:
    pytest.skip(f'cannot mount a small filesystem here: {mounted.stderr}')
  try:
    yield path
  finally:
    subprocess.run(['umount', str(path)], check=True)


def slow_after(keep: int, values) -> list:
  """Parametrize `values`, the first `keep` in the fast tier and the rest
  in the slow one (`@pytest.mark.slow`): the fast tier checks a case once,
  the whole suite every variant. A value that is a `pytest.param` keeps its
  id and marks; one for several argnames must be a `pytest.param`."""
  out = []
  for i, value in enumerate(values):
    param = (value if isinstance(value, type(pytest.param(0)))
             else pytest.param(value))
    marks = (*param.marks, *([pytest.mark.slow] if i >= keep else []))
    out.append(pytest.param(*param.values, id=param.id, marks=marks))
  return out


def command_env(**extra) -> dict[str, str]:
  """The environment for a command the tests start: CPU only, none of this
  process's multi-process settings, `extra` on top."""
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(('JAX_COORDINATOR', 'JAX_PROCESS', 'JAX_NUM_PRO'))}
  return {**env, 'JAX_PLATFORMS': 'cpu', 'PYTHON': sys.executable, **extra}


def sigkill_when(command: list[str], ready, what: str, timeout: float,
                 poll: float = 0.05, **env) -> str:
  """Starts `command` (`env` added to command_env's) and kills it with
  SIGKILL once `ready()` is true. Fails if the command ends first or
  `timeout` seconds pass (`what` names the moment awaited). Returns what it
  printed."""
  # A file, not a pipe: a full pipe would stop the command before the moment.
  with tempfile.TemporaryFile('w+') as log:
    process = subprocess.Popen(command, cwd=ROOT, stdout=log,
                               stderr=subprocess.STDOUT,
                               env=command_env(**env))
    deadline = time.monotonic() + timeout
    try:
      while not ready():
        assert process.poll() is None, f'it ended before {what}'
        assert time.monotonic() < deadline, f'not in time: {what}'
        try:
          process.wait(timeout=poll)
        except subprocess.TimeoutExpired:
          pass
    finally:
      process.send_signal(signal.SIGKILL)
      process.wait(timeout=60)
    log.seek(0)
    return log.read()


def sigkill_after_first_checkpoint(command: list[str], workdir,
                                   timeout: float = 600, **env) -> str:
  """Kills a training `command` (its workdir `workdir`) with SIGKILL once
  its first checkpoint is there (`sigkill_when`)."""
  checkpoints = os.path.join(workdir, 'checkpoints')
  return sigkill_when(
      command, lambda: os.path.isdir(checkpoints) and any(
          name.isdigit() for name in os.listdir(checkpoints)),
      'its first checkpoint', timeout, **env)


def sigkill_prepare_after(command: list[str], dst, shards: int,
                          timeout: float):
  """Kills recipes.data.prepare's `command` (writing into `dst`) with
  SIGKILL once its progress file lists `shards` finished shards (a shard is
  listed after its rename; the file's first line is its header), watching
  closely: a shard takes milliseconds (`sigkill_when`)."""
  progress = os.path.join(dst, prepare.PROGRESS)

  def written() -> bool:
    if not os.path.exists(progress):
      return False
    with open(progress) as f:
      return len(f.read().splitlines()) > shards

  sigkill_when(command, written, f'{shards} shards written', timeout,
               poll=0.002)


def prepare_in_process(*args) -> tuple[int, str, str]:
  """(exit status, stdout, stderr) of recipes.data.prepare's `main` run in
  this process."""
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      code = prepare.main([str(arg) for arg in args])
    except SystemExit as e:  # argparse's --help and usage errors.
      code = e.code
  return code, out.getvalue(), err.getvalue()


# The words of write_token_dir's corpus, in the order its documents cycle.
LM_WORDS = ('the model reads packed sequences of tokens and every document '
            'ends with an end of text token so that attention stays inside '
            'one document while the loss skips the boundary').split()


def write_token_dir(folder, seq_len: int = 16, num_train: int = 160,
                    num_validation: int = 24) -> str:
  """`tokens:` data for a language model in `folder`/tokens (returned): a
  word-level tokenizer of 29 ids ('<|endoftext|>' 0, '<pad>' 1, '<unk>' 2,
  then LM_WORDS) and documents of 3 to 20 words that cycle through LM_WORDS
  from a random word (learnable: each word but a document's first predicts
  the next), packed into sequences of `seq_len`; splits 'train' and
  'validation'."""
  import json  # pylint: disable=g-import-not-at-top
  from tokenizers import Tokenizer, models, pre_tokenizers  # pylint: disable=g-import-not-at-top
  folder = os.fspath(folder)
  vocab = {w: i for i, w in enumerate(
      ['<|endoftext|>', '<pad>', '<unk>', *dict.fromkeys(LM_WORDS)])}
  tokenizer = Tokenizer(models.WordLevel(vocab, unk_token='<unk>'))
  tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
  tokenizer_file = os.path.join(folder, 'tokenizer.json')
  tokenizer.save(tokenizer_file)
  rng = np.random.default_rng(0)
  corpus = os.path.join(folder, 'corpus')
  os.makedirs(corpus, exist_ok=True)
  for split, count in (('train', num_train), ('validation', num_validation)):
    with open(os.path.join(corpus, f'{split}.jsonl'), 'w') as f:
      for _ in range(count):
        start, length = rng.integers(len(LM_WORDS)), rng.integers(3, 21)
        words = [LM_WORDS[(start + i) % len(LM_WORDS)] for i in range(length)]
        f.write(json.dumps({'text': ' '.join(words)}) + '\n')
  dst = os.path.join(folder, 'tokens')
  prepare.prepare(f'jsonl:{corpus}', dst, 1000,
                  text=prepare.Text(tokenizer_file, seq_len))
  return dst


# Words of labelled texts: a text's class is the list its words come from.
CLASS_WORDS = {'cat': 'purr meow whiskers nap sun'.split(),
               'dog': 'bark fetch ball walk bone'.split(),
               'eel': 'swim river slime dark wet'.split()}


def write_word_tokenizer(folder, words=(), special=('[CLS]', '[SEP]',
                                                     '[PAD]')) -> str:
  """A word-level tokenizer.json in `folder` (returned): `special`, then
  '<unk>', then `words`."""
  from tokenizers import Tokenizer, models, pre_tokenizers  # pylint: disable=g-import-not-at-top
  vocab = {w: i for i, w in enumerate(
      dict.fromkeys([*special, '<unk>', *words]))}
  tokenizer = Tokenizer(models.WordLevel(vocab, unk_token='<unk>'))
  tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(os.fspath(folder), 'tokenizer.json')
  tokenizer.save(path)
  return path


def write_labelled_text(folder, num_train: int = 96, num_validation: int = 21,
                        seed: int = 0) -> str:
  """JSONL labelled text in `folder` (returned): train.jsonl and
  validation.jsonl, rows {'text': 2 to 9 words of CLASS_WORDS[label],
  'label': one of its keys}."""
  import json  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  names = sorted(CLASS_WORDS)
  os.makedirs(folder, exist_ok=True)
  for split, count in (('train', num_train), ('validation', num_validation)):
    with open(os.path.join(os.fspath(folder), f'{split}.jsonl'), 'w') as f:
      for i in range(count):
        label = names[i % len(names)]
        words = rng.choice(CLASS_WORDS[label], rng.integers(2, 10))
        f.write(json.dumps({'text': ' '.join(words), 'label': label}) + '\n')
  return os.fspath(folder)


def write_labelled_token_dir(folder, seq_len: int = 16) -> str:
  """`tokens:` data for a text classifier in `folder`/tokens (returned):
  write_labelled_text's rows with write_word_tokenizer's ids of
  CLASS_WORDS, 3 classes."""
  folder = os.fspath(folder)
  tokenizer = write_word_tokenizer(
      os.path.join(folder, 'tokenizer'),
      [w for words in CLASS_WORDS.values() for w in words])
  text = write_labelled_text(os.path.join(folder, 'text'))
  dst = os.path.join(folder, 'tokens')
  prepare.prepare(f'jsonl:{text}', dst, 1000, text=prepare.Text(
      tokenizer, seq_len, label_column='label'))
  return dst


def train_error(config, workdir) -> str:
  """The one line `recipes.train` ends with for `config` in `workdir`,
  checked to be one line starting 'error: '."""
  from recipes import train  # pylint: disable=import-outside-toplevel
  with pytest.raises(SystemExit) as exit_:
    train.run(config, str(workdir))
  line = exit_.value.code
  assert isinstance(line, str) and '\n' not in line, line
  assert line.startswith('error: '), line
  return line


def tiny_config(**overrides):
  """The defaults with a short schedule, under pmap: the classic recipe,
  which the tests of features shared by every strategy run (the strategies'
  own tests set theirs)."""
  config = default.get_config()
  config.strategy = 'pmap'
  config.update(dict(batch_size=16, num_train_steps=6, log_every_steps=2,
                     eval_every_steps=3), **overrides)
  return config


def config_from_command_line(argv: list[str]):
  """The config that `argv` (['train', '--config=FILE', '--config.X=V', ...])
  gives, parsed by ml_collections' config_flags as the commands parse it."""
  flag_values = flags.FlagValues()
  config_flags.DEFINE_config_file('config', None, '', flag_values=flag_values,
                                  lock_config=True, sys_argv=argv)
  flag_values(argv)
  return flag_values.config


def random_batch(n: int = 16, seed: int = 0, mask: bool = False) -> dict:
  """`n` random 28x28x1 images with labels of 10 classes (and an all-True
  eval mask if asked)."""
  rng = np.random.default_rng(seed)
  batch = {'image': rng.random((n, 28, 28, 1), np.float32),
           'label': rng.integers(0, 10, n).astype(np.int32)}
  if mask:
    batch['mask'] = np.ones(n, bool)
  return batch


def learnable_batch(n: int = 64, seed: int = 0) -> dict:
  """Noisy 28x28x1 images whose label is the row band that is bright: a
  model can learn them in a few steps."""
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 10, n).astype(np.int32)
  images = 0.3 * rng.random((n, 28, 28, 1), np.float32)
  for i, label in enumerate(labels):
    images[i, 2 * label:2 * label + 3] += 0.7
  return {'image': images, 'label': labels}


FASHION_MNIST_CLASSES = ('T-shirt_top', 'Trouser', 'Pullover', 'Dress', 'Coat',
                         'Sandal', 'Shirt', 'Sneaker', 'Bag', 'Ankle_boot')


def write_png_folder(folder: str, splits: dict, class_names=None) -> str:
  """Writes {split: (images uint8 [N, H, W(, C)], labels [N])} as
  FOLDER/SPLIT/CLASS/NNNNN.png, the class of label i named
  '{i}_{class_names[i]}' so that the sorted names keep the label order.
  Returns the folder."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  for split, (images, labels) in splits.items():
    for i, (image, label) in enumerate(zip(images, labels)):
      name = f'{label}_{class_names[label]}' if class_names else f'{label}'
      os.makedirs(os.path.join(folder, split, name), exist_ok=True)
      Image.fromarray(np.squeeze(image, -1) if image.ndim == 3
                      and image.shape[-1] == 1 else image).save(
                          os.path.join(folder, split, name, f'{i:05d}.png'))
  return folder


def write_fashion_mnist_folder(idx_dir: str, folder: str) -> str:
  """The IDX files of `idx_dir` (Fashion-MNIST's layout) as a PNG folder
  with splits train and test; returns the folder."""
  from recipes.data.sources import idx  # pylint: disable=g-import-not-at-top
  train, test = idx.load_splits(idx_dir, ['train', 'test'])
  return write_png_folder(
      folder, {'train': (train['image'], train['label']),
               'test': (test['image'], test['label'])}, FASHION_MNIST_CLASSES)


def saved_params(workdir, step=None, item='params'):
  """(step, parameters as numpy) of a checkpoint in `workdir` (default: the
  latest), whatever mesh or number of processes wrote it; `item` names
  another part of the state instead (e.g. 'ema_params')."""
  one_device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  with checkpoint.manager(str(workdir)) as mngr:
    step = mngr.latest_step() if step is None else step
    target = jax.tree.map(
        lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one_device),
        dict(mngr.item_metadata(step)))
    restored = checkpoint.restore(mngr, target, step)
  return step, jax.tree.map(np.asarray, restored[item])


def read_scalars(workdir):
  """{tag: {step: value}} from the TensorBoard event files of the run in
  workdir (a local one), read with TensorFlow's reader, which checks them."""
  found = {}
  directory = summaries.directory(workdir)
  for path in sorted(directory.glob('events.out.tfevents.*')):
    for event in tf.compat.v1.train.summary_iterator(str(path)):
      for value in event.summary.value:
        if value.metadata.plugin_data.plugin_name == 'scalars':
          number = float(tf.make_ndarray(value.tensor))
          found.setdefault(value.tag, {})[event.step] = number
  return found


class BatchNormNet(nn.Module):
  """A tiny model with batch-norm statistics (momentum 0: the last batch's)."""

  num_classes: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool = False):
    x = nn.Dense(16)(x.reshape((x.shape[0], -1)))
    x = nn.BatchNorm(use_running_average=not train, momentum=0.0)(x)
    return nn.Dense(self.num_classes)(nn.relu(x))


class DropoutNet(nn.Module):
  """A tiny model with dropout on its hidden features."""

  num_classes: int
  dtype: Any = jnp.float32
  rate: float = 0.5

  @nn.compact
  def __call__(self, x, train: bool = False):
    x = nn.relu(nn.Dense(32)(x.reshape((x.shape[0], -1))))
    x = nn.Dropout(self.rate, deterministic=not train)(x)
    return nn.Dense(self.num_classes)(x)


# A program that runs several configs one after another, in one start of its
# processes (e.g. under launch/local.sh): `python -c RUN_EACH JSON`, JSON a
# list of [WORKDIR, [FLAG, ...]] with the commands' flags (--config=FILE,
# --config.X=V; --config.mode=eval evaluates). It prints 'Run WORKDIR' before
# each run and ends as the commands end.
RUN_EACH = '''
import json
import os
import sys

import jax
from absl import logging

from recipes import train
from recipes.runtime import library_noise
from tests.helpers import config_from_command_line

# The commands' log (absl's app.run sets it up).
logging.use_absl_handler()
logging.set_verbosity(logging.INFO)
library_noise.keep_out(logging.get_absl_handler())
for workdir, flags in json.loads(sys.argv[1]):
  print(f'Run {workdir}', flush=True)
  train.run(config_from_command_line(['run', *flags]), workdir)
if jax.distributed.is_initialized():
  jax.distributed.shutdown()
logging.flush()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
'''


def logs_of_each_run(output: str) -> dict[str, str]:
  """{workdir: its log} of the runs of RUN_EACH under the local launcher:
  process 0's lines (without their '[0] '), from each 'Run WORKDIR' to the
  next."""
  process_0 = ''.join(line.removeprefix('[0] ')
                      for line in output.splitlines(keepends=True)
                      if line.startswith('[0] '))
  logs = {}
  for log in ('\n' + process_0).split('\nRun ')[1:]:
    workdir, _, rest = log.partition('\n')
    logs[workdir] = rest
  return logs

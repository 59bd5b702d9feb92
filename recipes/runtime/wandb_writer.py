"""Weights & Biases beside TensorBoard: the run's scalars and config in a W&B
run, when `--config.wandb_project` names a project (the wandb extra:
`pip install -e '.[wandb]'`).

Process 0 writes it, next to the event files (recipes/runtime/summaries.py).
The W&B run's id is kept in WORKDIR/wandb_run_id, written like every other
file of the run (recipes/runtime/storage.py): the same command again resumes
the same W&B run. W&B keeps its own files in WORKDIR/wandb for a local
workdir, and in its default directory (./wandb, or WANDB_DIR) for a gs://
one. W&B's environment variables work as usual, e.g. WANDB_MODE=offline
logs without an account (`wandb sync` uploads later).

Each scalar is logged with the run's step as the metric `step`, the x-axis of
W&B's charts, rather than as W&B's own step: W&B drops values logged at a
step below its last, and a resumed run (or `python -m recipes.evaluate`)
logs steps again, as TensorBoard shows them again.
"""

import importlib.util
import os
import re
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
from absl import logging
from etils import epath

from recipes.runtime import errors, scalar_writer, storage
from recipes.runtime.errors import UserError

RUN_ID_FILE = 'wandb_run_id'
# The metric that holds the run's step: the x-axis of every other one.
STEP = 'step'
MAX_TAG_LENGTH = 64  # W&B's limit.
_INSTALL = "pip install -e '.[wandb]' (or pip install wandb)"
# An id as WORKDIR/wandb_run_id holds it: printable ASCII but for spaces and
# the characters W&B reserves; its own ids are 8 lowercase letters and digits.
_RUN_ID = re.compile(r"(?:(?![:;,#?/'\\])[!-~]){1,128}")


def usable(project) -> bool:
  """Whether `project` can be logged to: '' (off), or a name with the wandb
  package installed."""
  return project == '' or (isinstance(project, str) and
                           importlib.util.find_spec('wandb') is not None)


PROJECT_ALLOWED = ("'' (off), or a W&B project name once the wandb package "
                   f"is installed: {_INSTALL}")


def tags(text: str) -> list[str]:
  """The tags of a comma-separated `text`, e.g. 'baseline, resnet'."""
  return [tag.strip() for tag in text.split(',') if tag.strip()]


def valid_tags(text) -> bool:
  """Whether `text` is comma-separated tags W&B accepts."""
  return isinstance(text, str) and all(
      len(tag) <= MAX_TAG_LENGTH for tag in tags(text))


TAGS_ALLOWED = (f'comma-separated tags of at most {MAX_TAG_LENGTH} characters '
                'each')


def _run_id(workdir: epath.Path) -> str:
  """The id of the workdir's W&B run, made and kept there the first time.

  Raises:
    UserError: the file cannot be read or does not hold a run id. A new id
      would split the run's charts between two W&B runs for good, so the
      user decides: write the id back, or delete the file.
  """
  path = workdir / RUN_ID_FILE
  if path.exists():
    try:
      text = path.read_bytes().decode('ascii').strip()
    except UnicodeDecodeError:
      raise _damaged(path, 'not text') from None
    except OSError as e:
      raise _damaged(path, f'it cannot be read: {errors.describe(e)}') from e
    if _RUN_ID.fullmatch(text):
      return text
    if text:
      raise _damaged(path, f'{errors.shorten(repr(text), 80)} is not a W&B '
                     'run id')
    # Empty: a start was stopped while writing it, before W&B saw the id.
    logging.warning('%s is empty; a new W&B run is started.', path)
  run_id = uuid.uuid4().hex[:8]  # As W&B's own: 8 lowercase letters/digits.
  path.write_text(run_id)
  return run_id


def _damaged(path: epath.Path, reason: str) -> UserError:
  return UserError(
      f'{path} is damaged ({reason}); it holds the id of the workdir\'s W&B '
      'run: write that id into it (the end of the run\'s URL, or of its '
      'folder\'s name under wandb/) to go on logging to that run, or delete '
      'it to log to a new W&B run.')


def create(config, workdir: str | os.PathLike) -> 'WandbWriter':
  """Starts (or resumes) the W&B run of the run in `workdir`.

  Args:
    config: the run's configuration: its wandb_* fields name the project,
      entity, run name and tags.
    workdir: the run's directory (local, or a bucket's gs:// path).

  Returns:
    A writer to the W&B run.

  Raises:
    UserError: the wandb package cannot be imported, or W&B could not
      start the run (e.g. not logged in).
  """
  try:
    import wandb  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise UserError(f'--config.wandb_project needs the wandb package, which '
                    f'cannot be imported ({errors.describe(e)}): {_INSTALL}; '
                    'or leave wandb_project empty.') from e
  path = storage.path(workdir)
  local = '://' not in os.fspath(path)
  run_id = _run_id(path)
  try:
    run = wandb.init(
        project=config.wandb_project, entity=config.wandb_entity or None,
        name=config.wandb_run_name or path.name or None,
        tags=tags(config.wandb_tags) or None, id=run_id, resume='allow',
        dir=os.fspath(path) if local else None,
        # A run of this process left open by an error is finished first.
        reinit='finish_previous',
        # No banners; the console stays out of W&B (the log is the
        # terminal's); W&B's warnings are still shown.
        settings=wandb.Settings(silent=True, console='off'))
  except wandb.Error as e:
    raise UserError(
        f'W&B could not start run {run_id} of project '
        f'{config.wandb_project!r} ({errors.describe(e)}); do what it says, '
        'or set WANDB_MODE=offline to log without an account, or leave '
        '--config.wandb_project empty.') from e
  if run.offline:  # Each start of the run in a directory of its own.
    logging.info('W&B run %s is logged offline; `wandb sync %s` uploads it.',
                 run.id, os.path.dirname(run.settings.sync_dir))
  elif not run.disabled:
    logging.info('W&B run %s: %s', run.id, run.url)
  return WandbWriter(run)


class WandbWriter(scalar_writer.ScalarWriter):
  """Scalars and hyperparameters to a W&B run; closing finishes it."""

  def __init__(self, run):
    """Logs to `run` (a started `wandb.Run`)."""
    self._run = run
    run.define_metric(STEP, hidden=True)
    run.define_metric('*', step_metric=STEP)

  def write_scalars(self, step: int, scalars: Mapping[str, Any]):
    """Logs the values of one step.

    Args:
      step: the step the values are of.
      scalars: {tag: number}, e.g. {'train/loss': 0.3}.
    """
    self._run.log({STEP: step, **{tag: np.asarray(value).item()
                                  for tag, value in scalars.items()}})

  def write_hparams(self, hparams: Mapping[str, Any]):
    """Sets the W&B run's config, nested as the run's config is.

    Args:
      hparams: {dotted name: value}, e.g. from `summaries.hparams(config)`.
    """
    nested = {}
    for name, value in hparams.items():
      *parents, key = name.split('.')
      node = nested
      for parent in parents:
        node = node.setdefault(parent, {})
      node[key] = value
    self._run.config.update(nested, allow_val_change=True)

  def flush(self):
    """Nothing: W&B sends what is logged in the background."""

  def close(self):
    """Finishes the W&B run: what is logged is written (and uploaded)."""
    self._run.finish()

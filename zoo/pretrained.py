"""Pretrained weights as a zoo model and its variables, in one call.

    model, variables = zoo.load_pretrained('resnet50', 'resnet50.pth',
                                           num_classes=10)
    model, variables = zoo.load_pretrained('resnet50', 'tv2_in1k')  # a tag
    logits = model.apply(variables, images, train=False)

A file is converted by zoo.convert (the source is told by the tensors'
names). A tag (zoo/weights.py) is downloaded the first time (zoo/download.py),
converted, and kept converted in the cache: CACHE_DIR, or the directory the
environment variable JAX_MODEL_ZOO_WEIGHTS names, one .safetensors file per
model and tag. Later uses read that file alone, with no network. A tag asked
for at another image size (a ViT's position embedding) is converted again
from the downloaded file. Each cache file carries the SHA-256 of its arrays
and record, checked when read: a damaged one is converted again, with a
warning.
"""

import dataclasses
import hashlib
import json
import logging
import os
import tempfile
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import safetensors
import safetensors.numpy
from flax import traverse_util

from zoo import convert, download, registry, weights

# Beside the other caches of the user's tools (pip's, Hugging Face's).
CACHE_DIR = '~/.cache/jax-model-zoo/weights'


def create(name: str, pretrained: str | bool | None = None,
           **kwargs) -> nn.Module:
  """Returns the Flax Linen module registered as `name` (or at
  'package.module:ClassName'), built with `kwargs`; with `pretrained`,
  bound to those published weights. This is `zoo.create`.

  Args:
    name: a registered name or 'package.module:ClassName' (see `zoo.spec`).
    pretrained: None: no weights. A tag of the model's published weights
      (zoo/weights.py; True: its first): the weights are downloaded the
      first time, converted and cached, and the module comes bound to them:
      call it, `model(images)`, or take `module, variables =
      model.unbind()`. Another `num_classes` gets a new head (initialized,
      with a warning), another `image_size` a resized position embedding.
    **kwargs: the module's attributes (e.g. num_classes=10,
      dtype=jnp.bfloat16); they override the variant's registered defaults
      (and what the weights fix, e.g. a ViT's GELU).

  Returns:
    The unbound Linen module; `init` and `apply` it as usual. With
    `pretrained`, the module bound to its variables.

  Raises:
    ValueError: the model is unknown, the module rejects an option (e.g. an
      unknown `pool` of a ViT), or (with `pretrained`) the tag is unknown,
      its file cannot be downloaded (one line that says what to download by
      hand) or converted.
  """
  if pretrained in (None, False):
    return registry.create(name, **kwargs)
  model, variables = load_pretrained(name, pretrained,
                                     kwargs.pop('num_classes', None),
                                     kwargs.pop('image_size', None), **kwargs)
  return model.bind(variables)


def list_models(pattern: str = '*', pretrained: bool = False) -> list[str]:
  """Sorted names of the registered models that match an fnmatch pattern;
  with `pretrained`, only those with published weights. This is
  `zoo.list_models`.

  Args:
    pattern: an fnmatch pattern, case-sensitive (e.g. 'resnet*', 'vit_?16');
      the default '*' matches every model.
    pretrained: only the models with tags in zoo/weights.py.

  Returns:
    The matching registered names, sorted.
  """
  names = registry.list_models(pattern)
  return [n for n in names if n in weights.TAGS] if pretrained else names


def load_pretrained(name: str | None, path: str | os.PathLike,
                    num_classes: int | None = None,
                    image_size: int | None = None, *,
                    source: str | None = None, seed: int = 0,
                    **model_kwargs) -> tuple[nn.Module, dict[str, Any]]:
  """(model, variables) of the zoo model `name` with the weights of `path`,
  a file or one of the model's tags.

  The model gets what the file needs (a ViT's patch and image size, GELU
  variant, pooling). A file that does not fit the model is a ValueError
  (zoo.convert.ConversionError) naming the first tensor that does not fit.

  Args:
    name: a zoo name ('resnet50', 'vit_b16') or timm's ViT name
      ('vit_base_patch16_224'); None: the file's model.
    path: .safetensors, .pth/.pt/.bin (torchvision or timm state dicts) or
      .npz (Google's checkpoints); local, or a URL such as gs://...; or a
      tag of `name` (`zoo.weights.tags(name)`), True for its first.
    num_classes: None keeps the file's head; another number re-initializes
      the head (from `seed`) and says so in a warning.
    image_size: ViTs: the input size; the position embedding is resized to
      it (bilinear over the patch grid). None: the file's.
    source: 'torchvision', 'timm' or 'big_vision'; None: detected.
    seed: the PRNG seed of the variables the file does not give (a new
      head).
    **model_kwargs: more `zoo.create` arguments, e.g. dtype=jnp.bfloat16;
      they win over what the file fixes.

  Returns:
    (model, variables): the Linen module and its {'params': ...} (and
    'batch_stats' for a ResNet) as nested dicts of jax arrays (the file's
    as float32), for `model.apply(variables, images, train=False)`.

  Raises:
    ValueError: zoo.convert.ConversionError when the file cannot be read or
      does not fit the model; zoo.download.DownloadError when a tag's file
      cannot be downloaded or is damaged; ValueError for an unknown `name`
      or tag.
  """
  if _is_tag(name, path):
    converted = published(name, path, num_classes, image_size)
  else:
    converted = convert.load(path, source, name, num_classes, image_size)
  model = registry.create(converted.name,
                          **{**converted.kwargs, **model_kwargs})
  variables = traverse_util.flatten_dict(converted.variables, sep='/')
  if converted.initialized:
    shape = registry.input_shape(converted.name, **converted.kwargs)
    variables.update(_initialized(model, shape, seed, converted.initialized))
    why = sorted(set(converted.ignored.values()) - {'a step counter'})
    logging.getLogger(__name__).warning(
        '%s: %s re-initialized (the file %s has %s).', converted.describe(),
        ', '.join(converted.initialized), os.fspath(path),
        '; '.join(why) or 'no head')
  variables = jax.tree.map(jnp.asarray, variables)
  return model, traverse_util.unflatten_dict(variables, sep='/')



def _initialized(model, shape, seed: int, targets) -> dict:
  """The initial values of `targets` (flattened names) alone: the rest of
  the model's initialization, its forward pass included, is left out of
  the compiled program, which for a large model with a new head is most
  of the compile."""

  def init(rng):
    variables = model.init(rng, jnp.zeros((1, *shape), jnp.float32))
    flat = traverse_util.flatten_dict(nn.meta.unbox(variables), sep='/')
    return {target: flat[target] for target in targets}

  return jax.jit(init)(jax.random.PRNGKey(seed))


def _is_tag(name: str | None, path) -> bool:
  """Whether `path` names one of model `name`'s weights, not a file."""
  if path is True:
    return True
  return (name is not None and isinstance(path, str) and '/' not in path
          and not os.path.splitext(path)[1] in convert.files.EXTENSIONS
          and not os.path.exists(path))


def cache_dir() -> str:
  """Where converted weights are kept: $JAX_MODEL_ZOO_WEIGHTS, else
  CACHE_DIR ('~' expanded)."""
  return os.path.expanduser(os.environ.get('JAX_MODEL_ZOO_WEIGHTS') or
                            CACHE_DIR)


def published(name: str, tag: str | bool, num_classes: int | None = None,
              image_size: int | None = None) -> convert.Converted:
  """The weights `tag` of zoo model `name`, converted: from the cache when
  they are there and asked for at the file's own classes and size; else
  from the file (downloaded where it is not yet here), whose own conversion
  is then cached.

  Args:
    name: a registered name.
    tag: one of `zoo.weights.tags(name)`; True: the first.
    num_classes: None: the file's; another number leaves the head to
      initialization (`Converted.initialized`).
    image_size: a ViT's input side; None: the file's.

  Returns:
    The Converted weights: name, the kwargs they fix, variables (numpy).

  Raises:
    ValueError: an unknown model or tag; zoo.download.DownloadError: the
      file cannot be downloaded or is damaged; zoo.convert.ConversionError.
  """
  entry = weights.find(name, tag)
  cached = os.path.join(cache_dir(), f'{entry.name}.safetensors')
  converted = _read_cache(cached) if os.path.exists(cached) else None
  resized = converted and image_size not in (
      None, converted.kwargs.get('image_size'))
  if converted is None or resized:
    logging.getLogger(__name__).info(
        'Reading the weights %s from %s (downloaded once; their conversion is '
        'kept in %s).', entry.name, entry.url, cache_dir())
    file = download.fetch(entry.url, os.path.join(cache_dir(), 'downloads'),
                          entry.sha256, entry.size)
    if entry.tokenizer_url:  # A language model's heads and RoPE, beside it.
      download.fetch_optional(entry.url.rsplit('/', 1)[0] + '/config.json',
                              os.path.join(cache_dir(), 'downloads'))
    if converted is None:
      converted = convert.load(file, None, entry.model)
      _write_cache(converted, entry, cached)
    if image_size not in (None, converted.kwargs.get('image_size')):
      return convert.load(file, None, entry.model, num_classes, image_size)
  return _with_classes(converted, num_classes)


def _with_classes(converted: convert.Converted,
                  num_classes: int | None) -> convert.Converted:
  """`converted` for `num_classes` classes: the variables whose shape that
  changes (the head) are left to initialization."""
  if num_classes in (None, converted.kwargs.get('num_classes')):
    return converted  # A language model's too: it has no classes.
  kwargs = {**converted.kwargs, 'num_classes': num_classes}
  shapes = convert.transfer.target_shapes(converted.name, kwargs)
  flat = traverse_util.flatten_dict(converted.variables, sep='/')
  kept = {k: v for k, v in flat.items() if shapes.get(k) == v.shape}
  head = f'a head for {converted.kwargs["num_classes"]} classes'
  return dataclasses.replace(
      converted, kwargs=kwargs,
      variables=traverse_util.unflatten_dict(kept, sep='/'),
      ignored={**converted.ignored,
               **{k: head for k in flat if k not in kept}},
      initialized=sorted(set(shapes) - set(kept)))


def _write_cache(converted: convert.Converted, entry: weights.Weights,
                 path: str):
  """Writes the converted variables to `path` at once (a file appears
  whole or not at all). A cache that cannot be written (read-only, full)
  costs a conversion next time, not this use: a warning says so."""
  record = json.dumps({'model': converted.name, 'kwargs': converted.kwargs,
                       'source': converted.source, 'url': entry.url,
                       'ignored': converted.ignored})
  flat = traverse_util.flatten_dict(converted.variables, sep='/')
  flat = {k: np.ascontiguousarray(v) for k, v in flat.items()}
  partial = None
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=os.path.dirname(path),
                                       suffix='.partial')
    os.close(handle)
    safetensors.numpy.save_file(
        flat, partial,
        metadata={'zoo': record, 'sha256': _digest(record, flat)})
    os.replace(partial, path)
  except (OSError, safetensors.SafetensorError) as e:
    logging.getLogger(__name__).warning(
        'Cannot keep the converted weights %s in %s (%s); they will be '
        'converted again next time. Set JAX_MODEL_ZOO_WEIGHTS to a writable '
        'directory with room.', entry.name, os.path.dirname(path),
        getattr(e, 'strerror', None) or e)
  finally:
    if partial and os.path.exists(partial):
      os.remove(partial)


def _digest(record: str, flat: dict[str, np.ndarray]) -> str:
  """The SHA-256 of a cache file's record and arrays (names, dtypes, shapes
  and bytes): safetensors checks the file's layout, not its numbers."""
  digest = hashlib.sha256(record.encode())
  for key in sorted(flat):
    value = np.ascontiguousarray(flat[key])
    digest.update(json.dumps([key, value.dtype.str, value.shape]).encode())
    digest.update(value.reshape(-1).view(np.uint8))
  return digest.hexdigest()


def _read_cache(path: str) -> convert.Converted | None:
  """The converted weights cached at `path`; None, with a warning, where
  they cannot be read or are damaged, so that they are converted again
  (the new file then replaces this one)."""
  try:
    with safetensors.safe_open(path, 'numpy') as f:
      metadata = f.metadata() or {}
      flat = {k: f.get_tensor(k) for k in f.keys()}
    record = metadata.get('zoo', '')
    if metadata.get('sha256') != _digest(record, flat):
      raise ValueError('its SHA-256 does not match its contents')
    record = json.loads(record)
    return convert.Converted(
        record['model'], record['kwargs'],
        traverse_util.unflatten_dict(flat, sep='/'), record['source'],
        reads={}, writes={}, ignored=record['ignored'], initialized=[])
  except Exception as e:  # pylint: disable=broad-except
    logging.getLogger(__name__).warning(
        'The cached weights %s cannot be read (%s: %s); converting them '
        'again.', path, type(e).__name__, ' '.join(str(e).split())[:200])
    return None

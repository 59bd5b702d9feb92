"""A transformers model as the commands take it (recipes.generate,
recipes.zero_shot): a folder, one file, or a Hugging Face Hub repository
downloaded into the weights cache."""

import os
import re
from typing import Sequence

from zoo import download, pretrained

# The files of a transformers checkpoint folder, in the order they are tried.
WEIGHTS = ('model.safetensors', 'pytorch_model.bin')
_REPOSITORY = re.compile(r'^[\w.-]+/[\w.-]+$')


def weights_in(folder: str) -> str | None:
  """The first of WEIGHTS in `folder`; None: none of them."""
  files = [os.path.join(folder, f) for f in WEIGHTS
           if os.path.isfile(os.path.join(folder, f))]
  return files[0] if files else None


def names_a_repository(weights: str) -> bool:
  """Whether `weights` is shaped like a Hub repository id (OWNER/NAME)."""
  return bool(_REPOSITORY.match(weights))


def fetch(repository: str, tokenizers: Sequence[str]) -> tuple[str, str]:
  """(model.safetensors, the first of the `tokenizers` files the Hub
  repository has), downloaded into the weights cache with its config.json
  (the model's heads, RoPE and norm epsilon, which the weights do not hold)
  and tokenizer_config.json (it names the special tokens) where it has them.

  Raises:
    download.DownloadError: no weights, or none of `tokenizers` (the last
      one's error).
  """
  file = download.fetch(f'hf://{repository}/model.safetensors', _downloads())
  download.fetch_optional(f'hf://{repository}/config.json', _downloads())
  return file, fetch_tokenizer(repository, tokenizers)


def fetch_tokenizer(repository: str, tokenizers: Sequence[str]) -> str:
  """The first of the `tokenizers` files the Hub repository has,
  downloaded into the weights cache with its tokenizer_config.json where
  there is one (it names the special tokens).

  Raises:
    download.DownloadError: none of `tokenizers` (the last one's error).
  """
  download.fetch_optional(f'hf://{repository}/tokenizer_config.json',
                          _downloads())
  for i, name in enumerate(tokenizers):
    try:
      return download.fetch(f'hf://{repository}/{name}', _downloads())
    except download.DownloadError:
      if i == len(tokenizers) - 1:
        raise
  raise ValueError('no tokenizer file to fetch')


def _downloads() -> str:
  return os.path.join(pretrained.cache_dir(), 'downloads')

"""GPT-2-shaped weights give transformers' perplexity on the same text, in
both directions: converted into the recipes, and trained by them and
exported.

A small GPT2LMHeadModel over the 257 byte ids, every weight drawn at random
at a scale that makes its predictions far from uniform, written with
`save_pretrained`, converted by `python -m recipes.convert`'s code and
evaluated by `python -m recipes.evaluate`'s (eval mode with
--config.init_from, no checkpoint in the workdir) on the validation split of
Debian's fortunes as UTF-8 bytes. transformers (torch, float32) then reads
the same prepared records: each document segment of a record on its own,
positions from 0 as the packing gives them, its negative log-likelihood
summed over the targets the loss mask keeps. The perplexities agree to
1e-4 relative, over the same number of tokens. The other way, a GPT-2 the
recipe trains a few steps on the fortunes, written by `python -m
recipes.export --to=transformers` into a folder that `from_pretrained`
reads, gives transformers the perplexity of the run's final evaluation.
Needs torch and transformers (the convert-test extra) and the fortunes
package; skipped without them.
"""

import json
import logging
import os
import re

import numpy as np
import pytest

from tests.convert_helpers import originals

torch, transformers = originals('torch', 'transformers')

# pylint: disable=wrong-import-position
from recipes import convert, export, train
from recipes.config import defaults
from recipes.data import prepared_text
from recipes.data.text import packing, token_records
from tests.unit.zoo.convert.test_convert_transformers_decoder import _original

FORTUNES = '/usr/share/games/fortunes'
SEQ_LEN = 128
EOS = 256  # The byte tokenizer's end of document.

pytestmark = [
    pytest.mark.skipif(not os.path.isdir(FORTUNES),
                       reason=f'needs {FORTUNES}: apt-get install fortunes'),
    pytest.mark.slow]  # The whole validation split, ~142k tokens, twice each.




@pytest.fixture(scope='module', name='prepared')
def _prepared(tmp_path_factory):
  """(data_dir, validation tokens, segments): the fortunes prepared as the
  runs below find them (the same settings, the same directory)."""
  data_dir = str(tmp_path_factory.mktemp('tokens'))
  path = prepared_text.tokens_dataset(f'fortune:{FORTUNES}', 'bytes',
                                      SEQ_LEN, '', data_dir)
  split = token_records.open(path.removeprefix('tokens:')).splits[
      'validation']
  return (data_dir, *split.read(range(len(split))))


def _config(data_dir, **overrides):
  """GPT-2 on the fortunes' bytes, evaluated on their validation split."""
  config = defaults.get_config()
  config.update(dict(
      model='gpt2', dataset=f'fortune:{FORTUNES}', tokenizer='bytes',
      seq_len=SEQ_LEN, data_dir=data_dir, train_split='train',
      eval_split='validation', batch_size=64, strategy='sharded'),
                **overrides)
  return config


def _theirs(model, tokens: np.ndarray, segments: np.ndarray
            ) -> tuple[float, int]:
  """(perplexity, target count) of transformers' model over packed
  records, each document segment run on its own."""
  inputs = packing.model_inputs(tokens, segments)
  pieces = []  # (input ids, targets, mask) of each segment.
  for row in range(len(tokens)):
    ids = inputs['segment_ids'][row]
    for segment in np.unique(ids[ids > 0]):
      where = ids == segment  # One run: positions restart at 0 here.
      pieces.append([inputs[k][row][where]
                     for k in ('inputs', 'targets', 'mask')])
  total, count = 0.0, 0
  # Right-padded into batches: causal attention keeps padding after a
  # segment out of its tokens, and positions still count from 0.
  for start in range(0, len(pieces), 256):
    batch = pieces[start:start + 256]
    padded = np.zeros((3, len(batch), SEQ_LEN), np.int64)
    for i, piece in enumerate(batch):
      for k, array in enumerate(piece):
        padded[k, i, :len(array)] = array
    with torch.no_grad():
      logits = model(torch.as_tensor(padded[0])).logits.float()
      nll = -torch.log_softmax(logits, -1).gather(
          -1, torch.as_tensor(padded[1])[..., None])[..., 0].numpy()
    kept = padded[2].astype(bool)
    total += float(nll[kept].astype(np.float64).sum())
    count += int(kept.sum())
  return float(np.exp(total / count)), count


def _compare(ours: dict, log: str, model, prepared) -> float:
  """Checks our perplexity (and the log's token count) against
  transformers' on the same records; returns theirs."""
  ours_count = int(re.findall(r'over (\d+) tokens of validation', log)[-1])
  theirs, count = _theirs(model.eval(), *prepared[1:])
  print(f'perplexity: ours {ours["perplexity"]:.6f}, transformers '
        f'{theirs:.6f}, relative difference '
        f'{abs(ours["perplexity"] - theirs) / theirs:.2e}, {count} tokens')
  assert ours_count == count
  np.testing.assert_allclose(ours['perplexity'], theirs, rtol=1e-4)
  return theirs


def test_converted_gpt2_gives_transformers_perplexity(tmp_path, prepared,
                                                      caplog):
  # 2 blocks of 64 features in 4 heads of 16, not gpt2's 64: the converter
  # reads them from the config.json beside the weights.
  model = _original('gpt2', n_embd=64, n_head=4, vocab_size=257,
                    n_positions=SEQ_LEN, bos_token_id=EOS, eos_token_id=EOS)
  with torch.no_grad():  # Confident predictions, far from uniform.
    model.transformer.wte.weight.mul_(4)
  model.save_pretrained(tmp_path / 'gpt2', safe_serialization=True)
  converted = str(tmp_path / 'converted')
  assert convert.main(['--source=transformers', '--model=gpt2',
                       str(tmp_path / 'gpt2' / 'model.safetensors'),
                       converted]) == 0
  with open(os.path.join(converted, 'model.json'), encoding='utf-8') as f:
    kwargs = json.load(f)['model_kwargs']
  caplog.set_level(logging.INFO)
  ours = train.run(_config(prepared[0], model_kwargs=kwargs, mode='eval',
                           init_from=converted), str(tmp_path / 'run'))
  theirs = _compare(ours, caplog.text, model, prepared)
  # Far from the uniform 257: the predictions matter to the check.
  assert abs(np.log(theirs) - np.log(257)) > 1, theirs


def test_trained_gpt2_exported_gives_transformers_perplexity(tmp_path,
                                                             prepared,
                                                             caplog):
  sizes = dict(vocab_size=257, hidden_size=128, num_layers=2, num_heads=2,
               mlp_dim=512, max_length=SEQ_LEN)
  caplog.set_level(logging.INFO)
  workdir = str(tmp_path / 'run')
  ours = train.run(_config(
      prepared[0], model_kwargs=sizes, optimizer='adamw', learning_rate=3e-3,
      num_train_steps=30, log_every_steps=10, eval_every_steps=30,
      checkpoint_every_steps=30), workdir)
  assert ours['perplexity'] < 100  # Trained: far below the uniform 257.
  folder = tmp_path / 'gpt2'
  transformers.GPT2Config(
      vocab_size=257, n_embd=128, n_layer=2, n_head=2, n_inner=512,
      n_positions=SEQ_LEN, bos_token_id=EOS,
      eos_token_id=EOS).save_pretrained(folder)
  assert export.main(['--to=transformers', workdir,
                      str(folder / 'model.safetensors')]) == 0
  model = transformers.GPT2LMHeadModel.from_pretrained(folder).float()
  _compare(ours, caplog.text, model, prepared)

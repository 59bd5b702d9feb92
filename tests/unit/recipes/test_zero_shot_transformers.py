"""`python -m recipes.zero_shot` against transformers: a random SiglipModel
and a SiglipTokenizer of a tiny SentencePiece vocabulary, saved as
save_pretrained writes them, then read by the command's own code. Our ids
are SiglipTokenizer's (padding='max_length'), and our logits, for the
command's pixels of a PNG folder, are SiglipModel's logits_per_image for
the same pixel values and ids (the largest difference relative to the
largest logit at most 1e-5). Needs torch and transformers (the
convert-test extra); skipped without them."""

import os

import numpy as np
import pytest
from PIL import Image

from tests.convert_helpers import RTOL, originals

torch, transformers = originals('torch', 'transformers')

# pylint: disable=wrong-import-position
from recipes import zero_shot
from recipes.core import zero_shot as classifier_lib
from recipes.data.sources import image_folder
from recipes.data.text import prompts
from recipes.data.text import tokenizer as tokenizer_lib
from tests.convert_helpers import randomize_torch, relative_difference
from tests.unit.recipes import test_zero_shot as tiny

# Compared with the originals: the whole suite's tier, not the fast one.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('fast_compiles')]


def test_logits_and_ids_are_transformers(tmp_path):
  folder = str(tmp_path / 'siglip')
  config = transformers.SiglipConfig(
      text_config=dict(vocab_size=64, hidden_size=128, intermediate_size=192,
                       num_hidden_layers=2, num_attention_heads=2,
                       max_position_embeddings=16),
      vision_config=dict(hidden_size=128, intermediate_size=192,
                         num_hidden_layers=2, num_attention_heads=2,
                         image_size=32, patch_size=8))
  model = randomize_torch(transformers.SiglipModel(config)).float().eval()
  model.save_pretrained(folder)
  tiny.write_tokenizer(tmp_path)
  theirs_tokenizer = transformers.SiglipTokenizer(
      vocab_file=str(tmp_path / 'spiece.model'), model_max_length=16)
  theirs_tokenizer.save_pretrained(folder)
  # Canonical texts (case, punctuation, spaces), a long one cut: the ids
  # are SiglipTokenizer's, EOS and '</s>' padding included.
  texts = prompts.fill(prompts.templates(tiny.TEMPLATES),
                       ['cat', 'Golden  Retriever', 'a mat ' * 12])
  ids = prompts.token_ids(tokenizer_lib.load(folder), texts, 16)
  np.testing.assert_array_equal(
      ids, theirs_tokenizer(texts, padding='max_length', max_length=16,
                            truncation=True)['input_ids'])
  # The command's pixels of the folder's images, and one prompt per class:
  # our logits are SiglipModel's.
  siglip, variables = zero_shot.load_siglip(
      os.path.join(folder, 'model.safetensors'), 'siglip_b16')
  os.makedirs(tmp_path / 'images')
  for i, picture in enumerate(tiny.pictures(5)):
    Image.fromarray(picture).save(tmp_path / 'images' / f'{i}.png')
  files = image_folder.unlabeled(str(tmp_path / 'images'))
  ((_, _, pixels),) = zero_shot.batches(files, 32, 8)
  one = ids[::2]  # The first template of each class.
  ours = classifier_lib.Classifier(siglip, variables, one[:, None], 4)(pixels)
  with torch.no_grad():
    theirs = model(input_ids=torch.as_tensor(one, dtype=torch.long),
                   pixel_values=torch.as_tensor(
                       pixels.transpose(0, 3, 1, 2))).logits_per_image
  difference = relative_difference(ours, theirs.numpy())
  print(f'largest logit difference relative to the largest: {difference:.2e}')
  assert difference <= RTOL, difference
  assert ours.shape == (len(files), 3)

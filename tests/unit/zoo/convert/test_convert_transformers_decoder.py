"""transformers' GPT-2, Llama and Qwen2 converted to the zoo's Decoder,
verified against transformers.

Each original is built at a tiny size with random weights (norm scales and
biases too), written with `save_pretrained`, converted and compared in
float32: the largest logit difference relative to the largest logit is at
most 1e-5. Llama 3's RoPE scaling, grouped-query attention, Qwen2's biases,
an untied head, a padding mask, and heads, RoPE and norm epsilon other than
the zoo model's (read from config.json) are each compared; the export goes back
into a fresh transformers model. The registered parameter counts are
transformers' own at full size. Needs torch and transformers (the
convert-test extra); skipped without them.
"""

import numpy as np
import pytest

from tests.convert_helpers import originals

torch, transformers, safetensors_numpy = originals(
    'torch', 'transformers', 'safetensors.numpy')
# Compared with the originals: the whole suite's tier, not the fast one.
pytestmark = pytest.mark.slow

# pylint: disable=wrong-import-position
import zoo
from tests.convert_helpers import (RTOL, assert_exactly_once,
                                   randomize_torch, relative_difference,
                                   zoo_on_tokens)
from tests.helpers import slow_after
from zoo import convert
from zoo.convert import export, transformers_decoder

LENGTH = 24
# The originals' config.json values (Hugging Face repositories
# openai-community/gpt2 and gpt2-medium, HuggingFaceTB/SmolLM2-135M and
# -360M, meta-llama/Llama-3.2-1B, Qwen/Qwen2.5-0.5B) that their sizes and
# the zoo's registrations rest on.
_LLAMA3_ROPE = {'rope_type': 'llama3', 'rope_theta': 500000.0, 'factor': 32.0,
                'low_freq_factor': 1.0, 'high_freq_factor': 4.0,
                'original_max_position_embeddings': 8192}
ORIGINALS = {
    'gpt2': ('GPT2Config', dict(n_embd=768, n_layer=12, n_head=12)),
    'gpt2_medium': ('GPT2Config', dict(n_embd=1024, n_layer=24, n_head=16)),
    'smollm2_135m': ('LlamaConfig', dict(
        vocab_size=49152, hidden_size=576, intermediate_size=1536,
        num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
        max_position_embeddings=8192, rms_norm_eps=1e-5,
        rope_parameters={'rope_type': 'default', 'rope_theta': 100000.0},
        tie_word_embeddings=True)),
    'smollm2_360m': ('LlamaConfig', dict(
        vocab_size=49152, hidden_size=960, intermediate_size=2560,
        num_hidden_layers=32, num_attention_heads=15, num_key_value_heads=5,
        max_position_embeddings=8192, rms_norm_eps=1e-5,
        rope_parameters={'rope_type': 'default', 'rope_theta': 100000.0},
        tie_word_embeddings=True)),
    'llama3_2_1b': ('LlamaConfig', dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192,
        num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
        head_dim=64, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_parameters=_LLAMA3_ROPE, tie_word_embeddings=True)),
    'qwen2_5_0_5b': ('Qwen2Config', dict(
        vocab_size=151936, hidden_size=896, intermediate_size=4864,
        num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        max_position_embeddings=32768, rms_norm_eps=1e-6,
        rope_parameters={'rope_type': 'default', 'rope_theta': 1000000.0},
        tie_word_embeddings=True)),
}
# Tiny models of the same structure: heads of 64 features, as the
# originals', 2 query heads sharing 1 key and value head.
TINY = dict(vocab_size=101, hidden_size=128, intermediate_size=192,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)


def _original(name: str, tiny: bool = True, **changes):
  """transformers' model of the zoo's `name`: its original's config (at the
  tiny size, with `changes`), random weights."""
  config_class, config = ORIGINALS[name]
  if tiny and config_class == 'GPT2Config':
    config = dict(config, n_embd=128, n_layer=2, n_head=2, vocab_size=101,
                  n_positions=32, bos_token_id=0, eos_token_id=0)
  elif tiny:
    config = {**config, **TINY, 'head_dim': 64}
  config = getattr(transformers, config_class)(**{**config, **changes})
  model = transformers.AutoModelForCausalLM.from_config(config)
  return randomize_torch(model).float()


def _tokens(batch: int = 2, seed: int = 0, vocab: int = 101) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, vocab, (batch, LENGTH),
                                              dtype=np.int64)


def _theirs(model, tokens, mask=None) -> np.ndarray:
  with torch.no_grad():
    return model(torch.as_tensor(tokens),
                 attention_mask=None if mask is None else torch.as_tensor(
                     mask)).logits.numpy()


def _check(name, tmp_path, tiny=True, **changes):
  """Converts the (tiny) original of `name` from its saved file; returns
  it, the conversion and the worst logit difference."""
  model = _original(name, tiny, **changes)
  model.save_pretrained(tmp_path, safe_serialization=True)
  path = tmp_path / 'model.safetensors'
  converted = convert.load(path, 'transformers', None if not tiny else name)
  assert converted.name == name
  assert_exactly_once(converted, safetensors_numpy.load_file(str(path)),
                      name, converted.kwargs)
  tokens = _tokens(vocab=model.config.vocab_size)
  difference = relative_difference(
      zoo_on_tokens(name, converted.kwargs, converted.variables, tokens),
      _theirs(model, tokens))
  assert difference <= RTOL, difference
  return model, converted, difference


def _export_round_trip(model, converted):
  """The export loads into a fresh transformers model of the same config
  (a tied head is the embedding, not written) and gives its logits."""
  tensors = export.state_dict(transformers_decoder, converted.name,
                              converted.kwargs, converted.variables)
  fresh = type(model)(model.config).float().eval()
  theirs = {k: tuple(v.shape) for k, v in fresh.state_dict().items()}
  if model.config.tie_word_embeddings:
    del theirs['lm_head.weight']
  assert list(tensors) == list(theirs)  # Names and order.
  assert {k: v.shape for k, v in tensors.items()} == theirs
  missing, unexpected = fresh.load_state_dict(
      {k: torch.as_tensor(v) for k, v in tensors.items()}, strict=False)
  assert not unexpected
  assert missing == (['lm_head.weight'] if model.config.tie_word_embeddings
                     else [])
  tokens = _tokens(seed=1)
  difference = relative_difference(_theirs(fresh, tokens),
                                   _theirs(model, tokens))
  assert difference <= RTOL, difference


def test_gpt2_gives_transformers_logits_and_exports_back(tmp_path):
  model, converted, _ = _check('gpt2', tmp_path)
  assert converted.kwargs == {'vocab_size': 101, 'hidden_size': 128,
                              'num_layers': 2, 'mlp_dim': 512,
                              'num_heads': 2, 'max_length': 32}
  _export_round_trip(model, converted)


def test_gpt2_published_layout_sets_the_mask_buffers_aside(tmp_path):
  """openai-community/gpt2's model.safetensors: GPT2Model's names (no
  'transformer.' prefix) with each block's causal-mask buffer."""
  model = _original('gpt2')
  tensors = {k.removeprefix('transformer.'): v.numpy()
             for k, v in model.state_dict().items() if k != 'lm_head.weight'}
  for i in range(2):
    tensors[f'h.{i}.attn.bias'] = np.tril(np.ones((1, 1, 32, 32), np.float32))
  converted = convert.convert(tensors, name='gpt2')
  assert converted.source == 'transformers'  # Detected from the names.
  assert converted.ignored == {f'h.{i}.attn.bias': 'the causal mask (a '
                               'constant)' for i in range(2)}
  tokens = _tokens()
  difference = relative_difference(
      zoo_on_tokens('gpt2', converted.kwargs, converted.variables, tokens),
      _theirs(model, tokens))
  assert difference <= RTOL, difference


def test_llama3_scaled_rope_and_grouped_query_attention(tmp_path):
  model, converted, _ = _check('llama3_2_1b', tmp_path)
  assert converted.kwargs == {'vocab_size': 101, 'hidden_size': 128,
                              'num_layers': 2, 'mlp_dim': 192,
                              'num_heads': 2, 'num_kv_heads': 1}
  # Without Llama 3's frequency scaling the logits are far off.
  tokens = _tokens()
  unscaled = relative_difference(
      zoo_on_tokens('llama3_2_1b', {**converted.kwargs, 'rope_scaling': None},
            converted.variables, tokens), _theirs(model, tokens))
  assert unscaled > 10 * RTOL, unscaled
  _export_round_trip(model, converted)


def test_smollm2_with_an_untied_head(tmp_path):
  model, converted, _ = _check('smollm2_135m', tmp_path,
                               tie_word_embeddings=False)
  assert converted.kwargs['tie_embeddings'] is False
  _export_round_trip(model, converted)


def test_qwen2_with_query_key_value_biases(tmp_path):
  model, converted, _ = _check('qwen2_5_0_5b', tmp_path)
  assert 'qkv_bias' not in converted.kwargs  # qwen2_5_0_5b has them.
  _export_round_trip(model, converted)


def test_padding_mask_keeps_left_padding_out(tmp_path):
  model, converted, _ = _check('smollm2_360m', tmp_path)
  tokens = _tokens()
  mask = np.ones_like(tokens)
  mask[1, :7] = 0  # The second sequence is left-padded by 7 tokens.
  theirs = _theirs(model, tokens, mask)
  real = mask.astype(bool)
  ours = zoo_on_tokens('smollm2_360m', converted.kwargs, converted.variables, tokens,
               mask)
  difference = relative_difference(ours[real], theirs[real])
  assert difference <= RTOL, difference
  unmasked = zoo_on_tokens('smollm2_360m', converted.kwargs, converted.variables,
                   tokens)
  assert relative_difference(unmasked[real], theirs[real]) > 10 * RTOL


def test_a_file_of_another_kind_or_size_is_one_error(tmp_path):
  model = _original('gpt2')
  model.save_pretrained(tmp_path)
  path = tmp_path / 'model.safetensors'
  with pytest.raises(ValueError, match='GPT-2-shaped model; it converts to '
                     "one of gpt2, gpt2_medium, not 'llama3_2_1b'"):
    convert.load(path, name='llama3_2_1b')
  with pytest.raises(ValueError, match='neither num_classes nor image_size'):
    convert.load(path, num_classes=10)
  tensors = safetensors_numpy.load_file(str(path))
  tensors['transformer.wte.weight'] = tensors['transformer.wte.weight'][:, :96]
  with pytest.raises(ValueError, match='96 features, 2 layers and 101 '
                     'tokens, which no zoo model has'):
    convert.convert(tensors)


def test_gpt2_heads_of_another_width_from_config_json(tmp_path):
  """4 heads of 16 features: config.json says so; the weights alone, read
  in gpt2's heads of 64, are one head, and the logits are off."""
  _, converted, difference = _check('gpt2', tmp_path, n_embd=64, n_head=4)
  assert converted.kwargs['num_heads'] == 4
  assert 'head_dim' not in converted.kwargs  # 64 / 4.
  tensors = safetensors_numpy.load_file(str(tmp_path / 'model.safetensors'))
  alone = convert.convert(tensors, name='gpt2')  # Without config.json.
  assert alone.kwargs['num_heads'] == 1
  tokens = _tokens()
  wrong = relative_difference(
      zoo_on_tokens('gpt2', alone.kwargs, alone.variables, tokens),
      zoo_on_tokens('gpt2', converted.kwargs, converted.variables, tokens))
  assert wrong > 10 * RTOL, (difference, wrong)


def test_llama_rope_and_norm_epsilon_from_config_json(tmp_path):
  """RoPE's base and Llama 3 scaling and the norms' epsilon, none of them
  llama3_2_1b's, are the kwargs; with llama3_2_1b's the logits are off."""
  rope = {'rope_type': 'llama3', 'rope_theta': 20000.0, 'factor': 8.0,
          'low_freq_factor': 2.0, 'high_freq_factor': 8.0,
          'original_max_position_embeddings': 16}
  _, converted, difference = _check('llama3_2_1b', tmp_path,
                                    rope_parameters=rope, rms_norm_eps=1e-2)
  config = {'rope_theta': 20000.0, 'rope_scaling': (8.0, 2.0, 8.0, 16),
            'norm_epsilon': 1e-2}
  assert {k: converted.kwargs[k] for k in config} == config
  tokens = _tokens()
  for key in config:
    others = {k: v for k, v in converted.kwargs.items() if k != key}
    wrong = relative_difference(
        zoo_on_tokens('llama3_2_1b', others, converted.variables, tokens),
        zoo_on_tokens('llama3_2_1b', converted.kwargs, converted.variables,
                      tokens))
    assert wrong > 10 * RTOL, (key, difference, wrong)


def test_config_json_of_transformers_4():
  """rope_theta beside rope_scaling ('type' in older files); 'default'
  takes llama3_2_1b's scaling away."""
  tensors = {k: v.numpy() for k, v in _original('llama3_2_1b').state_dict(
  ).items()}
  scaled = convert.convert(tensors, name='llama3_2_1b', config={
      'rope_theta': 30000, 'rope_scaling': {
          'type': 'llama3', 'factor': 4, 'low_freq_factor': 1,
          'high_freq_factor': 2, 'original_max_position_embeddings': 64}})
  assert scaled.kwargs['rope_theta'] == 30000.0
  assert scaled.kwargs['rope_scaling'] == (4.0, 1.0, 2.0, 64)
  plain = convert.convert(tensors, name='llama3_2_1b', config={
      'rope_theta': 500000.0, 'rope_scaling': None})
  assert plain.kwargs['rope_scaling'] is None
  assert 'rope_theta' not in plain.kwargs


def test_config_json_that_contradicts_the_weights_is_one_error(tmp_path):
  model = _original('gpt2')  # 2 heads of 64.
  model.save_pretrained(tmp_path)
  (tmp_path / 'config.json').write_text('{"n_head": 3}')
  with pytest.raises(convert.ConversionError, match=r'does not fit its '
                     r'config.json: 3 query and 3 key heads of 42 features '
                     r'are 126 and 126 features, but its tensors have 128 '
                     r'and 128\.$'):
    convert.load(tmp_path / 'model.safetensors', name='gpt2')
  tensors = {k: v.numpy() for k, v in _original('smollm2_135m').state_dict(
  ).items()}
  with pytest.raises(convert.ConversionError, match='4 query and 1 key heads '
                     'of 64 features are 256 and 64 features, but its '
                     'tensors have 128 and 64'):
    convert.convert(tensors, name='smollm2_135m', config={
        'num_attention_heads': 4, 'num_key_value_heads': 1, 'head_dim': 64})


@pytest.mark.parametrize('rope_type', ['yarn', 'linear', 'dynamic'])
def test_another_rope_scaling_is_one_error(rope_type):
  tensors = {k: v.numpy() for k, v in _original('smollm2_135m').state_dict(
  ).items()}
  with pytest.raises(convert.ConversionError, match=(
      f"its config.json's RoPE scaling '{rope_type}' is not supported")):
    convert.convert(tensors, name='smollm2_135m', config={'rope_parameters': {
        'rope_type': rope_type, 'factor': 2.0, 'rope_theta': 10000.0}})


@pytest.mark.slow  # 124M and 135M parameters: the same code, larger.
@pytest.mark.parametrize('name', ['gpt2', 'smollm2_135m'])
def test_full_size_gives_transformers_logits(name, tmp_path):
  """At full size, the variant found from the file's sizes alone."""
  _, converted, _ = _check(name, tmp_path, tiny=False)
  assert converted.kwargs == {}


@pytest.mark.parametrize('name', slow_after(1, list(ORIGINALS)))
def test_registered_counts_are_the_originals(name):
  config_class, config = ORIGINALS[name]
  config = getattr(transformers, config_class)(**config)
  with torch.device('meta'):  # Shapes only: nothing is allocated.
    model = transformers.AutoModelForCausalLM.from_config(config)
  count = sum(p.numel() for p in model.parameters())  # Tied: counted once.
  assert count == zoo.spec(name).reference_params == zoo.num_params(name)

"""The language models' own contract, without the originals: causal,
padding kept out, token ids only, float32 logits on request, and the
decoder rules' tensor parallelism. (Their logits against transformers':
tests/unit/zoo/convert/test_convert_transformers_decoder.py.)"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from recipes.parallel import partition_rules
from tests.helpers import slow_after

pytestmark = pytest.mark.usefixtures('fast_compiles')


def _model(name, **kwargs):
  model = zoo.create(name, **{**zoo.spec(name).test_kwargs, **kwargs})
  tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 16), 0, 97)
  variables = jax.jit(functools.partial(model.init, train=False))(
      jax.random.PRNGKey(0), tokens)
  return model, nn.meta.unbox(variables), tokens


@pytest.mark.parametrize('name', slow_after(1, ['gpt2', 'qwen2_5_0_5b']))
def test_tokens_see_only_earlier_tokens_and_no_padding(name):
  model, variables, tokens = _model(name)
  apply = jax.jit(model.apply)
  logits = apply(variables, tokens)
  changed = apply(variables, tokens.at[:, 9].set((tokens[:, 9] + 1) % 97))
  np.testing.assert_array_equal(changed[:, :9], logits[:, :9])
  assert not np.allclose(changed[:, 9:], logits[:, 9:])
  # Left padding: what the padded positions hold changes no real token.
  mask = jnp.arange(16)[None] >= jnp.array([[0], [5]])
  padded = apply(variables, tokens, mask=mask)
  other = apply(variables, tokens.at[1, :5].set(3), mask=mask)
  np.testing.assert_allclose(other[1, 5:], padded[1, 5:], rtol=1e-6,
                             atol=1e-6)
  assert not np.allclose(apply(variables, tokens.at[1, :5].set(3))[1, 5:],
                         padded[1, 5:])


@pytest.mark.slow
def test_token_ids_only_and_float32_logits_on_request():
  model, variables, tokens = _model('smollm2_135m', dtype=jnp.bfloat16,
                                    logits_dtype=jnp.float32)
  assert model.apply(variables, tokens).dtype == jnp.float32
  with pytest.raises(ValueError, match=r'a Decoder takes integer token ids of '
                     r'shape \(batch, length\), got float32 inputs'):
    model.apply(variables, tokens.astype(jnp.float32))
  gpt2, variables, _ = _model('gpt2')
  with pytest.raises(ValueError, match='17 tokens are more than the 16 '
                     'positions'):
    gpt2.apply(variables, jnp.zeros((1, 17), jnp.int32))


def test_decoder_rules_split_heads_and_mlp_over_tensor():
  model, expected_variables, tokens = _model('llama3_2_1b')
  tokens = jnp.tile(tokens, (2, 1))  # 4 sequences over data x fsdp.
  expected = jax.jit(model.apply)(expected_variables, tokens)
  rules = partition_rules.default_rules('llama3_2_1b')
  mesh = jax.make_mesh((2, 2, 2), ('data', 'fsdp', 'tensor'),
                       axis_types=(jax.sharding.AxisType.Auto,) * 3)
  init = jax.jit(functools.partial(model.init, train=False))
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    specs = nn.get_partition_spec(
        jax.eval_shape(init, jax.random.PRNGKey(0), tokens))
    shardings = nn.logical_to_mesh_sharding(specs, mesh, rules)
    variables = nn.meta.unbox(jax.jit(init, out_shardings=shardings)(
        jax.random.PRNGKey(0), tokens))
    logits = jax.jit(model.apply)(variables, tokens)
  np.testing.assert_allclose(logits, expected, atol=1e-5, rtol=1e-5)
  block = variables['params']['block0']
  spec = jax.sharding.PartitionSpec
  for part in ('query', 'key'):  # (embed, heads or kv_heads, kv).
    assert block['attention'][part]['kernel'].sharding.spec == spec(
        'fsdp', 'tensor', None)
  assert block['gate']['kernel'].sharding.spec == spec('fsdp', 'tensor')
  assert block['down']['kernel'].sharding.spec == spec('tensor', 'fsdp')
  assert variables['params']['token_embedding'].sharding.spec == spec(
      None, 'fsdp')


@pytest.mark.parametrize('name', slow_after(1, ['smollm2_135m', 'gpt2']))
def test_a_packed_row_gives_each_document_its_logits_alone(name):
  """Three documents packed into one row, then padding: with segment ids
  and positions that restart, each document's logits are those it has as
  the only input (RoPE or learned positions); without them, they are
  not."""
  model, variables, tokens = _model(name)
  apply = jax.jit(model.apply)
  row = tokens[:1]
  lengths = [5, 7, 3]  # And 1 padding token (segment 0).
  segments = jnp.array([sum(([i + 1] * n for i, n in enumerate(lengths)),
                            []) + [0]])
  positions = jnp.array([sum((list(range(n)) for n in lengths), []) + [0]])
  packed = apply(variables, row, segment_ids=segments, positions=positions)
  unpacked = apply(variables, row)
  start = 0
  for n in lengths:
    alone = apply(variables, row[:, start:start + n])
    np.testing.assert_allclose(packed[:, start:start + n], alone, rtol=1e-5,
                               atol=1e-5)
    if start:  # A later document sees the ones before it when not packed.
      assert not np.allclose(unpacked[:, start:start + n], alone, atol=1e-3)
    start += n
  assert np.isfinite(packed).all()  # The padding token attends to itself.

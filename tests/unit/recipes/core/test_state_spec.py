"""The initial state: compiled quickly on CPU, with the bits of XLA's default
compile (recipes/core/state_spec.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoo
from recipes.core import state_spec
from recipes.core.train_state import UpdateRules
from tests.helpers import slow_after

# The real-size CNN, a small ViT and GPT-2 (float and integer inputs), with
# AdamW's moments and an EMA copy besides. (A ResNet-20's compile at level 3
# took 40 s with jaxlib 0.10's older emitters.)
MODELS = {
    'cnn': (lambda: zoo.create('cnn'), (28, 28, 1), jnp.float32),
    'vit': (lambda: zoo.create('vit_ti16', num_classes=10, patch_size=7,
                               image_size=28, hidden_size=32, num_layers=1,
                               num_heads=4, mlp_dim=64), (28, 28, 1),
            jnp.float32),
    'gpt2': (lambda: zoo.create('gpt2', vocab_size=101, hidden_size=64,
                                num_layers=2, num_heads=2, mlp_dim=128,
                                max_length=24), (24,), jnp.int32),
}


@pytest.mark.parametrize('name', slow_after(1, list(MODELS)))
def test_the_initial_state_has_the_bits_of_xlas_default_compile(name):
  make_model, shape, dtype = MODELS[name]
  spec = state_spec.make(make_model(), optax.adamw(1e-3), shape,
                         input_dtype=dtype,
                         update_rules=UpdateRules(ema_decay=0.99))
  rng = jax.random.PRNGKey(3)
  quick = spec.create_state(rng)
  # XLA's own level (3), which tests/conftest.py lowers on jaxlib 0.10.
  default = jax.jit(spec.init).lower(rng).compile(
      compiler_options={'xla_backend_optimization_level': 3})(rng)
  leaves = jax.tree.leaves(default)
  assert len(leaves) > 4
  for a, b in zip(jax.tree.leaves(quick), leaves, strict=True):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_on_cpu_the_initial_state_compiles_at_a_lower_llvm_level():
  """The options do reach XLA: an option XLA does not know fails the
  compile."""
  assert state_spec._init_compiler_options() == {
      'xla_backend_optimization_level': 2}
  spec = state_spec.make(zoo.create('mlp', num_classes=3, hidden_sizes=(4,)),
                         optax.sgd(0.1), (2,))
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(state_spec, '_init_compiler_options',
                  lambda: {'xla_no_such_option': 1})
    with pytest.raises(Exception, match='xla_no_such_option'):
      spec.create_state()

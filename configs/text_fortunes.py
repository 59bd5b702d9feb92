"""A small Llama-shaped language model trained on real English on a CPU,
with one command and no download:

    apt-get install -y fortunes
    python -m recipes.train --config=configs/text_fortunes.py \
        --workdir=/tmp/text_fortunes

The text is Debian's `fortunes` package: 2.6 MB of English in 15,000
quotations, jokes and short poems (recipes/data/sources/fortune_source.py;
about 5% of them, picked by a checksum of their text, are the validation
split). The first run tokenizes it into UTF-8 bytes and packs it into
sequences of 256 (2.4M training tokens, 142k validation tokens), once, in
~/.cache/jax-model-zoo/tokens; later runs read that.

The model is smollm2_135m's shape (RoPE, grouped-query attention, RMS norm,
SwiGLU, tied embeddings) made small: 4 blocks of 128 features and a
vocabulary of the 257 byte ids, 0.8M parameters.

Expected: the validation perplexity per byte goes from 257 (uniform) to
about 6 in 600 steps (about 1 epoch of the text), 4 minutes on two x86-64
cores (README's table has the measured numbers).
"""

from recipes.config import defaults


def get_config():
  config = defaults.get_config()
  config.model = 'smollm2_135m'
  config.model_kwargs = dict(hidden_size=128, num_layers=4, num_heads=4,
                             num_kv_heads=2, mlp_dim=384, max_length=256,
                             vocab_size=257)
  config.dataset = 'fortune:/usr/share/games/fortunes'
  config.tokenizer = 'bytes'
  config.seq_len = 256
  config.train_split = 'train'
  config.eval_split = 'validation'
  config.strategy = 'sharded'  # Data parallel over every device.
  config.batch_size = 16
  config.num_train_steps = 600
  config.optimizer = 'adamw'
  config.learning_rate = 3e-3
  config.weight_decay = 0.1
  config.grad_clip_norm = 1.0
  config.lr_schedule = 'warmup_cosine'
  config.warmup_steps = 50
  config.log_every_steps = 50
  config.eval_every_steps = 200
  config.checkpoint_every_steps = 200
  return config

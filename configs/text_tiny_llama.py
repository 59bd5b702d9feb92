"""A tiny Llama-shaped language model on your own text, on a CPU.

First tokenize and pack the text with the model's tokenizer (here SmolLM2's
tokenizer.json, 49,152 ids; JSONL files with a 'text' column, one per
split: DIR/train.jsonl and DIR/validation.jsonl):

    python -m recipes.data.prepare jsonl:DIR /tmp/tokens \
        --tokenizer=PATH/tokenizer.json --seq_len=128

then train on the packed sequences:

    python -m recipes.train --config=configs/text_tiny_llama.py \
        --workdir=/tmp/text_tiny_llama --config.dataset=tokens:/tmp/tokens

The model is smollm2_135m's shape (RoPE, grouped-query attention, RMS norm,
SwiGLU, tied embeddings) made small: 4 blocks of 128 features, 7.1M
parameters, 6.3M of them the embedding. Packed documents are kept apart
(attention and positions restart at each). The summaries and the log show
the loss, perplexity and token accuracy on the validation split, and
tokens/s.

Expected: the loss falls from ln(49152) = 10.8 at the start; perplexity on
a real corpus not measured yet (issue 33, section 4). At test size it
trains in seconds on a CPU (tests/unit/configs/test_configs.py).
"""

from recipes.config import defaults


def get_config():
  config = defaults.get_config()
  config.model = 'smollm2_135m'
  config.model_kwargs = dict(hidden_size=128, num_layers=4, num_heads=4,
                             num_kv_heads=2, mlp_dim=384, max_length=128)
  config.dataset = 'tokens:/tmp/tokens'
  config.train_split = 'train'
  config.eval_split = 'validation'
  config.strategy = 'sharded'  # Data parallel over every device.
  config.batch_size = 16
  config.num_train_steps = 2000
  config.optimizer = 'adamw'
  config.learning_rate = 3e-3
  config.weight_decay = 0.1
  config.grad_clip_norm = 1.0
  config.lr_schedule = 'warmup_cosine'
  config.warmup_steps = 100
  config.log_every_steps = 50
  config.eval_every_steps = 500
  config.checkpoint_every_steps = 500
  return config

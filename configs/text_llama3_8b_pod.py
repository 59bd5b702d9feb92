"""Llama 3 8B from scratch on a TPU v5e or v5p slice: FSDP, bfloat16,
remat, sequences of 8,192 tokens.

Tokenize and pack the corpus with Llama 3's tokenizer (128,256 ids):

    python -m recipes.data.prepare jsonl:DIR /data/llama3_tokens_8192 \
        --tokenizer=PATH/tokenizer.json --seq_len=8192

    python -m recipes.train --config=configs/text_llama3_8b_pod.py \
        --workdir=gs://BUCKET/llama3_8b \
        --config.dataset=tokens:/data/llama3_tokens_8192

Before renting the slice, compile the train step for it on any machine
(nothing allocated, the data need not exist):

    python -m recipes.compile --config=configs/text_llama3_8b_pod.py \
        --topology=v5p:2x2x2 --config.batch_size=8

The mesh is fsdp over every chip (parameters, gradients and optimizer state
split, gathered where used); each block is recomputed in the backward pass
(remat); bfloat16 computation with float32 master weights. Global batch 128
sequences (1,048,576 tokens), one per chip on a v5p-128 (it does not fit a
v5e-64 yet: docs/performance.md);
AdamW as Llama 3 trains (peak 3e-4, warmup 2,000 steps, cosine decay,
weight decay 0.1, clipping at 1.0).

Expected: the fit and the compiler's estimate of the step time, tokens/s
and MFU are in docs/performance.md (estimates, not measurements); the loss
and perplexity on a real corpus not measured yet.
"""

from recipes.config import defaults


def get_config():
  config = defaults.get_config()
  config.model = 'llama3_8b'
  config.model_kwargs = dict(remat=True)
  config.dataset = 'tokens:/data/llama3_tokens_8192'
  config.seq_len = 8192
  config.train_split = 'train'
  config.eval_split = 'validation'
  config.strategy = 'sharded'
  config.mesh.data = 1
  config.mesh.fsdp = -1
  config.mesh.tensor = 1
  config.half_precision = True
  config.half_precision_dtype = 'bfloat16'
  config.batch_size = 128
  config.num_train_steps = 100000
  config.optimizer = 'adamw'
  config.learning_rate = 3e-4
  config.weight_decay = 0.1
  config.grad_clip_norm = 1.0
  config.lr_schedule = 'warmup_cosine'
  config.warmup_steps = 2000
  config.log_every_steps = 50
  config.eval_every_steps = 1000
  config.checkpoint_every_steps = 1000
  return config

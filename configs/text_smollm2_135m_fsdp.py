"""SmolLM2-135M from scratch, sharded: FSDP and tensor parallelism, bfloat16.

Tokenize and pack the corpus with SmolLM2's own tokenizer at the model's
training length (2,048 tokens):

    python -m recipes.data.prepare jsonl:DIR /data/smollm2_tokens \
        --tokenizer=PATH/tokenizer.json --seq_len=2048

    python -m recipes.train --config=configs/text_smollm2_135m_fsdp.py \
        --workdir=gs://BUCKET/smollm2_135m \
        --config.dataset=tokens:/data/smollm2_tokens

The mesh is tensor=2 (each block's attention heads and MLP hidden features
split over pairs of devices) and fsdp over the rest (parameters and
optimizer state split, gathered where used); the number of devices must be
even. Global batch 256 sequences (524,288 tokens) in 4 micro-batches,
bfloat16 computation with float32 master weights, each block recomputed in
the backward pass (remat). AdamW as the Llama papers train (peak 3e-3 for a
model this small, warmup 2,000 steps, cosine decay, weight decay 0.1,
clipping at 1.0).

Expected: the loss, perplexity, token accuracy and tokens/s in the summaries;
SmolLM2-135M's own run (Allal et al. 2025, 2T tokens) is far longer than this
one's 10B tokens (20,000 steps): not measured yet.
"""

from recipes.config import defaults


def get_config():
  config = defaults.get_config()
  config.model = 'smollm2_135m'
  config.model_kwargs = dict(remat=True)
  config.dataset = 'tokens:/data/smollm2_tokens'
  config.train_split = 'train'
  config.eval_split = 'validation'
  config.strategy = 'sharded'
  config.mesh.data = 1
  config.mesh.fsdp = -1
  config.mesh.tensor = 2
  config.half_precision = True
  config.half_precision_dtype = 'bfloat16'
  config.batch_size = 256
  config.grad_accum_steps = 4
  config.num_train_steps = 20000
  config.optimizer = 'adamw'
  config.learning_rate = 3e-3
  config.weight_decay = 0.1
  config.grad_clip_norm = 1.0
  config.lr_schedule = 'warmup_cosine'
  config.warmup_steps = 2000
  config.log_every_steps = 50
  config.eval_every_steps = 1000
  config.checkpoint_every_steps = 1000
  return config

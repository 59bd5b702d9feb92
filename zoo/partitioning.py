"""Logical axis names of the zoo's arrays.

Every parameter initializer is wrapped in `nn.with_logical_partitioning`, and
large activations pass through `nn.with_logical_constraint`, so code that owns
a mesh places a model by Flax logical-axis rules alone, (logical name, mesh
axes) pairs; the recipes' rules, chosen by `zoo.spec(name).family`, are in
recipes/parallel/partition_rules.py. The zoo itself names no mesh axes.

Logical names of parameter dimensions:
  conv_in, conv_out   input / output channels of a convolution kernel
                      (its spatial dimensions are None: never sharded)
  embed               features entering a dense layer; in a ViT, the width of
                      the residual stream
  mlp                 hidden features of a dense layer or a transformer MLP
  heads, kv           attention heads and the features of one head
  kv_heads            key and value heads of grouped-query attention
  vocab               a language model's token embedding and head rows
  classes             classifier outputs (1000 or 10: not divisible, replicated)
  norm                scale and bias of batch / layer norm (small, replicated)
  seq                 tokens of a learned position embedding (replicated)

Logical names of activation dimensions: batch, height, width, channels (conv
nets), and seq, embed, mlp, heads, kv, kv_heads, vocab (transformers)
shared with the parameters.

Batch-norm statistics (the 'batch_stats' collection) carry no names: replicate
them, as the recipes average them across devices themselves.
"""

# Logical names of the large activations.
IMAGE = ('batch', 'height', 'width', 'channels')
TOKENS = ('batch', 'seq', 'embed')

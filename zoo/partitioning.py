"""Logical axis names of the zoo's arrays and the default rules that place them.

Every parameter initializer is wrapped in `nn.with_logical_partitioning`, and
large activations pass through `nn.with_logical_constraint`, so a sharded
recipe can place a model on a ('data', 'fsdp', 'tensor') mesh by rules alone:

    rules = zoo.default_rules('vit_b16')
    specs = nn.get_partition_spec(jax.eval_shape(model.init, rng, x))
    shardings = nn.logical_to_mesh_sharding(specs, mesh, rules)

Logical names of parameter dimensions:
  conv_in, conv_out   input / output channels of a convolution kernel
                      (its spatial dimensions are None: never sharded)
  embed               features entering a dense layer; in a ViT, the width of
                      the residual stream
  mlp                 hidden features of a dense layer or a transformer MLP
  heads, kv           attention heads and the features of one head
  classes             classifier outputs (1000 or 10: not divisible, replicated)
  norm                scale and bias of batch / layer norm (small, replicated)
  seq                 tokens of a ViT's position embedding (replicated)

Logical names of activation dimensions: batch, height, width, channels (conv
nets), and seq, embed, mlp, heads, kv (ViT) shared with the parameters.

Rules are Flax's: (logical name, mesh axis or axes or None) pairs, applied in
order, and a mesh axis is used at most once per array. 'batch' comes first, so
in an activation (batch, seq, embed) 'batch' takes ('data', 'fsdp') and 'embed'
finds 'fsdp' taken and stays replicated, while in a parameter (embed, mlp) the
same rule shards 'embed' over 'fsdp': parameters are fully sharded (FSDP),
activations are split by batch only. Names without a rule are replicated.

Batch-norm statistics (the 'batch_stats' collection) carry no names: replicate
them, as the recipe averages them across devices itself.
"""

LogicalRules = tuple[tuple[str, str | tuple[str, ...] | None], ...]

BATCH = ('data', 'fsdp')

# Logical names of the large activations.
IMAGE = ('batch', 'height', 'width', 'channels')
TOKENS = ('batch', 'seq', 'embed')

# Convolutional nets and MLPs: data parallel with fully sharded parameters.
# The sharded dimension is the output channels (multiples of 16 in the zoo).
CONV_RULES: LogicalRules = (
    ('batch', BATCH),
    ('conv_out', 'fsdp'),
    ('embed', 'fsdp'),
    ('conv_in', None),
    ('mlp', None),
    ('classes', None),
    ('norm', None),
    ('height', None),
    ('width', None),
    ('channels', None),
)

# Vision transformers: FSDP over the embedding, plus Megatron-style tensor
# parallelism: MLP hidden features and attention heads split over 'tensor'
# (so the number of heads must be divisible by the 'tensor' axis size).
VIT_RULES: LogicalRules = (
    ('batch', BATCH),
    ('embed', 'fsdp'),
    ('mlp', 'tensor'),
    ('heads', 'tensor'),
    ('kv', None),
    ('seq', None),
    ('conv_in', None),
    ('classes', None),
    ('norm', None),
)

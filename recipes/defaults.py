"""The base config: every field any recipe reads, with its default.

Configs (configs/*.py) start from `get_config()` here and change what they need, so
any field can be overridden on any config's command line.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  # pmap: the state replicated on every device (recipes/parallel/pmap.py).
  # shard_map: the same with jax.shard_map (recipes/parallel/shard_map.py).
  # sharded: jax.jit on a device mesh (recipes/parallel/sharded.py) with the
  # fields below; pmap and shard_map ignore them.
  config.strategy = 'pmap'
  # Mesh axis sizes, in this order; one may be -1 (the devices left over).
  # The batch is split over data x fsdp; fsdp also splits parameters and
  # optimizer state; tensor splits large matrices (e.g. a ViT's MLP, heads).
  config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
  # Flax logical-axis rules, ((logical name, mesh axes), ...); () = the
  # defaults of the model's family (recipes/parallel/partition_rules.py
  # default_rules). First match wins.
  config.partition_rules = ()
  # ((regex on the parameter path, spec per dimension), ...), checked before
  # the logical rules, e.g. (('Dense_0/kernel$', (None, 'tensor')),).
  # Parameters no rule matches are replicated.
  config.path_rules = ()

  # train, or eval: evaluate the workdir's latest checkpoint, write its eval/
  # summaries, and stop.
  config.mode = 'train'

  # Model: a name from `zoo.list_models()`, or a Linen Module of your own as
  # 'package.module:ClassName' (imported from PYTHONPATH or the current
  # directory; it takes num_classes and dtype, see README).
  # With half_precision, computation in half_precision_dtype and parameters,
  # optimizer state and loss in float32. bfloat16 suits TPUs and recent GPUs;
  # float16 (GPUs) adds dynamic loss scaling, skipping overflowing updates.
  config.model = 'cnn'
  config.model_kwargs = ml_collections.ConfigDict()  # Extra create() args.
  config.half_precision = False
  config.half_precision_dtype = 'bfloat16'
  # Start from another run's parameters (its workdir, checkpoints directory
  # or one step's directory), e.g. to fine-tune; those whose name or shape
  # differ (a new head) keep their initialization. Ignored when resuming.
  config.init_from = ''

  # Data: a TFDS name, or `fashion_mnist_idx` for the offline Debian files.
  config.dataset = 'mnist'
  config.data_dir = ''  # '' = TFDS's default (~/tensorflow_datasets).
  config.train_split = 'train'
  config.eval_split = 'test'
  # How the dataset is read (recipes/data/datasets.py): auto = by its name
  # (IDX files, ImageNet-size TFDS datasets streamed, other TFDS datasets in
  # memory); memory | stream force it for a TFDS dataset.
  config.data_source = 'auto'
  # Preprocessing (recipes/data/preprocess.py): augment none | cifar | imagenet
  # (imagenet takes a streamed dataset's JPEGs, crops to image_size);
  # normalize '' | cifar10 | imagenet (per-channel mean/std).
  config.augment = 'none'
  config.normalize = ''
  config.image_size = 224

  # Training length: num_train_steps wins over num_epochs when > 0.
  config.batch_size = 128  # Global, over all devices and processes.
  config.eval_batch_size = 0  # 0 = batch_size.
  config.num_epochs = 10.0
  config.num_train_steps = 0

  # Optimizer: sgd | adam | adamw, with weight decay on kernels only.
  config.optimizer = 'sgd'
  config.learning_rate = 0.1
  config.momentum = 0.9
  config.nesterov = False
  config.b1 = 0.9
  config.b2 = 0.999
  config.weight_decay = 0.0

  # Schedule: constant | exponential | warmup_cosine.
  # exponential: learning_rate * decay_rate ** (step / decay_steps).
  config.lr_schedule = 'constant'
  config.decay_rate = 0.1
  config.decay_steps = 1000
  config.staircase = False
  config.warmup_epochs = 0.0

  # Checkpoints in WORKDIR/checkpoints; a restarted run resumes from the
  # latest one. checkpoint_every_steps 0 = only at the end; -1 = save none
  # (existing ones are still resumed from). keep_checkpoints: how many of the
  # newest to keep; 0 = keep them all.
  config.checkpoint_every_steps = 1000
  config.keep_checkpoints = 3

  # A non-finite loss or gradient norm stops the run (naming the step), or,
  # with this set, that update is skipped and counted (train/skipped_steps).
  config.skip_nonfinite_updates = False

  # When no train step, eval batch or checkpoint save completes for this
  # long (the first step's compilation included), every process writes the
  # stacks of its threads and the run stops with one line saying where it
  # stalled (recipes/watchdog.py). 0 = never.
  config.stall_timeout_seconds = 300.0

  config.seed = 0
  config.log_every_steps = 100
  config.eval_every_steps = 0  # 0 = once per epoch.
  return config

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
  # More splits evaluated next to eval_split, {name: split}, each written
  # under eval_<name>/, e.g. {'minival': 'train[99%:]'} with
  # train_split='train[:99%]'. TFDS slicing syntax works for every dataset.
  config.extra_eval_splits = ml_collections.ConfigDict()
  # Preprocessing (recipes/data/preprocess.py): augment none | cifar |
  # imagenet (takes a streamed dataset's JPEGs, crops to image_size) |
  # finetune (random crop of decoded images resized to image_size, as
  # vision_transformer fine-tunes);
  # normalize '' | cifar10 | imagenet (per-channel mean/std) |
  # minus_one_to_one (values in [-1, 1], as big_vision's value_range(-1, 1)).
  config.augment = 'none'
  config.normalize = ''
  config.image_size = 224
  # RandAugment (Cubuk et al. 2019) on training images: this many random
  # operations per image at this magnitude (0-10 scale, as in big_vision and
  # the TF reference); 0 layers = off. Seeded per example like the rest.
  config.randaugment_layers = 0
  config.randaugment_magnitude = 10

  # Regularization in the loss (model-side dropout and drop-path are model
  # kwargs, e.g. --config.model_kwargs.drop_path_rate=0.1).
  # label_smoothing: the target is (1 - s) * one_hot + s / num_classes.
  config.label_smoothing = 0.0
  # Mixup (Zhang et al. 2018) and CutMix (Yun et al. 2019) on each batch:
  # with probability mix_prob a batch is mixed with itself rolled by one
  # example, by a ratio drawn from Beta(alpha, alpha); labels mix the same
  # way (one-hot). With both alphas > 0, cutmix is chosen with probability
  # cutmix_switch_prob. alpha 0 = off.
  config.mixup_alpha = 0.0
  config.cutmix_alpha = 0.0
  config.mix_prob = 1.0
  config.cutmix_switch_prob = 0.5

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
  # adamw only: what the decay is multiplied by. learning_rate: the scheduled
  # learning rate (AdamW as in optax and PyTorch: p -= lr_t * wd * p);
  # schedule: the schedule's factor only, lr_t / learning_rate (big_vision's
  # decoupled decay: p -= (lr_t / lr) * wd * p).
  config.weight_decay_scale = 'learning_rate'
  # dtype of Adam's first moment: '' = the parameters' (float32); bfloat16
  # halves its memory, as big_vision does.
  config.adam_mu_dtype = ''
  # Clip gradients to this global norm before the optimizer; 0 = off.
  config.grad_clip_norm = 0.0
  # Split each batch into this many micro-batches whose gradients are summed
  # before one update: the update of the whole batch in less memory.
  config.grad_accum_steps = 1
  # Keep an exponential moving average of the parameters with this decay
  # (e.g. 0.9999), evaluated next to them (eval_ema/, with the trained
  # batch-norm statistics) and checkpointed; 0 = none.
  config.ema_decay = 0.0
  # pmap and shard_map: batch-norm statistics over the whole global batch
  # instead of each device's share (the sharded strategy always does so).
  config.cross_device_batch_norm = False

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
  # stalled (recipes/runtime/watchdog.py). 0 = never.
  config.stall_timeout_seconds = 300.0

  config.seed = 0
  config.log_every_steps = 100
  config.eval_every_steps = 0  # 0 = once per epoch.
  # Trace this many steps after step profile_start_step (fewer if the run
  # ends sooner) into WORKDIR/summaries/plugins/profile, for TensorBoard's
  # profile tab (needs tensorboard-plugin-profile, the `profile` extra);
  # 0 = no trace.
  config.profile_steps = 0
  config.profile_start_step = 10
  return config

"""Pretrained weights by name: the table of tags and where each comes from.

    model = zoo.create('convnext_tiny', pretrained='fb_in22k_ft_in1k')
    logits = model(images)             # a module bound to its weights
    module, variables = model.unbind()

    zoo.list_models(pretrained=True)   # the models that have tags
    zoo.weights.tags('convnext_tiny')  # their tags, with the published top-1

A tag is one published file: timm's Hugging Face Hub repositories
(hf://REPO/FILE) or Google's buckets (gs://BUCKET/FILE). The first use
downloads it, checks it, converts it and keeps the converted variables in the
cache (zoo/pretrained.py); later uses read the cache only.

`top1` is the ImageNet-1k top-1 accuracy published for the file, at
`eval_size` pixels: timm's results-imagenet.csv for the Hub files; the
papers for Google's files; None where the file has no ImageNet-1k classifier
(an ImageNet-21k head, a SigLIP image tower or DINOv2's features).

A language model's tag is its publisher's repository on the Hub (the
transformers `model.safetensors`), whose `tokenizer.json` tokenizes text
for it (`tokenizer_url`); its image fields do not apply.

`mean`, `std`, `channels` and `input_size` are the inputs the weights were
trained on, as timm's pretrained_cfg gives them: pixel values in [0, 1]
normalized per channel; Google's files take [-1, 1] (mean and std 0.5).
"""

import dataclasses

from zoo import registry

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# Google's [-1, 1] (Inception's preprocessing): ViT, Mixer, BiT, SigLIP.
_GOOGLE = {'mean': (0.5, 0.5, 0.5), 'std': (0.5, 0.5, 0.5)}


@dataclasses.dataclass(frozen=True)
class Weights:
  """One published file of weights for a zoo model.

  Attributes:
    model: the zoo model, e.g. 'convnext_tiny'.
    tag: its name among the model's weights, e.g. 'fb_in22k_ft_in1k'.
    url: 'hf://REPO/FILE' (a Hugging Face Hub repository) or
      'gs://BUCKET/FILE'.
    top1: the published ImageNet-1k top-1 (%), or None (see the module's
      docstring).
    eval_size: the image size of `top1`; None: the model's.
    sha256: the file's SHA-256 where its publisher gives one outside the
      download itself; Hub files are checked against the Hub's own.
    size: the file's size in bytes, where known.
    mean: the per-channel mean subtracted from pixel values in [0, 1].
    std: the per-channel std they are then divided by.
    channels: the input channels (3: RGB).
  """

  model: str
  tag: str
  url: str
  top1: float | None = None
  eval_size: int | None = None
  sha256: str | None = None
  size: int | None = None
  mean: tuple[float, ...] = IMAGENET_MEAN
  std: tuple[float, ...] = IMAGENET_STD
  channels: int = 3

  @property
  def input_size(self) -> int:
    """The side of the square images the weights were trained (for Hub
    files with a `top1`: fine-tuned) at: `eval_size`, else the model's."""
    return self.eval_size or registry.input_shape(self.model)[0]

  @property
  def tokenizer_url(self) -> str | None:
    """A language model's tokenizer.json beside its weights on the Hub;
    None for an image model's."""
    if registry.spec(self.model).modality != 'text':
      return None
    return self.url.rsplit('/', 1)[0] + '/tokenizer.json'

  @property
  def name(self) -> str:
    """'model.tag', as timm names pretrained weights."""
    return f'{self.model}.{self.tag}'


def _hub(model: str, tag: str, repo: str, top1: float | None = None,
         eval_size: int | None = None, **inputs) -> Weights:
  """Weights in timm's repository `repo` on the Hugging Face Hub; `inputs`:
  their mean and std where not ImageNet's."""
  return Weights(model, tag, f'hf://timm/{repo}/model.safetensors', top1,
                 eval_size, **inputs)


def _text(model: str, tag: str, repo: str) -> Weights:
  """A language model's weights: transformers' model.safetensors in its
  publisher's Hub repository `repo`."""
  return Weights(model, tag, f'hf://{repo}/model.safetensors')


_TABLE = [
    # torchvision's ResNets, in timm's repositories (same names and layout).
    _hub('resnet18', 'tv_in1k', 'resnet18.tv_in1k', 69.752),
    _hub('resnet34', 'tv_in1k', 'resnet34.tv_in1k', 73.298),
    _hub('resnet50', 'tv_in1k', 'resnet50.tv_in1k', 76.156),
    _hub('resnet50', 'tv2_in1k', 'resnet50.tv2_in1k', 80.846),
    _hub('resnet101', 'tv_in1k', 'resnet101.tv_in1k', 77.404),
    _hub('resnet152', 'tv_in1k', 'resnet152.tv_in1k', 78.330),
    # ViTs (AugReg, Steiner et al. 2021).
    _hub('vit_ti16', 'augreg_in21k_ft_in1k',
         'vit_tiny_patch16_224.augreg_in21k_ft_in1k', 75.452, **_GOOGLE),
    _hub('vit_s16', 'augreg_in21k_ft_in1k',
         'vit_small_patch16_224.augreg_in21k_ft_in1k', 81.402, **_GOOGLE),
    _hub('vit_s16', 'augreg_in1k', 'vit_small_patch16_224.augreg_in1k',
         78.842, **_GOOGLE),
    _hub('vit_b16', 'augreg2_in21k_ft_in1k',
         'vit_base_patch16_224.augreg2_in21k_ft_in1k', 85.108, **_GOOGLE),
    _hub('vit_b16', 'augreg_in21k_ft_in1k',
         'vit_base_patch16_224.augreg_in21k_ft_in1k', 84.534, **_GOOGLE),
    _hub('vit_l16', 'augreg_in21k_ft_in1k',
         'vit_large_patch16_224.augreg_in21k_ft_in1k', 85.856, **_GOOGLE),
    Weights('vit_b16', 'google_in21k', 'gs://vit_models/imagenet21k/'
            'ViT-B_16.npz', **_GOOGLE),
    # ConvNeXt (Liu et al. 2022).
    _hub('convnext_tiny', 'fb_in1k', 'convnext_tiny.fb_in1k', 82.066),
    _hub('convnext_tiny', 'fb_in22k_ft_in1k', 'convnext_tiny.fb_in22k_ft_in1k',
         82.900),
    _hub('convnext_small', 'fb_in1k', 'convnext_small.fb_in1k', 83.144),
    _hub('convnext_small', 'fb_in22k_ft_in1k',
         'convnext_small.fb_in22k_ft_in1k', 84.582),
    _hub('convnext_base', 'fb_in1k', 'convnext_base.fb_in1k', 83.838),
    _hub('convnext_base', 'fb_in22k_ft_in1k', 'convnext_base.fb_in22k_ft_in1k',
         85.814),
    _hub('convnext_large', 'fb_in1k', 'convnext_large.fb_in1k', 84.304),
    _hub('convnext_large', 'fb_in22k_ft_in1k',
         'convnext_large.fb_in22k_ft_in1k', 86.612),
    # MLP-Mixer (Tolstikhin et al. 2021).
    _hub('mixer_b16', 'goog_in21k_ft_in1k', 'mixer_b16_224.goog_in21k_ft_in1k',
         76.616, **_GOOGLE),
    _hub('mixer_l16', 'goog_in21k_ft_in1k', 'mixer_l16_224.goog_in21k_ft_in1k',
         72.084, **_GOOGLE),
    Weights('mixer_b16', 'google_in21k', 'gs://mixer_models/imagenet21k/'
            'Mixer-B_16.npz', **_GOOGLE),
    # BiT (Kolesnikov et al. 2020), fine-tuned at 448 pixels.
    _hub('bit_r50x1', 'goog_in21k_ft_in1k',
         'resnetv2_50x1_bit.goog_in21k_ft_in1k', 80.386, 448, **_GOOGLE),
    _hub('bit_r50x3', 'goog_in21k_ft_in1k',
         'resnetv2_50x3_bit.goog_in21k_ft_in1k', 83.982, 448, **_GOOGLE),
    _hub('bit_r101x1', 'goog_in21k_ft_in1k',
         'resnetv2_101x1_bit.goog_in21k_ft_in1k', 82.332, 448, **_GOOGLE),
    _hub('bit_r101x3', 'goog_in21k_ft_in1k',
         'resnetv2_101x3_bit.goog_in21k_ft_in1k', 84.430, 448, **_GOOGLE),
    _hub('bit_r152x2', 'goog_in21k_ft_in1k',
         'resnetv2_152x2_bit.goog_in21k_ft_in1k', 84.468, 448, **_GOOGLE),
    Weights('bit_r50x1', 'google_in21k', 'gs://bit_models/BiT-M-R50x1.npz',
            **_GOOGLE),
    # SigLIP image towers (Zhai et al. 2023; SigLIP 2, Tschannen et al.
    # 2025): embeddings, no ImageNet classifier.
    _hub('siglip_b16', 'webli',
         'vit_base_patch16_siglip_224.webli', **_GOOGLE),
    _hub('siglip_b16', 'v2_webli',
         'vit_base_patch16_siglip_224.v2_webli', **_GOOGLE),
    _hub('siglip_l16', 'webli',
         'vit_large_patch16_siglip_256.webli', **_GOOGLE),
    _hub('siglip_so400m14', 'webli',
         'vit_so400m_patch14_siglip_224.webli', **_GOOGLE),
    _hub('siglip_so400m14', 'v2_webli',
         'vit_so400m_patch14_siglip_224.v2_webli', **_GOOGLE),
    Weights('siglip_b16', 'google_webli', 'gs://big_vision/siglip/'
            'webli_en_b16_224_63724782.npz', **_GOOGLE),
    # DINOv2 (Oquab et al. 2023; registers: Darcet et al. 2023): features.
    _hub('dinov2_s14', 'lvd142m', 'vit_small_patch14_dinov2.lvd142m'),
    _hub('dinov2_b14', 'lvd142m', 'vit_base_patch14_dinov2.lvd142m'),
    _hub('dinov2_l14', 'lvd142m', 'vit_large_patch14_dinov2.lvd142m'),
    _hub('dinov2_s14_reg4', 'lvd142m', 'vit_small_patch14_reg4_dinov2.lvd142m'),
    _hub('dinov2_b14_reg4', 'lvd142m', 'vit_base_patch14_reg4_dinov2.lvd142m'),
    _hub('dinov2_l14_reg4', 'lvd142m', 'vit_large_patch14_reg4_dinov2.lvd142m'),
    # Language models, base (not instruction-tuned); Llama 3.2's repository
    # is gated (a licence to accept and a token), so it has none here.
    _text('gpt2', 'openai', 'openai-community/gpt2'),
    _text('gpt2_medium', 'openai', 'openai-community/gpt2-medium'),
    _text('smollm2_135m', 'hf', 'HuggingFaceTB/SmolLM2-135M'),
    _text('smollm2_360m', 'hf', 'HuggingFaceTB/SmolLM2-360M'),
    _text('qwen2_5_0_5b', 'qwen', 'Qwen/Qwen2.5-0.5B'),
]

# Every model's tags, first the default ('pretrained=True').
TAGS: dict[str, dict[str, Weights]] = {}
for _weights in _TABLE:
  TAGS.setdefault(_weights.model, {})[_weights.tag] = _weights


def tags(model: str) -> dict[str, Weights]:
  """The published weights of zoo model `model`, by tag (the first is the
  default).

  Args:
    model: a registered name.

  Returns:
    {tag: Weights}; empty for a model without published weights.

  Raises:
    ValueError: the model is not registered (with the closest names).
  """
  registry.spec(model)
  return dict(TAGS.get(model, {}))


def find(model: str, tag: str | bool) -> Weights:
  """The weights `tag` of `model` (True: its first tag).

  Args:
    model: a registered name.
    tag: one of `tags(model)`, or True for the first.

  Returns:
    The Weights.

  Raises:
    ValueError: the model is unknown, has no published weights, or no such
      tag (the message lists its tags).
  """
  known = tags(model)
  if not known:
    with_tags = ', '.join(sorted(m for m in TAGS if m in
                                 registry.list_models()))
    raise ValueError(f'model {model!r} has no published weights; these '
                     f'have: {with_tags}.')
  if tag is True:
    return next(iter(known.values()))
  if tag not in known:
    raise ValueError(f'model {model!r} has no weights {tag!r}; its tags: '
                     f'{", ".join(known)}.')
  return known[tag]

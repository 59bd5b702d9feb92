"""Mixup (Zhang et al. 2018) and CutMix (Yun et al. 2019) on a batch.

Each batch is mixed with itself rolled by one example (as big_vision does), by
one ratio per batch drawn from Beta(alpha, alpha). Labels are mixed the same
way; rather than materializing probability vectors here, a mixed batch keeps
both class ids and the weight of the first, `label_weight`, and the loss
builds the targets (`targets`), which also applies label smoothing.
"""

import jax
import jax.numpy as jnp

from recipes.core.train_state import UpdateRules


def targets(labels, other_labels, label_weight, num_classes: int,
            smoothing: float = 0.0):
  """Probability targets: w * one_hot(labels) + (1 - w) * one_hot(other),
  then smoothed to (1 - s) * t + s / num_classes. Rows sum to 1.

  Args:
    labels: each example's own class ids [N].
    other_labels: the class ids of the examples mixed in [N].
    label_weight: w, the weight of `labels` [N], in [0, 1].
    num_classes: the length of each target.
    smoothing: s, the label smoothing; 0 for none.

  Returns:
    The targets [N, num_classes].
  """
  w = label_weight[..., None]
  mixed = (w * jax.nn.one_hot(labels, num_classes)
           + (1 - w) * jax.nn.one_hot(other_labels, num_classes))
  return (1 - smoothing) * mixed + smoothing / num_classes


def mixup(images, ratio):
  """ratio * images + (1 - ratio) * images rolled by one; and the ratio as
  the first label's weight.

  Args:
    images: a batch [N, H, W, C].
    ratio: the weight of each example's own image, a scalar in [0, 1].

  Returns:
    (mixed images in the dtype of `images`, the ratio).
  """
  mixed = ratio * images + (1 - ratio) * jnp.roll(images, 1, axis=0)
  return mixed.astype(images.dtype), ratio


def cutmix(key, images, ratio):
  """A box of the rolled batch pasted into every image; the box's area is
  about (1 - ratio) of the image, clipped at the borders as in the paper.
  Returns the images and the first label's weight: the area left unpasted.

  Args:
    key: the random key of the box's centre.
    images: a batch [N, H, W, C].
    ratio: about the share of each image left unpasted, a scalar in [0, 1].

  Returns:
    (the images with the box pasted, the share of the area left unpasted).
  """
  height, width = images.shape[1:3]
  cut = jnp.sqrt(1 - ratio)
  half_h = (height * cut).astype(jnp.int32) // 2
  half_w = (width * cut).astype(jnp.int32) // 2
  key_y, key_x = jax.random.split(key)
  center_y = jax.random.randint(key_y, (), 0, height)
  center_x = jax.random.randint(key_x, (), 0, width)
  top, bottom = (jnp.clip(center_y - half_h, 0, height),
                 jnp.clip(center_y + half_h, 0, height))
  left, right = (jnp.clip(center_x - half_w, 0, width),
                 jnp.clip(center_x + half_w, 0, width))
  rows = jnp.arange(height)[:, None]
  cols = jnp.arange(width)[None, :]
  box = (rows >= top) & (rows < bottom) & (cols >= left) & (cols < right)
  pasted = jnp.where(box[None, :, :, None], jnp.roll(images, 1, axis=0),
                     images)
  area = (bottom - top) * (right - left) / (height * width)
  return pasted, 1.0 - area


def mix(key, images, rules: UpdateRules):
  """(images, weight of each example's own label): mixed as `rules` say.

  With probability `mix_prob` the batch is mixed; by cutmix with
  probability `cutmix_switch_prob` when both alphas are on. The rolled
  batch's labels are `jnp.roll(labels, 1)`.

  Args:
    key: the random key of every choice (whether, how and how much).
    images: a batch [N, H, W, C].
    rules: the alphas and probabilities; at least one alpha must be > 0.

  Returns:
    (the images, float32 [N] weights of each example's own label; 1.0 where
    the batch is left as it is).
  """
  key_apply, key_which, key_ratio, key_box = jax.random.split(key, 4)
  choices = []
  if rules.mixup_alpha > 0:
    ratio = jax.random.beta(key_ratio, rules.mixup_alpha, rules.mixup_alpha)
    choices.append(mixup(images, ratio))
  if rules.cutmix_alpha > 0:
    ratio = jax.random.beta(key_ratio, rules.cutmix_alpha,
                            rules.cutmix_alpha)
    choices.append(cutmix(key_box, images, ratio))
  mixed, weight = choices[0]
  if len(choices) == 2:
    use_cutmix = jax.random.bernoulli(key_which, rules.cutmix_switch_prob)
    mixed = jnp.where(use_cutmix, choices[1][0], mixed)
    weight = jnp.where(use_cutmix, choices[1][1], weight)
  apply = jax.random.bernoulli(key_apply, rules.mix_prob)
  images = jnp.where(apply, mixed, images)
  weight = jnp.where(apply, weight, 1.0).astype(jnp.float32)
  return images, jnp.full(images.shape[:1], weight)

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from configs import imagenet_vit_s16
from recipes import experiment
from recipes.config import defaults, validation
from recipes.data import datasets
from recipes.data.images import preprocess
from recipes.data.images.preprocess import Preprocessing
from recipes.data.pipeline import in_memory
from recipes.data.sources import tfds_source
from recipes.runtime.errors import UserError


def _seed(i):
  return tf.constant([7, i], tf.int64)


def test_cifar_crop_is_a_shifted_window_and_flip_is_seeded():
  rng = np.random.default_rng(0)
  image = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
  padded = np.pad(image, [(4, 4), (4, 4), (0, 0)]) / 255.0
  outputs = [preprocess.cifar_train(tf.constant(image), _seed(i)).numpy()
             for i in range(12)]
  for out in outputs:
    assert out.shape == (32, 32, 3) and out.dtype == np.float32
    windows = [np.flip(w, 1) if flip else w
               for dy in range(9) for dx in range(9) for flip in (0, 1)
               for w in [padded[dy:dy + 32, dx:dx + 32]]]
    assert any(np.allclose(out, w) for w in windows)
  assert len({o.tobytes() for o in outputs}) > 6  # Seeds change the crop.
  again = preprocess.cifar_train(tf.constant(image), _seed(3)).numpy()
  np.testing.assert_array_equal(again, outputs[3])


def test_normalize_uses_the_per_channel_statistics():
  prep = Preprocessing(normalize='cifar10')
  out = prep.eval(tf.fill([2, 2, 3], tf.constant(255, tf.uint8))).numpy()
  mean, std = preprocess.MEAN_STD['cifar10']
  np.testing.assert_allclose(out[0, 0], (1 - np.array(mean)) / std,
                             rtol=1e-5)


def _jpeg(height, width, seed=0):
  rng = np.random.default_rng(seed)
  pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
  return tf.io.encode_jpeg(pixels).numpy()


@pytest.mark.parametrize('augment', ['none', 'cifar', 'finetune'])
def test_grey_images_become_rgb_before_normalization(augment):
  """channels=3 (what RGB pretrained weights take) repeats a grey image's
  channel, then normalizes each with its own statistics; channels=1 makes
  RGB images grey."""
  grey = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 1), np.uint8)
  prep = Preprocessing(augment, 'imagenet', image_size=32, channels=3)
  assert prep.image_shape((32, 32, 1)) == (32, 32, 3)
  prep.check_channels((32, 32, 1))  # Three channels for 'imagenet'.
  mean, std = (np.array(v) for v in preprocess.MEAN_STD['imagenet'])
  for out in (prep.eval(tf.constant(grey)).numpy(),
              prep.train_batch(tf.constant(grey),
                               tf.constant([[7, 0], [7, 1]], tf.int64))):
    out = np.asarray(out)
    assert out.shape == (2, 32, 32, 3)
    # One grey value per pixel, whatever the channel.
    np.testing.assert_allclose(out * std + mean, (out * std + mean)[..., :1]
                               .repeat(3, -1), atol=1e-5)
  np.testing.assert_allclose(
      prep.eval(tf.constant(grey)).numpy(),
      (grey.repeat(3, -1) / 255 - mean) / std, rtol=1e-5, atol=1e-5)
  rgb = Preprocessing(channels=1).eval(tf.constant(grey.repeat(3, -1)))
  np.testing.assert_allclose(rgb.numpy(), grey / 255, atol=1e-2)


def test_imagenet_crops_have_the_requested_size():
  prep = Preprocessing(augment='imagenet', normalize='imagenet', image_size=48)
  jpeg = tf.constant(_jpeg(90, 60))
  train = [prep.train(jpeg, _seed(i)).numpy() for i in range(4)]
  assert all(t.shape == (48, 48, 3) and np.isfinite(t).all() for t in train)
  assert len({t.tobytes() for t in train}) == 4
  evaluated = prep.eval(jpeg).numpy()
  assert evaluated.shape == (48, 48, 3)
  np.testing.assert_array_equal(evaluated, prep.eval(jpeg).numpy())


# The samplers' arguments, written out: the Flax ImageNet example's
# (input_pipeline.py:80-113 at google/flax@18f8f311), and big_vision's
# inception_crop (big_vision/pp/ops_image.py:197-242 at 0127fb6b), with TF's
# defaults for what it does not set.
_FLAX_CROP = dict(
    bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
    min_object_covered=0.1, aspect_ratio_range=(3 / 4, 4 / 3),
    area_range=(0.08, 1.0), max_attempts=10)
_BIG_VISION_CROP = dict(bounding_boxes=tf.zeros([0, 0, 4], tf.float32),
                        min_object_covered=0, area_range=(0.05, 1.0))


def _reference_crop_flip(jpeg, seed, image_size, **sampler):
  """imagenet_crop_flip as it was before crop_area_min, drawing its window
  with `sampler`'s arguments."""
  seeds = tf.random.experimental.stateless_split(seed, 2)
  begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
      tf.io.extract_jpeg_shape(jpeg), seed=seeds[0],
      use_image_if_no_bounding_boxes=True, **sampler)
  image = tf.io.decode_and_crop_jpeg(
      jpeg, tf.stack([begin[0], begin[1], size[0], size[1]]), channels=3)
  image = tf.image.resize(image, [image_size, image_size], 'bicubic')
  return tf.image.stateless_random_flip_left_right(
      tf.clip_by_value(image, 0, 255), seeds[1])


@pytest.mark.parametrize('crop_area_min, sampler', [
    (0.0, _FLAX_CROP), (0.05, _BIG_VISION_CROP)])
def test_imagenet_crops_are_drawn_with_the_sources_arguments(crop_area_min,
                                                              sampler):
  # By default the crops of before, seed for seed; with 5%, big_vision's.
  prep = Preprocessing('imagenet', image_size=32, crop_area_min=crop_area_min)
  jpeg = tf.constant(_jpeg(75, 100))
  other = Preprocessing('imagenet', image_size=32,
                        crop_area_min=0.0 if crop_area_min else 0.05)
  differ = 0
  for i in range(8):
    pixels = prep.augment_example(jpeg, _seed(i))['pixels'].numpy()
    np.testing.assert_array_equal(
        pixels, _reference_crop_flip(jpeg, _seed(i), 32, **sampler).numpy())
    differ += not np.array_equal(
        pixels, other.augment_example(jpeg, _seed(i))['pixels'].numpy())
  assert differ >= 6


def _crop_areas(area_min: float, draws: int):
  """The fractions of a 375x500 JPEG's area that `draws` imagenet crops
  take, seeded as imagenet_crop_flip seeds them."""
  shape = tf.io.extract_jpeg_shape(tf.constant(_jpeg(375, 500)))

  @tf.function
  def areas(seeds):
    def area(seed):
      first = tf.random.experimental.stateless_split(seed, 2)[0]
      _, size = preprocess.crop_window(shape, first, area_min)
      return size[0] * size[1]
    return tf.map_fn(area, seeds, fn_output_signature=tf.int32)

  seeds = tf.stack([tf.fill([draws], 7), tf.range(draws)], axis=1)
  return areas(tf.cast(seeds, tf.int64)).numpy() / (375 * 500)


@pytest.mark.parametrize('crop_area_min, floor', [(0.0, 0.1), (0.05, 0.05)])
def test_imagenet_crop_area_floor(crop_area_min, floor):
  # The default's 8% area range covering at least 10% of the image: 10%.
  areas = _crop_areas(crop_area_min, 1000)
  assert floor <= areas.min() < floor + 0.01
  assert 0.9 < areas.max() <= 1


def test_crop_area_min_comes_from_the_config_and_is_checked():
  assert experiment.preprocessing(
      imagenet_vit_s16.get_config()).crop_area_min == 0.05
  assert experiment.preprocessing(defaults.get_config()).crop_area_min == 0
  for bad in (-0.1, 1.5):
    with pytest.raises(UserError, match='crop_area_min'):
      Preprocessing('imagenet', crop_area_min=bad)
    config = defaults.get_config()
    config.crop_area_min = bad
    with pytest.raises(UserError, match=r'crop_area_min is .*; it must be '):
      validation.check(config)


@pytest.mark.parametrize('normalize', ['', *preprocess.MEAN_STD])
@pytest.mark.parametrize('augment', list(preprocess.AUGMENTATIONS))
def test_every_preset_gives_float_images_of_its_shape(augment, normalize):
  prep = Preprocessing(augment, normalize, image_size=24)
  stored = (32, 32, 3)
  image = np.random.default_rng(0).integers(0, 256, stored, dtype=np.uint8)
  image = tf.constant(tf.io.encode_jpeg(image).numpy() if prep.takes_jpeg
                      else image)
  for out in (prep.train(image, _seed(0)), prep.eval(image)):
    assert out.dtype == tf.float32
    assert tuple(out.shape) == prep.image_shape(stored)
    assert np.isfinite(out.numpy()).all()
  if not prep.takes_jpeg:  # Then eval also takes a whole batch.
    batch = prep.eval(tf.stack([image, image])).numpy()
    np.testing.assert_array_equal(batch[1], prep.eval(image).numpy())


def test_unknown_presets_are_user_errors():
  with pytest.raises(UserError, match="unknown augment 'autoaugment'"):
    Preprocessing(augment='autoaugment')
  with pytest.raises(UserError, match="unknown normalize 'svhn'"):
    Preprocessing(normalize='svhn')


def test_augmented_batches_obey_the_data_order_rule(monkeypatch):
  rng = np.random.default_rng(0)
  split = {'image': rng.integers(0, 256, (40, 32, 32, 3), dtype=np.uint8),
           'label': np.arange(40)}
  prep = Preprocessing(augment='cifar')

  def images(start_step):
    return np.stack([b['image'] for b in in_memory.train_batches(
        split, batch_size=8, seed=1, start_step=start_step, num_steps=6,
        preprocessing=prep)])

  full = images(0)
  np.testing.assert_array_equal(images(3), full[3:])  # Resume: same crops.
  halves = []
  for index in range(2):
    monkeypatch.setattr('jax.process_count', lambda: 2)
    monkeypatch.setattr('jax.process_index', lambda i=index: i)
    halves.append(images(0))
  np.testing.assert_array_equal(np.concatenate(halves, axis=1), full)


def test_streaming_imagenet_batches_and_padded_eval(monkeypatch):
  prep = Preprocessing(augment='imagenet', normalize='imagenet', image_size=32)
  with tfds.testing.mock_data(num_examples=21), monkeypatch.context() as m:
    m.setattr(tfds_source, 'first_unreachable_url', lambda builder: None)
    data = datasets.load('imagenet2012', None, 'train', 'validation', prep)
    assert (data.num_train, data.num_eval) == (21, 21)
    assert data.num_classes == 1000 and data.image_shape == (32, 32, 3)
    batches = list(data.train_batches(batch_size=8, seed=0, start_step=0,
                                      num_steps=5))
    assert len(batches) == 5
    assert batches[0]['image'].shape == (8, 32, 32, 3)
    resumed = list(data.train_batches(batch_size=8, seed=0, start_step=3,
                                      num_steps=5))
    np.testing.assert_array_equal(resumed[0]['image'], batches[3]['image'])
    evals = list(data.eval_batches(batch_size=8))
  assert len(evals) == 3
  assert sum(int(b['mask'].sum()) for b in evals) == 21
  assert not evals[-1]['mask'][-3:].any()


def _cifar_image(seed=0):
  rng = np.random.default_rng(seed)
  return tf.constant(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))


def test_finetune_resizes_32x32_images_to_the_model_resolution():
  prep = Preprocessing('finetune', image_size=224)
  image = _cifar_image()
  assert prep.image_shape((32, 32, 3)) == (224, 224, 3)
  assert prep.image_shape((None, None, 1)) == (224, 224, 1)
  # Training: pixel values in [0, 255], for RandAugment to follow.
  pixels = prep.augment_example(image, _seed(0))['pixels'].numpy()
  assert pixels.shape == (224, 224, 3) and pixels.dtype == np.float32
  assert 0 <= pixels.min() and pixels.max() <= 255 and pixels.max() > 1
  train = prep.train(image, _seed(0)).numpy()
  np.testing.assert_allclose(train, pixels / 255, rtol=1e-6)
  # Evaluation: scaled to [0, 1], one image or a batch.
  evaluated = prep.eval(image).numpy()
  assert evaluated.shape == (224, 224, 3) and evaluated.dtype == np.float32
  assert 0 <= evaluated.min() and evaluated.max() <= 1
  batch = prep.eval(tf.stack([image, _cifar_image(1)])).numpy()
  assert batch.shape == (2, 224, 224, 3)
  np.testing.assert_array_equal(batch[0], evaluated)
  normalized = Preprocessing('finetune', 'minus_one_to_one', image_size=224)
  out = normalized.train(image, _seed(0)).numpy()
  assert -1 <= out.min() and out.max() <= 1 and out.min() < 0


def test_finetune_eval_is_a_bilinear_resize_of_the_whole_image():
  prep = Preprocessing('finetune', image_size=224)
  images = tf.stack([_cifar_image(0), _cifar_image(1)])
  want = tf.image.resize(tf.cast(images, tf.float32) / 255.0, [224, 224])
  np.testing.assert_allclose(prep.eval(images).numpy(), want.numpy(),
                             atol=1e-6)
  np.testing.assert_allclose(prep.eval(images[1]).numpy(), want[1].numpy(),
                             atol=1e-6)


def test_finetune_crops_are_a_function_of_seed_and_example():
  prep = Preprocessing('finetune', image_size=64)
  image = _cifar_image()
  outputs = [prep.train(image, _seed(i)).numpy() for i in range(8)]
  assert len({o.tobytes() for o in outputs}) == 8  # Each example its own.
  for i in (0, 5):
    np.testing.assert_array_equal(prep.train(image, _seed(i)).numpy(),
                                  outputs[i])
  other_seed = prep.train(image, tf.constant([8, 0], tf.int64)).numpy()
  assert not np.array_equal(other_seed, outputs[0])


def test_finetune_crop_covers_5_to_100_percent_and_flips():
  """Pixels that hold their column and row show each crop's window."""
  y, x = np.mgrid[:32, :32]
  image = tf.constant(np.stack([x * 8, y * 8, x * 0], -1).astype(np.uint8))
  areas, flips = [], 0
  for i in range(200):
    out = preprocess.finetune_crop_flip(image, _seed(i), 96).numpy()
    columns, rows = out[..., 0] / 8, out[..., 1] / 8
    # A bilinear upscale keeps the edge pixels' values at the edges.
    width = columns.max() - columns.min() + 1
    height = rows.max() - rows.min() + 1
    areas.append(width * height / 32**2)
    flips += columns[0, 0] > columns[0, -1]
    assert np.all(np.diff(rows[:, 0]) >= -1e-4)  # Never flipped upside down.
  assert 0.05 - 0.01 <= min(areas) < 0.07 and 0.9 < max(areas) <= 1
  assert 70 <= flips <= 130


def test_finetune_batches_from_memory_have_the_configured_size():
  rng = np.random.default_rng(0)
  split = {'image': rng.integers(0, 256, (16, 32, 32, 3), dtype=np.uint8),
           'label': np.arange(16) % 10}
  for layers in (0, 2):  # RandAugment follows the crop at the new size.
    prep = Preprocessing('finetune', 'minus_one_to_one', image_size=48,
                         randaugment_layers=layers)
    train = list(in_memory.train_batches(split, batch_size=8, seed=0,
                                         start_step=0, num_steps=3,
                                         preprocessing=prep))
    assert [b['image'].shape for b in train] == [(8, 48, 48, 3)] * 3
    assert all(b['image'].dtype == np.float32 for b in train)
    assert all(-1 <= b['image'].min() and b['image'].max() <= 1
               for b in train)
  evals = list(in_memory.eval_batches(split, batch_size=8,
                                      preprocessing=prep))
  assert [b['image'].shape for b in evals] == [(8, 48, 48, 3)] * 2

"""RandAugment: each operation against its definition, and the whole policy
as a pure function of (seed, example position) in the training pipeline."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from recipes.data import datasets
from recipes.data.images import randaugment
from recipes.data.images.preprocess import Preprocessing
from recipes.data.pipeline import in_memory
from recipes.data.sources import tfds_source
from recipes.runtime.errors import UserError
from tests.helpers import slow_after

# A small hand-made grey image: values 10..250 with a few repeats.
SMALL = np.array([[10, 10, 60, 60],
                  [60, 130, 130, 200],
                  [200, 200, 250, 10],
                  [130, 60, 200, 250]], np.uint8)[..., None]


def _op(name, image, magnitude=10, sign=1.0, uniform=(0.5, 0.5)):
  return randaugment.apply_op(name, tf.constant(image), magnitude, sign,
                              uniform).numpy()


def _rgb(seed=0, side=8):
  return np.random.default_rng(seed).integers(0, 256, (side, side, 3),
                                              dtype=np.uint8)


def test_invert_solarize_and_posterize_follow_their_definitions():
  image = np.concatenate([SMALL, 255 - SMALL, SMALL // 2], axis=-1)
  np.testing.assert_array_equal(_op('Invert', image), 255 - image)
  # Magnitude m: threshold int(m/10 * 256), pixels >= threshold inverted.
  for magnitude, threshold in ((5, 128), (2, 51), (10, 256), (0, 0)):
    np.testing.assert_array_equal(
        _op('Solarize', image, magnitude),
        np.where(image < threshold, image, 255 - image))
  # Magnitude m keeps the int(m/10 * 4) highest bits.
  for magnitude, bits in ((10, 4), (5, 2), (0, 0)):
    mask = (0xFF << (8 - bits)) & 0xFF
    np.testing.assert_array_equal(_op('Posterize', image, magnitude),
                                  image & mask)
  # SolarizeAdd: int(m/10 * 110) added (clipped) to pixels below 128.
  added = np.minimum(image.astype(int) + 110, 255).astype(np.uint8)
  np.testing.assert_array_equal(_op('SolarizeAdd', image),
                                np.where(image < 128, added, image))


def test_autocontrast_stretches_each_channel_to_the_full_range():
  image = np.concatenate([SMALL, np.full_like(SMALL, 77)], axis=-1)
  out = _op('AutoContrast', image)
  low, high = 10, 250
  want = ((SMALL.astype(np.float64) - low) * 255 / (high - low)).astype(
      np.uint8)
  np.testing.assert_array_equal(out[..., 0], want[..., 0])
  assert out[..., 0].min() == 0 and out[..., 0].max() == 255
  np.testing.assert_array_equal(out[..., 1], 77)  # Constant: unchanged.


def _equalize_definition(channel: np.ndarray) -> np.ndarray:
  """PIL's ImageOps.equalize for one channel, written out."""
  histogram = np.bincount(channel.ravel(), minlength=256)
  step = (histogram.sum() - histogram[channel.max()]) // 255
  if step == 0:
    return channel
  lut, n = [], step // 2
  for count in histogram:
    lut.append(min(n // step, 255))
    n += count
  return np.array(lut, np.uint8)[channel]


def test_equalize_follows_pils_definition():
  rng = np.random.default_rng(1)
  skewed = (rng.random((20, 20, 1)) ** 3 * 255).astype(np.uint8)
  image = np.concatenate([skewed, SMALL.repeat(5, 0).repeat(5, 1),
                          rng.integers(0, 256, (20, 20, 1), np.uint8)], -1)
  out = _op('Equalize', image)
  for c in range(3):
    np.testing.assert_array_equal(out[..., c],
                                  _equalize_definition(image[..., c]))
  # Few pixels (step 0): unchanged, like PIL.
  np.testing.assert_array_equal(_op('Equalize', SMALL), SMALL)


def test_brightness_and_cutout_follow_their_definitions():
  image = _rgb()
  # Factor m/10 * 1.8 + 0.1 times the pixels, clipped and truncated.
  for magnitude in (0, 3, 5, 10):
    factor = np.float32(magnitude / 10 * 1.8 + 0.1)
    np.testing.assert_array_equal(
        _op('Brightness', image, magnitude),
        np.clip(image.astype(np.float32) * factor, 0, 255).astype(np.uint8))
  # Cutout on 224 pixels: half side int(m/10 * 40) around the drawn centre.
  big = np.random.default_rng(2).integers(0, 256, (224, 224, 1), np.uint8)
  out = _op('Cutout', big, 5, uniform=(0.25, 0.5))
  want = big.copy()
  want[56 - 20:56 + 20, 112 - 20:112 + 20] = 128
  np.testing.assert_array_equal(out, want)


def test_translate_and_rotate_move_pixels_and_fill_grey():
  image = _rgb(side=8)
  # m/10 * 100 pixels on a 224 side (scaled with the side otherwise).
  big = np.random.default_rng(3).integers(0, 256, (224, 224, 3), np.uint8)
  shifted = _op('TranslateX', big, 1)  # 10 pixels at magnitude 1.
  np.testing.assert_array_equal(shifted[:, :-10], big[:, 10:])
  np.testing.assert_array_equal(shifted[:, -10:], 128)
  down = _op('TranslateY', big, 1, sign=-1.0)
  np.testing.assert_array_equal(down[10:], big[:-10])
  np.testing.assert_array_equal(down[:10], 128)
  # On 32 pixels magnitude 10 shifts by 100 * 32/224 = 14.3 -> 14 pixels.
  cifar = _rgb(side=32)
  shifted = _op('TranslateX', cifar, 10)
  np.testing.assert_array_equal(shifted[:, :-14], cifar[:, 14:])
  np.testing.assert_array_equal(shifted[:, -14:], 128)
  # Rotation by 90 degrees (magnitude 30 is off the scale; call it directly).
  turned = randaugment.rotate(tf.constant(image)[None], 90.0).numpy()[0]
  np.testing.assert_array_equal(turned, np.rot90(image))
  # Magnitude m: m/10 * 30 degrees, with the drawn sign.
  big_rotated = randaugment.rotate(tf.constant(big)[None], -21.0).numpy()[0]
  np.testing.assert_array_equal(_op('Rotate', big, 7, sign=-1.0),
                                big_rotated)
  assert (big_rotated[0, 0] == 128).all()  # A corner turned out: grey.
  # ShearX at m/10 * 0.3: output (x, y) takes input (x + 0.3 y, y).
  wide = np.arange(5 * 6, dtype=np.uint8).reshape(5, 6, 1)
  want = np.full_like(wide, 128)
  for y in range(5):
    for x in range(6):
      source = round(x + 0.3 * y)
      if source < 6:
        want[y, x] = wide[y, source]
  np.testing.assert_array_equal(_op('ShearX', wide, 10), want)
  np.testing.assert_array_equal(_op('ShearY', wide.transpose(1, 0, 2), 10),
                                want.transpose(1, 0, 2))
  # Magnitude 0 geometric ops change nothing.
  for name in ('Rotate', 'ShearX', 'ShearY', 'TranslateX', 'TranslateY',
               'Cutout'):
    np.testing.assert_array_equal(_op(name, image, 0), image)


def test_operations_agree_with_pil():
  Image = pytest.importorskip('PIL.Image')
  ImageOps = pytest.importorskip('PIL.ImageOps')
  ImageEnhance = pytest.importorskip('PIL.ImageEnhance')
  image = _rgb(seed=4, side=16)
  pil = Image.fromarray(image)
  exact = {
      'AutoContrast': ImageOps.autocontrast(pil),
      'Equalize': ImageOps.equalize(pil),
      'Invert': ImageOps.invert(pil),
      'Posterize': ImageOps.posterize(pil, 2),  # Magnitude 5.
      'Solarize': ImageOps.solarize(pil, 128),
  }
  for name, want in exact.items():
    np.testing.assert_array_equal(_op(name, image, 5), np.asarray(want),
                                  err_msg=name)
  close = {'Color': ImageEnhance.Color, 'Contrast': ImageEnhance.Contrast,
           'Brightness': ImageEnhance.Brightness,
           'Sharpness': ImageEnhance.Sharpness}
  for magnitude in (0, 2, 9):  # (5 is factor 1: the image itself.)
    factor = magnitude / 10 * 1.8 + 0.1
    for name, enhancer in close.items():
      want = np.asarray(enhancer(pil).enhance(factor)).astype(int)
      got = _op(name, image, magnitude).astype(int)
      assert np.abs(got - want).max() <= 1, name  # PIL rounds, we truncate.


@pytest.mark.parametrize('channels', [1, 3])
def test_randaugment_is_a_pure_function_of_the_seed(channels):
  image = tf.constant(_rgb(side=12)[..., :channels])
  outs = [randaugment.randaugment(image, tf.constant([5, i], tf.int64), 2,
                                  10).numpy() for i in range(24)]
  for out in outs:
    assert out.shape == (12, 12, channels) and out.dtype == np.uint8
  again = randaugment.randaugment(image, tf.constant([5, 3], tf.int64), 2, 10)
  np.testing.assert_array_equal(again.numpy(), outs[3])
  assert len({o.tobytes() for o in outs}) > 12  # Different ops per seed.


def _identical_copies(n, shape, seed=0):
  one = np.random.default_rng(seed).integers(0, 256, shape, np.uint8)
  return {'image': np.stack([one] * n), 'label': np.zeros(n, np.int64)}


def _batches(split, prep, start_step=0, num_steps=1, batch_size=8, seed=1):
  return np.stack([b['image'] for b in in_memory.train_batches(
      split, batch_size=batch_size, seed=seed, start_step=start_step,
      num_steps=num_steps, preprocessing=prep)])


@pytest.mark.parametrize('augment, shape', slow_after(1, [
    pytest.param('cifar', (32, 32, 3)), pytest.param('none', (28, 28, 1)),
    pytest.param('none', (32, 32, 3)), pytest.param('cifar', (28, 28, 1))]))
def test_training_batches_with_randaugment(augment, shape):
  split = _identical_copies(16, shape)
  prep = Preprocessing(augment, randaugment_layers=2)
  assert prep.is_random
  batch = _batches(split, prep)[0]
  assert batch.shape == (8, *shape) and batch.dtype == np.float32
  assert batch.min() >= 0 and batch.max() <= 1
  np.testing.assert_array_equal(_batches(split, prep)[0], batch)  # Again.
  # Identical images, different examples: different operations.
  assert len({b.tobytes() for b in batch}) >= 6
  weak = _batches(split, Preprocessing(augment, randaugment_layers=2,
                                       randaugment_magnitude=0))[0]
  assert not np.array_equal(weak, batch)
  plain = _batches(split, Preprocessing(augment))[0]
  assert not np.array_equal(plain, batch)


def test_randaugment_batches_obey_the_data_order_rule(monkeypatch):
  rng = np.random.default_rng(0)
  split = {'image': rng.integers(0, 256, (40, 16, 16, 3), dtype=np.uint8),
           'label': np.arange(40)}
  prep = Preprocessing('cifar', 'cifar10', randaugment_layers=2,
                       randaugment_magnitude=9)
  full = _batches(split, prep, num_steps=7)
  np.testing.assert_array_equal(_batches(split, prep, start_step=4,
                                         num_steps=7), full[4:])
  halves = []
  for index in range(2):
    monkeypatch.setattr('jax.process_count', lambda: 2)
    monkeypatch.setattr('jax.process_index', lambda i=index: i)
    halves.append(_batches(split, prep, num_steps=7))
  np.testing.assert_array_equal(np.concatenate(halves, axis=1), full)


def test_randaugment_on_imagenet_crops():
  pixels = np.random.default_rng(0).integers(0, 256, (60, 50, 3), np.uint8)
  jpeg = tf.constant(tf.io.encode_jpeg(pixels).numpy())
  prep = Preprocessing('imagenet', 'minus_one_to_one', image_size=24,
                       randaugment_layers=3, randaugment_magnitude=7)
  seeds = [tf.constant([0, i], tf.int64) for i in range(6)]
  outs = [prep.train(jpeg, s).numpy() for s in seeds]
  for out in outs:
    assert out.shape == (24, 24, 3) and out.dtype == np.float32
    assert out.min() >= -1 and out.max() <= 1
  np.testing.assert_array_equal(prep.train(jpeg, seeds[2]).numpy(), outs[2])
  assert len({o.tobytes() for o in outs}) == 6


def test_streamed_batches_with_randaugment_resume(monkeypatch):
  prep = Preprocessing('cifar', 'cifar10', randaugment_layers=2)
  monkeypatch.setattr(tfds_source, 'first_unreachable_url', lambda b: None)
  with tfds.testing.mock_data(num_examples=24):
    data = datasets.load('cifar10', None, preprocessing=prep,
                         data_source='stream')
    batches = list(data.train_batches(batch_size=8, seed=0, start_step=0,
                                      num_steps=4))
    resumed = list(data.train_batches(batch_size=8, seed=0, start_step=2,
                                      num_steps=4))
  assert batches[0]['image'].shape == (8, 32, 32, 3)
  np.testing.assert_array_equal(resumed[0]['image'], batches[2]['image'])


def test_eval_is_not_augmented():
  prep = Preprocessing(randaugment_layers=2)
  image = tf.constant(_rgb())
  np.testing.assert_array_equal(prep.eval(image).numpy(),
                                image.numpy() / np.float32(255))


@pytest.mark.parametrize('field, value, message', [
    ('randaugment_layers', -1, 'randaugment_layers=-1 must be a whole'),
    ('randaugment_layers', 1.5, 'randaugment_layers=1.5 must be a whole'),
    ('randaugment_magnitude', 11, 'randaugment_magnitude=11 must be a number '
     'from 0 to 10'),
    ('randaugment_magnitude', -1, 'randaugment_magnitude=-1 must')])
def test_bad_randaugment_settings_are_user_errors(field, value, message):
  with pytest.raises(UserError, match=message):
    Preprocessing(**{field: value})


def test_a_batch_gives_each_example_what_it_gives_alone():
  rng = np.random.default_rng(5)
  images = tf.constant(rng.integers(0, 256, (24, 16, 16, 3), np.uint8))
  seeds = tf.constant([[9, i] for i in range(24)], tf.int64)
  prep = Preprocessing('cifar', 'cifar10', randaugment_layers=3,
                       randaugment_magnitude=6)
  batch = prep.train_batch(images, seeds).numpy()
  for i in range(24):
    np.testing.assert_array_equal(batch[i],
                                  prep.train(images[i], seeds[i]).numpy())

"""Input pipeline tests: every preprocessing op eagerly and inside tf.data,
image decoding, the three sources (digits, image folder, TFDS), per-replica
batching and sharding over input pipelines, eval padding."""

import collections
import importlib.resources
import importlib.resources.abc
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit import config as config_lib
from keras_vit import config_limits
from keras_vit.data import folders, overlaps, sources
from keras_vit.data import pipeline as ip
from keras_vit.data import preprocessing as pp
from keras_vit.errors import UsageError
from keras_vit.training import train_lib
from tests import console, tiny

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = tf.constant([7, 11], tf.int64)


def _in_tf_data(fn, *args):
    """fn(*args) computed inside a tf.data map (graph mode)."""
    ds = tf.data.Dataset.from_tensors(tuple(tf.constant(a) for a in args))
    return next(iter(ds.map(lambda *a: fn(*a)))).numpy()


def _both(fn, *args):
    eager = fn(*(tf.constant(a) for a in args)).numpy()
    graph = _in_tf_data(fn, *args)
    np.testing.assert_array_equal(eager, graph)
    return eager


def _image(h=6, w=5, c=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), np.uint8)


# ------------------------------------------------------------------ to_rgb
@pytest.mark.parametrize(
    "shape,expected",
    [
        ((6, 5), lambda x: np.repeat(x[..., None], 3, -1)),
        ((6, 5, 1), lambda x: np.repeat(x, 3, -1)),
        ((6, 5, 2), lambda x: np.repeat(x[..., :1], 3, -1)),
        ((6, 5, 3), lambda x: x),
        ((6, 5, 4), lambda x: x[..., :3]),
    ],
)
def test_to_rgb(shape, expected):
    x = np.random.default_rng(1).integers(0, 256, shape, np.uint8)
    np.testing.assert_array_equal(_both(pp.to_rgb, x), expected(x))


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_to_rgb_channels_known_only_at_run_time(channels):
    x = _image(c=channels)
    fn = tf.function(
        pp.to_rgb,
        input_signature=[tf.TensorSpec([None, None, None], tf.uint8)],
    )
    reference = pp.to_rgb(tf.constant(x)).numpy()
    np.testing.assert_array_equal(fn(tf.constant(x)).numpy(), reference)
    np.testing.assert_array_equal(_in_tf_data(fn, x), reference)
    assert reference.shape == (6, 5, 3)


def test_to_rgb_rejects_five_channels():
    with pytest.raises(ValueError, match="5 channels"):
        pp.to_rgb(tf.zeros([2, 2, 5], tf.uint8))


# ------------------------------------------------------------ decode_image
def _encode(array, fmt, mode=None):
    buf = io.BytesIO()
    # JPEG at high quality without chroma subsampling: close to the source.
    options = dict(quality=95, subsampling=0) if fmt == "JPEG" else {}
    Image.fromarray(array, mode).save(buf, format=fmt, **options)
    return buf.getvalue()


@pytest.mark.parametrize("fmt,exact", [("PNG", True), ("BMP", True),
                                       ("GIF", True), ("JPEG", False)])
def test_decode_image_formats(fmt, exact):
    if fmt == "GIF":  # a palette image: colours survive exactly
        rgb = np.zeros((6, 5, 3), np.uint8)
        rgb[:3] = (255, 0, 0)
        rgb[3:, :2] = (0, 128, 255)
    elif fmt == "JPEG":  # smooth, so that compression error stays small
        ramp = np.linspace(40, 200, 8 * 8).reshape(8, 8)
        rgb = np.stack([ramp, ramp[::-1], np.full_like(ramp, 90)], -1)
        rgb = rgb.astype(np.uint8)
    else:
        rgb = _image()
    data = _encode(rgb, fmt)
    decoded = _both(pp.decode_image, data)
    assert decoded.dtype == np.uint8 and decoded.shape == rgb.shape
    if exact:
        np.testing.assert_array_equal(decoded, rgb)
    else:  # lossy: close to the source and to Pillow's decoder
        reference = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        for other in (reference, rgb):
            difference = np.abs(decoded.astype(int) - other)
            assert difference.mean() < 2 and difference.max() <= 8


@pytest.mark.parametrize("mode,subsampling", [("L", 0), ("RGB", 0),
                                               ("RGB", 2)])
def test_a_jpeg_decodes_as_pillow_decodes_it(mode, subsampling):
    """A photo's JPEG (noisy, colour 4:2:0 or not, or grey) decodes to
    exactly Pillow's pixels, the reference pipelines' (transformers',
    timm's); TensorFlow's default DCT is off by a grey level or more."""
    rng = np.random.default_rng(7)
    noisy = rng.integers(0, 256, (37, 53, 3)) * 0.3 + np.linspace(
        0, 170, 53)[None, :, None]
    image = Image.fromarray(noisy.astype(np.uint8)).convert(mode)
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=85, subsampling=subsampling)
    data = buf.getvalue()
    pillow = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    np.testing.assert_array_equal(_both(pp.decode_image, data), pillow)
    fast = tf.io.decode_image(data, channels=3).numpy()
    assert np.abs(fast.astype(int) - pillow).max() >= 1


def test_decode_image_gray_rgba_and_16_bit_become_rgb():
    gray = _image(c=1)[..., 0]
    np.testing.assert_array_equal(
        _both(pp.decode_image, _encode(gray, "PNG")),
        np.repeat(gray[..., None], 3, -1),
    )
    rgba = _image(c=4)
    np.testing.assert_array_equal(
        _both(pp.decode_image, _encode(rgba, "PNG")), rgba[..., :3]
    )
    la = _image(c=2)
    np.testing.assert_array_equal(
        _both(pp.decode_image, _encode(la, "PNG")),
        np.repeat(la[..., :1], 3, -1),
    )
    deep = (np.arange(20).reshape(4, 5) * 3000).astype(np.uint16)
    decoded = _both(pp.decode_image, _encode(deep, "PNG"))
    # 16 -> 8 bits: the high byte, within rounding.
    assert np.abs(decoded[..., 0].astype(int) - deep // 257).max() <= 1
    assert decoded.shape == (4, 5, 3)


def test_decode_image_errors():
    with pytest.raises(tf.errors.InvalidArgumentError, match="Empty image"):
        pp.decode_image(tf.constant(b""))
    with pytest.raises(tf.errors.InvalidArgumentError):
        pp.decode_image(tf.constant(b"not an image at all"))


# ------------------------------------------------- resizing and cropping
def test_scale_to_unit_range():
    x = np.array([[[0, 255, 127.5]]], np.float32)
    np.testing.assert_allclose(_both(pp.scale_to_unit_range, x),
                               [[[-1.0, 1.0, 0.0]]])


def test_resize_bilinear_half_pixel_centres():
    # One row [0, 10] to width 4: sample points -0.25, 0.25, 0.75, 1.25 in
    # source pixels, clamped at the borders.
    x = np.array([[[0], [10]]], np.uint8).repeat(3, -1)
    out = _both(lambda a: pp.resize(a, (1, 4)), x)
    np.testing.assert_allclose(out[0, :, 0], [0, 2.5, 7.5, 10], atol=1e-5)
    assert out.dtype == np.float32
    same = _both(lambda a: pp.resize(a, (6, 5)), _image())
    np.testing.assert_allclose(same, _image(), atol=1e-4)


def test_uint8_images_resize_to_the_bits_of_their_float32_copy():
    """A decoded image is resized as its bytes, not through a float32 copy
    of it: each preprocessing gives the very bits it gives the float32
    copy (eval with and without the crop, fine-tuning, pre-training),
    eagerly and in tf.data, for grey, RGB and RGBA, up and down."""
    def copy(fn):
        return lambda a: fn(tf.cast(a, tf.float32))

    seed = tf.constant([7, 11], tf.int64)
    for index, (h, w, c) in enumerate([(1, 1, 3), (3, 2, 3), (37, 53, 3),
                                       (240, 320, 3), (50, 70, 1),
                                       (50, 70, 4)]):
        x = _image(h, w, c, seed=index)
        for fn in (lambda a: pp.preprocess_eval(a, 16),
                   lambda a: pp.preprocess_eval(a, 16, resize_size=24),
                   lambda a: pp.preprocess_eval(a, (12, 20), (40, 30)),
                   lambda a: pp.preprocess_finetune(a, 16, 20, seed=seed),
                   lambda a: pp.preprocess_pretrain(a, 16, seed=seed)):
            np.testing.assert_array_equal(_both(fn, x), _both(copy(fn), x))


def test_decoding_and_resizing_takes_the_image_bytes(tmp_path):
    """Decoding and evaluation preprocessing of a 6000 x 6000 RGB PNG
    takes about its bytes (3 a pixel), not the 12 more of its float32
    copy: the peak of a fresh process, measured there."""
    path = tmp_path / "big.png"
    path.write_bytes(tf.io.encode_png(
        np.zeros((6000, 6000, 3), np.uint8)).numpy())
    code = (
        "import resource, sys, tensorflow as tf\n"
        "from keras_vit.data import preprocessing as pp\n"
        "small = tf.io.encode_png(tf.zeros([8, 8, 3], tf.uint8))\n"
        "pp.preprocess_eval(pp.decode_image(small), 16)\n"
        "data = tf.io.read_file(sys.argv[1])\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "pp.preprocess_eval(pp.decode_image(data), 16).numpy()\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)"
    )
    result = subprocess.run([sys.executable, "-c", code, str(path)],
                            capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 0, result.stderr[-3000:]
    grown = int(result.stdout.split()[-1]) * 1024  # KiB
    assert grown < 5 * 6000 * 6000, grown  # 15 bytes a pixel with it


def test_central_crop():
    x = _image(9, 8)
    out = _both(lambda a: pp.central_crop(a, (5, 4)), x)
    np.testing.assert_array_equal(out, x[2:7, 2:6])


def test_preprocess_eval():
    x = _image(6, 5)
    np.testing.assert_allclose(
        _both(lambda a: pp.preprocess_eval(a, (6, 5)), x),
        x / 127.5 - 1, atol=1e-5,
    )
    # Resize to 8 x 8, central 4 x 4 crop.
    out = _both(lambda a: pp.preprocess_eval(a, 4, resize_size=8), x)
    reference = tf.image.resize(x.astype(np.float32), (8, 8)).numpy()
    np.testing.assert_allclose(out, reference[2:6, 2:6] / 127.5 - 1,
                               atol=1e-5)
    gray = _both(lambda a: pp.preprocess_eval(a, 4), _image(c=1))
    assert gray.shape == (4, 4, 3)


def test_keep_aspect_resizes_the_shorter_side_by_area():
    """keep_aspect: big_vision's resize_small (the shorter side to N, the
    other rounded, area resampling, back to uint8 by truncation), then the
    central crop. At a factor of 1/2, area resampling is the mean of each
    2 x 2 block: the reference is numpy's."""
    x = _image(8, 12, seed=4)
    out = _both(lambda a: pp.preprocess_eval(a, 4, resize_size=4,
                                             keep_aspect=True), x)
    blocks = x.reshape(4, 2, 6, 2, 3).astype(np.float64).mean(axis=(1, 3))
    want = np.floor(blocks)[:, 1:5]  # 4 x 6, central 4 x 4
    np.testing.assert_allclose(out, want / 127.5 - 1, atol=1e-5)
    # Float pixels (predict_images) come out as the same bytes do.
    np.testing.assert_array_equal(_both(lambda a: pp.preprocess_eval(
        a, 4, 4, keep_aspect=True), x.astype(np.float32)), out)
    # The longer side rounded (7 x 10 -> 4 x round(5.71) = 6), as
    # big_vision's; the squash differs on a non-square image.
    tall = _image(10, 7, seed=5)
    small = pp.resize_small(tf.constant(tall), 4)
    assert small.dtype == tf.uint8 and tuple(small.shape) == (6, 4, 3)
    squashed = pp.preprocess_eval(tf.constant(tall), 4, resize_size=4)
    kept = pp.preprocess_eval(tf.constant(tall), 4, 4, keep_aspect=True)
    assert np.max(np.abs(kept.numpy() - squashed.numpy())) > 0.05
    with pytest.raises(UsageError, match="one length"):
        pp.preprocess_eval(tf.constant(tall), 4, (6, 4), keep_aspect=True)


def test_the_eval_pp_of_a_config_keeps_the_aspect_when_asked():
    """config.input.pp.eval_keep_aspect reaches the evaluation
    preprocessing; a keep_aspect without a resize size is refused by
    name."""
    config = config_lib.base_config()
    config.input.pp.eval_resize_size = 4
    config.input.pp.eval_keep_aspect = True
    image = tf.constant(_image(8, 12, seed=4))
    fn = pp.from_config(config.input.pp, 4, 0, training=False)
    np.testing.assert_array_equal(
        fn(image).numpy(),
        pp.preprocess_eval(image, 4, 4, keep_aspect=True).numpy())
    # Without a resize size: the central crop of the image's aspect
    # ratio, resized to it (keras-hub's image converter).
    config.input.pp.eval_resize_size = None
    config_limits.check_resize(config)
    fn = pp.from_config(config.input.pp, 4, 0, training=False)
    np.testing.assert_array_equal(
        fn(image).numpy(),
        pp.preprocess_eval(image[:, 2:10], 4).numpy())


def test_training_with_the_eval_pp_trains_as_it_is_scored():
    """config.input.pp.train='eval' (VTAB's) is the evaluation's own
    preprocessing, with its eval_resize_size and eval_keep_aspect: an
    image is trained on as it is evaluated and served, not squashed."""
    config = config_lib.base_config()
    config.input.pp.train = "eval"
    image = tf.constant(_image(8, 12, seed=4))
    for resize, keep in ((6, True), (6, False), (None, False)):
        config.input.pp.eval_resize_size = resize
        config.input.pp.eval_keep_aspect = keep
        trained = pp.from_config(config.input.pp, 4, 0, training=True)
        scored = pp.from_config(config.input.pp, 4, 0, training=False)
        np.testing.assert_array_equal(trained(image).numpy(),
                                      scored(image).numpy())
    # With a resize, the central crop of a 6-pixel shorter side: not the
    # whole image resized.
    config.input.pp.eval_resize_size, config.input.pp.eval_keep_aspect = (
        6, True)
    trained = pp.from_config(config.input.pp, 4, 0, training=True)
    assert not np.allclose(trained(image).numpy(),
                           pp.preprocess_eval(image, 4).numpy())


def test_a_small_resize_size_is_refused_only_where_it_is_cropped():
    """config.input.pp.resize_size is read by the 'finetune' training
    preprocessing alone (resize, then a random crop that must fit): one
    below the image size is refused there, and left alone by 'pretrain'
    (an Inception crop of the image) and 'eval', which never read it."""
    config = config_lib.base_config()
    config.input.pp.resize_size = 36
    image = tf.constant(_image(80, 70, seed=1))
    for kind in ("pretrain", "eval"):
        config.input.pp.train = kind
        fn = pp.from_config(config.input.pp, 64, 0, training=True)
        assert fn(image).shape == (64, 64, 3)
    config.input.pp.train = "finetune"
    with pytest.raises(UsageError, match=r"config.input.pp.resize_size=36 "
                       r"is smaller than the image size 64: the random crop "
                       r"must fit; set config.input.pp.resize_size to at "
                       r"least 64"):
        pp.from_config(config.input.pp, 64, 0, training=True)


def _windows(image, h, w):
    """All h x w windows of an image and of its mirror image."""
    out = []
    for source in (image, image[:, ::-1]):
        for top in range(source.shape[0] - h + 1):
            for left in range(source.shape[1] - w + 1):
                out.append(source[top:top + h, left:left + w])
    return out


def test_preprocess_finetune_seeded():
    x = _image(7, 7)

    def fn(a, seed):
        return pp.preprocess_finetune(a, 4, resize_size=(6, 6), seed=seed)

    out = _both(fn, x, SEED.numpy())
    assert out.shape == (4, 4, 3) and out.dtype == np.float32
    assert -1 <= out.min() and out.max() <= 1
    resized = tf.image.resize(x.astype(np.float32), (6, 6)).numpy()
    # The output is one 4 x 4 window of the resized image (maybe mirrored).
    assert any(
        np.allclose(out, wnd / 127.5 - 1, atol=1e-5)
        for wnd in _windows(resized, 4, 4)
    )
    others = {fn(tf.constant(x), tf.constant([s, 0], tf.int64)).numpy()
              .tobytes() for s in range(12)}
    assert len(others) > 3  # the seed moves the crop and the flip
    # No resize_size: resize straight to 4 x 4, then maybe flip.
    plain = _both(lambda a, s: pp.preprocess_finetune(a, 4, seed=s), x,
                  SEED.numpy())
    small = tf.image.resize(x.astype(np.float32), (4, 4)).numpy() / 127.5 - 1
    assert (np.allclose(plain, small, atol=1e-5)
            or np.allclose(plain, small[:, ::-1], atol=1e-5))
    unseeded = pp.preprocess_finetune(tf.constant(x), 4, resize_size=6)
    assert unseeded.shape == (4, 4, 3)


def test_preprocess_pretrain_seeded():
    x = _image(16, 12)

    def fn(a, seed):
        return pp.preprocess_pretrain(a, 8, seed=seed)

    out = _both(fn, x, SEED.numpy())
    assert out.shape == (8, 8, 3) and -1 <= out.min() and out.max() <= 1
    crops = {fn(tf.constant(x), tf.constant([s, 1], tf.int64)).numpy()
             .tobytes() for s in range(8)}
    assert len(crops) == 8  # random windows
    # Area and aspect ratio ranges that only the whole image fits.
    whole = _both(
        lambda a, s: pp.preprocess_pretrain(
            a, 8, area_range=(1.0, 1.0), aspect_ratio_range=(0.75, 0.75),
            seed=s,
        ),
        x, SEED.numpy(),
    )
    full = tf.image.resize(x.astype(np.float32), (8, 8)).numpy() / 127.5 - 1
    assert (np.allclose(whole, full, atol=1e-5)
            or np.allclose(whole, full[:, ::-1], atol=1e-5))
    no_flip = _both(
        lambda a, s: pp.preprocess_pretrain(
            a, 8, area_range=(1.0, 1.0), aspect_ratio_range=(0.75, 0.75),
            flip=False, seed=s,
        ),
        x, SEED.numpy(),
    )
    np.testing.assert_allclose(no_flip, full, atol=1e-5)


# ----------------------------------------------------------------- digits
def digits_config(**overrides):
    config = tiny.digits_base()
    config.model.image_size = 16
    config.input.pp.resize_size = 18
    return tiny.set_fields(config, overrides)


def test_digits_split_is_fixed_and_deterministic():
    x_train, y_train = sources.digits_split("train")
    x_test, y_test = sources.digits_split("test")
    assert x_train.shape == (1437, 8, 8) and x_test.shape == (360, 8, 8)
    assert x_train.dtype == np.uint8 and x_train.max() == 255
    # Stratified: every class has 35 or 36 test images.
    assert set(np.bincount(y_test)) <= {35, 36, 37}
    sources._digits_arrays.cache_clear()
    x2, y2 = sources.digits_split("train")
    np.testing.assert_array_equal(x2, x_train)
    np.testing.assert_array_equal(y2, y_train)
    part, _ = sources.digits_split("train[:10%]")
    np.testing.assert_array_equal(part, x_train[:144])
    with pytest.raises(ValueError, match="splits 'train' and 'test'"):
        sources.digits_split("validation")


def test_train_dataset_shapes_dtypes_range():
    config = digits_config()
    images, labels = next(iter(ip.train_dataset(*tiny.pipeline(config), 8)))
    assert images.shape == (8, 16, 16, 3) and images.dtype == tf.float32
    assert labels.shape == (8,) and labels.dtype == tf.int32
    assert -1 <= float(tf.reduce_min(images)) < 0
    assert 0 < float(tf.reduce_max(images)) <= 1
    spec = ip.train_dataset(*tiny.pipeline(config), 8).element_spec
    assert spec[0].shape == (8, 16, 16, 3)  # static: drop_remainder


def test_train_dataset_applies_the_seeded_ops_per_example():
    """Element i is preprocess(example i, seed (s, i)): the op in tf.data
    gives what it gives eagerly."""
    config = digits_config(shuffle_buffer=1)
    seed = ip.pipeline_seed(config.seed)
    x, y = sources.digits_split("train")
    images, labels = next(iter(ip.train_dataset(*tiny.pipeline(config), 4)))
    fn = ip.make_preprocess_fn(config.input.pp, config.model.image_size,
                              config.seed, training=True)
    for i in range(4):
        eager = fn(tf.constant(x[i][..., None]),
                   tf.constant([seed, i], tf.int64))
        np.testing.assert_allclose(images[i], eager, atol=1e-6)
        assert labels[i] == y[i]


@pytest.mark.parametrize("train", ["finetune", "pretrain"])
def test_augmented_batches_repeat_and_follow_the_pipeline_seed(train):
    """RandAugment and Mixup draw from (the pipeline's seed, the index):
    the same pipeline gives the same augmented batches again, and one of
    another seed (a resumed run drawing a new order, another host) its
    own; augmentation changes what the plain pipeline gives. After an
    Inception crop of decoded images too (it lost the channel count,
    which RandAugment refused)."""
    config = digits_config()
    config.input.pp.train, config.input.pp.randaug_ops = train, 2
    config.input.mix.mixup_alpha = 0.4

    def batches(config, **kwargs):
        ds = ip.train_dataset(*tiny.pipeline(config), 8, **kwargs)
        return [b for _, b in zip(range(3), ds.as_numpy_iterator())]

    first, again = batches(config), batches(config)
    for (x, y), (x2, y2) in zip(first, again):
        np.testing.assert_array_equal(x, x2)
        np.testing.assert_array_equal(y, y2)
    resumed = batches(config, start_step=100)
    assert not np.array_equal(first[0][0], resumed[0][0])
    config.input.pp.randaug_ops, config.input.mix.mixup_alpha = 0, 0.0
    plain = batches(config)
    assert not np.array_equal(first[0][0], plain[0][0])
    assert plain[0][1].ndim == 1 and first[0][1].shape == (8, 10)


def test_keras_vit_train_augments_an_inception_crop(tmp_path):
    """keras-vit-train on the digits with the pre-training crop, RandAugment
    and Mixup, as a user types it: it trains (RandAugment refused the
    crop, whose channels were unknown, before the first step)."""
    result = console.run("train", [
        *console.TINY_DIGITS, f"--workdir={tmp_path}",
        "--config.input.pp.train=pretrain",
        "--config.input.pp.randaug_ops=2",
        "--config.input.mix.mixup_alpha=0.2",
        "--config.trainer.total_steps=2", "--config.evals.test.every_steps=0"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "metrics.json").read_text())["steps"] == 2


def test_synthetic_data_repeats_the_first_real_batch():
    config = digits_config()
    real = iter(ip.train_dataset(*tiny.pipeline(config), 8))
    first, second = next(real), next(real)
    config.input.synthetic_data = True
    synthetic = iter(ip.train_dataset(*tiny.pipeline(config), 8))
    for _ in range(3):
        images, labels = next(synthetic)
        np.testing.assert_array_equal(images, first[0])
        np.testing.assert_array_equal(labels, first[1])
    assert not np.array_equal(first[0], second[0])  # the real one moves on


def _context(i, pipelines=2, replicas=4):
    return tf.distribute.InputContext(
        num_input_pipelines=pipelines, input_pipeline_id=i,
        num_replicas_in_sync=replicas,
    )


def _epoch(config, ctx, n):
    """The first `n` training examples of a pipeline, as bytes."""
    ds = ip.train_dataset(*tiny.pipeline(config), 4, ctx).unbatch().take(n)
    return [(im.numpy().tobytes(), int(lb)) for im, lb in ds]


def test_per_replica_batch_and_disjoint_shards_digits():
    config = digits_config(shuffle_buffer=1, **{"pp.train": "eval"})
    batch = next(iter(ip.train_dataset(*tiny.pipeline(config), 8, _context(0))))
    assert batch[0].shape == (2, 16, 16, 3)  # 8 over 4 replicas
    shards = [_epoch(config, _context(i), 719 - i) for i in range(2)]
    whole = _epoch(config, None, 1437)
    # Together the two pipelines hold each training example exactly once.
    assert (collections.Counter(shards[0]) + collections.Counter(shards[1])
            == collections.Counter(whole))
    with pytest.raises(ValueError, match="multiple of 4"):
        ip.train_dataset(*tiny.pipeline(config), 6, _context(0))


def _masked(ds):
    out = []
    for images, labels, mask in ds:
        assert images.shape[0] == labels.shape[0] == mask.shape[0]
        for im, lb, m in zip(images.numpy(), labels.numpy(), mask.numpy()):
            if m:
                out.append((im.tobytes(), int(lb)))
            else:
                assert lb == 0 and not im.any()
    return out


def test_eval_dataset_counts_every_example_once():
    config = digits_config()
    single = _masked(ip.eval_dataset(*tiny.pipeline(config), "test", 64))
    assert len(single) == 360
    test_labels = sources.digits_split("test")[1]
    assert sorted(lb for _, lb in single) == sorted(test_labels)
    sizes = [len(list(ip.eval_dataset(*tiny.pipeline(config), "test", 64,
                                      _context(i))))
             for i in range(2)]
    # ceil(360 / 64) = 6 global batches = 12 per pipeline (2 replicas each).
    assert sizes == [12, 12]
    parts = [_masked(ip.eval_dataset(*tiny.pipeline(config), "test", 64,
                                     _context(i)))
             for i in range(2)]
    assert (collections.Counter(parts[0]) + collections.Counter(parts[1])
            == collections.Counter(single))


# ----------------------------------------------------------- image folder
def _write_folder(root, per_class=6):
    """root/{train,val}/{cat,dog,eel}/ with PNG and JPEG files, gray and
    RGBA among them. Class c has mean brightness 60 + 70 c."""
    rng = np.random.default_rng(0)
    for split, n in (("train", per_class), ("val", 3)):
        for c, name in enumerate(("cat", "dog", "eel")):
            os.makedirs(os.path.join(root, split, name))
            for i in range(n):
                base = rng.normal(60 + 70 * c, 10, (20, 24, 3))
                pixels = np.clip(base, 0, 255).astype(np.uint8)
                kind = i % 4
                if kind == 1:
                    pixels = pixels[..., 0]  # gray
                elif kind == 2:
                    alpha = np.full(pixels.shape[:2] + (1,), 200, np.uint8)
                    pixels = np.concatenate([pixels, alpha], -1)
                fmt = "JPEG" if kind == 3 else "PNG"
                ext = ".JPG" if kind == 3 else ".png"
                Image.fromarray(pixels).save(
                    os.path.join(root, split, name, f"{i}{ext}"), format=fmt
                )
    with open(os.path.join(root, "train", "cat", "notes.txt"), "w") as f:
        f.write("not an image")


def test_a_cached_evaluation_reads_its_split_once(tmp_path):
    """An accuracy evaluator with `cache` gets the same evaluation data at
    every evaluation, so the split the first pass read is served from
    memory after: the images deleted once it has run, the next pass sees
    them all (it was rebuilt, and its cache lost, at every evaluation)."""
    import ml_collections

    from keras_vit.training import run_data

    root = str(tmp_path / "images")
    _write_folder(root)
    config = digits_config(dataset="folder", data_dir=root, val_split="val",
                           eval_split="val", shuffle_buffer=1)
    data = run_data.RunData(*tiny.pipeline(config),
                            tf.distribute.get_strategy(), 4, 4)
    entry = ml_collections.ConfigDict({"batch_size": None, "cache": True})
    first = _masked(data.eval_fn(entry, "val"))
    assert len(first) == 9
    for name in os.listdir(os.path.join(root, "val")):
        for image in os.listdir(os.path.join(root, "val", name)):
            os.remove(os.path.join(root, "val", name, image))
    again = data.eval_fn(entry, "val")
    assert _masked(again) == first
    entry.cache = False  # built anew: the deleted files are missed
    with pytest.raises(tf.errors.NotFoundError):
        _masked(data.eval_fn(entry, "val"))


def test_image_folder_source(tmp_path):
    root = str(tmp_path / "images")
    _write_folder(root)
    config = digits_config(dataset="folder", data_dir=root, val_split="val",
                           eval_split="val", shuffle_buffer=1,
                           **{"pp.train": "eval"})
    info = sources.dataset_info(config.input)
    assert info.class_names == ["cat", "dog", "eel"]
    assert info.num_examples == {"train": 18, "val": 9}
    assert sources.num_split_examples(config.input, "train[:50%]") == 9
    assert sources.num_split_examples(config.input, "train[-4:]") == 4
    paths, labels = folders.folder_split(root, "train")
    for path, label in zip(paths, labels):
        assert os.path.basename(os.path.dirname(path)) == info.class_names[
            label]
    seen = _masked(ip.eval_dataset(*tiny.pipeline(config), "val", 4))
    assert len(seen) == 9
    # Pixels decode to the class's brightness (gray, RGBA, JPEG alike).
    for data, label in seen:
        image = np.frombuffer(data, np.float32)
        assert abs((image.mean() + 1) * 127.5 - (60 + 70 * label)) < 12
    shards = [_epoch(config, _context(i, replicas=2), 9) for i in range(2)]
    whole = _epoch(config, None, 18)
    assert (collections.Counter(shards[0]) + collections.Counter(shards[1])
            == collections.Counter(whole))
    with pytest.raises(ValueError, match="no split 'test'"):
        ip.eval_dataset(*tiny.pipeline(config), "test", 4)
    missing = digits_config(dataset="folder", data_dir=str(tmp_path / "no"))
    with pytest.raises(ValueError, match="does not exist"):
        sources.dataset_info(missing.input)


def test_image_folder_epochs_hold_paths_not_images(tmp_path):
    """Training on a folder: each epoch every file once, each epoch in
    another order, endless as its cardinality says, and no shuffle
    buffer of images, in memory or in an iterator's checkpoint (two
    counters); the restored iterator goes on
    where the saved one stopped, reading the files as they are then."""
    root = str(tmp_path / "images")
    _write_folder(root)
    config = digits_config(dataset="folder", data_dir=root,
                           shuffle_buffer=10_000, **{"pp.train": "eval"})
    whole = collections.Counter(_epoch(config, None, 18))
    assert len(whole) == 18  # the first epoch, before any repeat
    both = _epoch(config, None, 36)
    assert collections.Counter(both[18:]) == whole
    assert both[18:] != both[:18]
    batches = ip.train_dataset(*tiny.pipeline(config), 4)
    # Known endless (as a TFDS split's repeat()): a multi-worker strategy
    # then skips its per-batch check for workers out of data.
    assert batches.cardinality() == tf.data.INFINITE_CARDINALITY
    ds = batches.unbatch()
    it = iter(ds)
    first = [next(it) for _ in range(5)]
    ckpt = tf.train.Checkpoint(iterator=it)
    path = ckpt.write(str(tmp_path / "ckpt" / "it"))
    state = tf.train.load_checkpoint(path).get_variable_to_shape_map()
    assert sorted(state) == ["_CHECKPOINTABLE_OBJECT_GRAPH",
                             "iterator/.ATTRIBUTES/ITERATOR_STATE"]
    size = sum(os.path.getsize(os.path.join(tmp_path, "ckpt", f))
               for f in os.listdir(tmp_path / "ckpt"))
    # The batches in flight (prefetch, parallel maps) only: a shuffle
    # buffer of 10,000 of these ~1 KB files would be some 10 MB.
    assert size < 500_000
    rest = [next(it)[1].numpy() for _ in range(13)]
    again = iter(ds)
    tf.train.Checkpoint(iterator=again).read(path).assert_consumed()
    assert [next(again)[1].numpy() for _ in range(13)] == rest
    assert len(first) == 5


def test_image_folder_iterators_of_another_pipeline_and_empty_shards(
        tmp_path):
    """A checkpointed iterator of another pipeline (an earlier version's
    shuffle buffer) is refused naming checkpoints.iterator=False, not
    taken for a damaged checkpoint; a pipeline of a multi-host run left
    without a training image says so (an endless empty epoch would
    hang)."""
    from keras_vit.training import resume

    root = str(tmp_path / "images")
    _write_folder(root)
    config = digits_config(dataset="folder", data_dir=root,
                           **{"pp.train": "eval"})
    old = tf.data.Dataset.range(10).shuffle(4).repeat().batch(2)
    saved = iter(old)
    next(saved)
    path = tf.train.Checkpoint(iterator=saved).write(
        str(tmp_path / "old" / "ckpt"))
    items = {"iterator": iter(ip.train_dataset(*tiny.pipeline(config), 4))}
    with pytest.raises(resume.TrainingError, match=(
            "does not fit this input pipeline .* resume with "
            "--config.checkpoints.iterator=False")):
        resume._restore(items, path)
    with pytest.raises(ValueError, match="18 training image.*for 20 input "
                       "pipelines leave this one none"):
        ip.train_dataset(*tiny.pipeline(config), 20,
                         _context(19, pipelines=20, replicas=20))
    # An evaluation pipeline left without an image gets padding only (its
    # empty part of the paths was read as floats: a TypeError in the map).
    test = ip.eval_dataset(*tiny.pipeline(config), "val", 20,
                           _context(19, pipelines=20, replicas=20))
    for images, labels, mask in test:
        assert not np.any(mask.numpy())


def _tiny_train_config(config, workdir_steps=2):
    config.trainer.total_steps = workdir_steps
    config.input.batch_size = 4
    config.trainer.steps_per_loop = 1
    config.log.every_steps = 1
    config.evals.test.every_steps = 0
    config.checkpoints.every_steps = 0
    config.trainer.jit_compile = False
    config.schedule.warmup_steps = 0
    config.model.hidden_size = 16
    config.model.mlp_dim = 16
    config.model.num_layers = 1
    config.model.num_heads = 2
    return config


def test_image_folder_trains_through_train_lib(tmp_path):
    root = str(tmp_path / "images")
    _write_folder(root)
    config = _tiny_train_config(digits_config(
        dataset="folder", data_dir=root, val_split="val", eval_split="val",
        **{"pp.flip": True},
    ))
    metrics = train_lib.train_and_evaluate(config, str(tmp_path / "run"))
    assert metrics["steps"] == 2 and metrics["test_examples"] == 9
    labels = (tmp_path / "run" / "labels.txt").read_text().split()
    assert labels == ["cat", "dog", "eel"]


# ------------------------------------------------------------------- TFDS
@pytest.mark.slow
def test_tfds_dataset_by_name_trains_through_train_lib(tmp_path):
    import tensorflow_datasets as tfds

    config = _tiny_train_config(digits_config(dataset="cifar10"))
    with tfds.testing.mock_data(num_examples=12,
                                policy=tfds.testing.MockPolicy.USE_CODE):
        info = sources.dataset_info(config.input)
        assert info.num_classes == 10 and len(info.class_names) == 10
        images, labels = next(iter(ip.train_dataset(*tiny.pipeline(config), 4)))
        assert images.shape == (4, 16, 16, 3) and labels.dtype == tf.int32
        metrics = train_lib.train_and_evaluate(config, str(tmp_path / "run"))
    assert metrics["steps"] == 2 and metrics["test_examples"] == 12


@pytest.fixture
def prepared_tfds(tmp_path, monkeypatch):
    """A real TFDS dataset on disk ("tinyset": 50 train, 21 test, one file
    per split), read back by name through its data_dir."""
    import tensorflow_datasets as tfds

    # Preparing a dataset makes tensorflow-datasets import the
    # importlib_resources backport, which Python 3.11's importlib.resources
    # replaces.
    monkeypatch.setitem(sys.modules, "importlib_resources",
                        importlib.resources)
    rng = np.random.default_rng(0)

    def split(n):
        return tf.data.Dataset.from_tensor_slices({
            "image": rng.integers(0, 256, (n, 8, 8, 3), np.uint8),
            "label": np.arange(n) % 3,
        })

    builder = tfds.dataset_builders.TfDataBuilder(
        name="tinyset", version="1.0.0",
        split_datasets={"train": split(50), "test": split(21)},
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(8, 8, 3)),
            "label": tfds.features.ClassLabel(names=["a", "b", "c"]),
        }),
        data_dir=str(tmp_path / "tfds"),
    )
    builder.download_and_prepare()
    return str(tmp_path / "tfds")


def test_tfds_sharding_and_eval_padding(prepared_tfds):
    config = digits_config(dataset="tinyset", data_dir=prepared_tfds,
                           shuffle_buffer=1, **{"pp.train": "eval"})
    info = sources.dataset_info(config.input)
    assert info.num_examples == {"train": 50, "test": 21}
    assert sources.num_split_examples(config.input, "train[:20%]") == 10
    # One file, two pipelines: even example ranges, not file sharding.
    shards = [_epoch(config, _context(i), 25) for i in range(2)]
    whole = _epoch(config, None, 50)
    assert (collections.Counter(shards[0]) + collections.Counter(shards[1])
            == collections.Counter(whole))
    # Images stay encoded (PNG bytes) through shuffle and cache.
    shard = ip._shard(config.input, config.seed, "train", True, None, 0)
    assert shard.dataset.element_spec[0].dtype == tf.string
    raw, _ = next(iter(shard.dataset))
    assert shard.decode(raw).shape == (8, 8, 3)
    single = _masked(ip.eval_dataset(*tiny.pipeline(config), "test", 8))
    assert len(single) == 21
    parts = [list(ip.eval_dataset(*tiny.pipeline(config), "test", 8,
                                  _context(i)))
             for i in range(2)]
    assert [len(p) for p in parts] == [6, 6]  # ceil(21 / 8) x 2 replicas
    masked = [_masked(p) for p in parts]
    assert (collections.Counter(masked[0]) + collections.Counter(masked[1])
            == collections.Counter(single))
    # A joined split's even parts are uneven (each sub-split's remainder
    # goes to the first part: 4 and 2 of these 6): every pipeline yields
    # as many batches as the largest part needs, and none is left out.
    joined = "test[:3]+test[5:8]"
    single = _masked(ip.eval_dataset(*tiny.pipeline(config), joined, 2))
    assert len(single) == 6
    parts = [list(ip.eval_dataset(*tiny.pipeline(config), joined, 2,
                                  _context(i, replicas=2)))
             for i in range(2)]
    assert [len(p) for p in parts] == [4, 4]
    masked = [_masked(p) for p in parts]
    assert (collections.Counter(masked[0]) + collections.Counter(masked[1])
            == collections.Counter(single))


def test_a_joined_split_whose_parts_tfds_cannot_size_keeps_every_example(
        prepared_tfds, monkeypatch):
    """Where TFDS cannot size the even parts of a joined split, the
    batches per pipeline take a bound (one example more per sub-split
    than the even share): padding, never an example left out."""
    config = digits_config(dataset="tinyset", data_dir=prepared_tfds,
                           shuffle_buffer=1, **{"pp.train": "eval"})
    sized = sources.tfds_split_size
    monkeypatch.setattr(sources, "tfds_split_size", lambda builder, split: (
        sized(builder, split) if isinstance(split, str) else None))
    joined = "test[:3]+test[5:8]"
    single = _masked(ip.eval_dataset(*tiny.pipeline(config), joined, 2))
    parts = [_masked(ip.eval_dataset(*tiny.pipeline(config), joined, 2,
                                     _context(i, replicas=2)))
             for i in range(2)]
    assert (collections.Counter(parts[0]) + collections.Counter(parts[1])
            == collections.Counter(single))


def test_unknown_sources_fail_clearly():
    with pytest.raises(ValueError, match="Unknown dataset 'no_such_set'"):
        sources.dataset_info(digits_config(dataset="no_such_set").input)
    # One line naming the closest TFDS names, not TFDS's list of them all.
    with pytest.raises(ValueError) as raised:
        sources.dataset_info(digits_config(dataset="cifar1").input)
    assert str(raised.value) == (
        "Unknown dataset 'cifar1': use 'digits', 'folder' or a TFDS name "
        "(see tfds.list_builders()); the closest: cifar10, cifar100, "
        "cifar10_n.")
    with pytest.raises(ValueError, match="resize_size=8 is smaller"):
        ip.train_dataset(
            *tiny.pipeline(digits_config(**{"pp.resize_size": 8})), 4)
    with pytest.raises(ValueError, match="Unknown pp.train"):
        ip.train_dataset(
            *tiny.pipeline(digits_config(**{"pp.train": "mixup"})), 4)
    with pytest.raises(ValueError, match="Cannot read split"):
        sources.digits_split("train[:5")
    with pytest.raises(ValueError, match="selects no examples"):
        sources.digits_split("train[10:5]")
    # A bound beyond the examples is refused, as TFDS refuses it, not
    # read as the end (train has 1437 digits).
    for beyond in ("train[:5000]", "train[-5000:]", "train[:120%]"):
        with pytest.raises(ValueError, match=r"a slice bound goes up to"):
            sources.digits_split(beyond)
    assert len(sources.digits_split("train[:1437]")[0]) == 1437
    assert len(sources.digits_split("train[-10:]")[0]) == 10
    # A TFDS data set's image or label key it lacks: named with its
    # features, before anything is downloaded (a KeyError traceback).
    with pytest.raises(UsageError, match=(
            r"^mnist has no feature 'real_label' \(config.input.label_key\);"
            r" its features are image, label: set config.input.label_key "
            r"to the one that holds the label.$")):
        sources.tfds_builder(digits_config(
            dataset="mnist", label_key="real_label", download=False).input)
    # Examples per class of a TFDS data set: refused as the pipeline
    # refuses them, not counted as the digits' (10 classes x 5).
    with pytest.raises(UsageError, match="works with the digits and image "
                       "folders; for a TFDS data set slice train_split"):
        sources.training_examples(digits_config(
            dataset="cifar10", train_examples_per_class=5).input)



@pytest.mark.parametrize("first, second, shared", [
    ("train", "train[90%:]", True),
    ("train[:90%]", "train[90%:]", False),
    ("train[:-10%]", "train[-10%:]", False),
    ("train", "test", False),
    # In examples where the split is counted: 900 of 1000 is 90%.
    ("train[:900]", "train[90%:]", False),
    ("train[:901]", "train[90%:]", True),
    ("train[:100]", "train[100:200]", False),
    ("train+val", "val", True),
    ("train", "Train[:5]", True),
    # Not counted: nothing to compare, nothing said.
    ("other[:5]", "other[4:]", False),
])
def test_split_overlap(first, second, shared):
    # Image folders read their split names in any case (Train/ is train).
    def count(name):
        return {"train": 1000, "val": 100}.get(name.lower())

    assert overlaps.overlap(first, second, count) is shared
    assert overlaps.overlap(second, first, count) is shared

def _numbered_folder(root, bad=None):
    """root/train/{a,b}/ of 6 PNGs each, image k all of value 10 + 20 k
    (which file a batch holds is read off its pixels); `bad` ("a/3.png"):
    that file holds other bytes."""
    for k in range(12):
        path = os.path.join(root, "train", "ab"[k // 6], f"{k % 6}.png")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if path.endswith(bad or "//"):
            with open(path, "wb") as f:
                f.write(b"not an image")
        else:
            Image.fromarray(np.full((8, 8, 3), 10 + 20 * k, np.uint8)).save(
                path)


def test_a_bad_image_read_ahead_into_a_checkpoint_names_the_way_out(
        tmp_path):
    """A checkpointed training iterator holds the images read ahead of it,
    a file that failed to decode among them: removed (or skipped) since,
    the resumed iterator still fails on it. The error names that
    checkpoint and config.checkpoints.iterator=False, the way out (the
    files' own message would send the user round again). Where the run
    resumed no iterator (`restored` None: an evaluation, or a fresh run),
    or the error is no decoder's, TensorFlow's error stays."""
    import time

    from keras_vit.data import checks as data_checks

    good = str(tmp_path / "good")
    _numbered_folder(good)

    def first_batches(root, n, path=None):
        config = digits_config(dataset="folder", data_dir=root,
                               **{"pp.train": "eval"})
        it = iter(ip.train_dataset(*tiny.pipeline(config), 1))
        if path:
            tf.train.Checkpoint(iterator=it).read(path).assert_consumed()
        return config, it, [next(it)[0] for _ in range(n)]

    order = [int(round(((float(x.numpy().mean()) + 1) * 127.5 - 10) / 20))
             for x in first_batches(good, 4)[2]]
    fourth = order[3]
    name = f"{'ab'[fourth // 6]}/{fourth % 6}.png"
    root = str(tmp_path / "images")
    _numbered_folder(root, bad=name)
    config, it, _ = first_batches(root, 2)
    time.sleep(2)  # the read-ahead of the third, fourth... images done
    path = tf.train.Checkpoint(iterator=it).write(str(tmp_path / "ck" / "c"))
    splits = [("input.train_split", "train")]
    # Skipped (the file still there), then removed (a new process lists
    # the folder anew).
    for restored, skip in ((path, True), (path, False), (None, False)):
        if not skip and os.path.exists(os.path.join(root, "train", name)):
            os.remove(os.path.join(root, "train", name))
            folders.folder_index.cache_clear()
        config.input.skip_bad_images = skip
        with pytest.raises(Exception) as caught:
            with data_checks.explained_errors(config.input, splits,
                                              restored):
                first_batches(root, 3, path)
        if restored:
            assert isinstance(caught.value, UsageError)
            assert str(caught.value).startswith(
                f"An image of folder {root} read ahead before {path} was "
                "saved cannot be decoded")
            assert "config.checkpoints.iterator=False" in str(caught.value)
        else:
            assert isinstance(caught.value, tf.errors.InvalidArgumentError)
    not_an_image = tf.errors.InvalidArgumentError(
        None, None, "Incompatible shapes: [8,10] vs. [8,3]")
    assert data_checks.explain_input_error(
        config.input, splits, not_an_image, restored=path) is None
    # The bad file there (not skipped): named, with both fixes.
    with open(os.path.join(root, "train", name), "wb") as f:
        f.write(b"not an image")
    folders.folder_index.cache_clear()
    both = str(data_checks.explain_input_error(
        config.input, splits, caught.value, restored=path))
    assert both.startswith("Cannot decode 1 image file(s)"), both
    assert both.endswith(f"Resumed from {path}, whose data iterator may "
                         "hold them read ahead: add "
                         "config.checkpoints.iterator=False too."), both
    # With the data order drawn anew, the folder as it is now trains on.
    config.input.skip_bad_images = True
    assert len(first_batches(root, 3)[2]) == 3

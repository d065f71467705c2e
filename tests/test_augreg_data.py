"""AugReg's data and training options: RandAugment inside tf.data, Mixup
and CutMix label sums, the fused JPEG Inception crop, losses of mixed
labels, and a real run with all of them that lowers the loss."""

import io
import json
import math
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit.data import augment
from keras_vit.data import pipeline as ip
from keras_vit.data import preprocessing as pp
from keras_vit.scoring import losses
from keras_vit.training import loop, train_lib
from tests import tiny


def _picture(h=48, w=40, seed=0):
    """A smooth RGB picture (JPEG-friendly) as uint8."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:h, :w]
    base = np.stack([np.sin(x / 5.0), np.cos(y / 7.0),
                     np.sin((x + y) / 9.0)], -1)
    noise = rng.normal(0, 0.05, (h, w, 3))
    return np.clip((base + noise + 1) * 127.5, 0, 255).astype(np.uint8)


def _encode(array, fmt, **options):
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format=fmt, **options)
    return buf.getvalue()


# ------------------------------------------------------------ RandAugment
def test_randaugment_magnitude_mapping():
    assert augment.randaugment_factor(15) == 0.25
    assert augment.randaugment_factor(0) == 0.0
    assert augment.randaugment_factor(90) == 1.0
    with pytest.raises(ValueError, match="randaug_magnitude"):
        augment.randaugment_factor(-1)
    assert augment.rand_augment(0, 15) is None


def test_randaugment_rotates_and_translates_either_way():
    """As the TPU RandAugment (a random sign): angles in [-90, 90] degrees
    and shifts of up to a quarter of each side either way at factor 0.25
    (M = 15), where Keras's own RandAugment draws [0, 90] degrees and
    shifts down and right only."""
    layer = augment.SignedRandAugment(value_range=(0, 255), num_ops=2,
                                      factor=0.25, seed=0)
    images = tf.zeros((256, 16, 16, 3))
    angles = np.asarray(layer.random_rotation.get_random_transformation(
        images, training=True)["angle"])
    shifts = np.asarray(layer.random_translation.get_random_transformation(
        images, training=True)["translations"])
    assert -90 <= angles.min() < -45 and 45 < angles.max() <= 90
    assert abs(np.mean(angles)) < 15
    for axis in (0, 1):  # in pixels of the 16
        assert -4 <= shifts[:, axis].min() < -2 < 2 < shifts[:, axis].max()


@pytest.mark.parametrize("dtype", [
    pytest.param("uint8", marks=pytest.mark.slow), "float32"])
def test_randaugment_runs_inside_tf_data(dtype):
    fn = augment.rand_augment(2, 15, seed=0)
    picture = _picture(32, 32)
    pictures = np.stack([picture] * 16).astype(dtype)
    ds = tf.data.Dataset.from_tensor_slices(pictures).map(fn)
    out = np.stack(list(ds.as_numpy_iterator()))
    assert out.shape == (16, 32, 32, 3) and out.dtype == np.float32
    assert out.min() >= 0 and out.max() <= 255
    # Two ops per image, drawn per image: the images differ from the input
    # and from each other.
    assert np.abs(out - picture).mean() > 1.0
    assert len({o.tobytes() for o in out}) > 8


def test_randaugment_runs_only_the_chosen_ops():
    """Each slot runs its one chosen op (tf.switch_case), and the images
    are those of Keras's own transform, which runs every op and keeps the
    chosen one: the same draws give the same pixels, over 40 images in a
    tf.data map, and only the chosen ops ran (counted as the graph runs
    them)."""
    layer = augment.SignedRandAugment(value_range=(0, 255), num_ops=2,
                                      factor=0.25, seed=0)
    runs = tf.Variable(0)
    one_op = layer._one_op

    def counted(name, images, value):
        runs.assign_add(1)
        return one_op(name, images, value)

    layer._one_op = counted

    def both(image):
        image = image[None]  # as the layer's call hands it over
        draws = layer.get_random_transformation(image, training=True)
        return (layer.transform_images(image, draws),
                keras.layers.RandAugment.transform_images(layer, image,
                                                          draws))

    images = np.random.default_rng(0).uniform(0, 255, (40, 24, 24, 3))
    ds = tf.data.Dataset.from_tensor_slices(images.astype("float32"))
    changed = 0
    for image, (ours, theirs) in zip(images, ds.map(both).as_numpy_iterator()):
        np.testing.assert_array_equal(ours, theirs)
        changed += not np.allclose(ours[0], image)
    assert int(runs.numpy()) == 2 * len(images)
    assert changed > 30


def test_augment_cost_benchmark_writes_consistent_results(tmp_path):
    """benchmarks/augment_cost.py, tiny: both ways give the same images
    (else it fails), and its JSON and report agree."""
    out = str(tmp_path / "ac")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, os.path.join(root, "benchmarks", "augment_cost.py"),
         "--images=3", "--repeats=2", "--image_size=32", f"--output={out}"],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out + ".json") as f:
        data = json.load(f)
    assert [len(data["ms_per_image"][k]) for k in ("keras_vit",
                                                  "keras_own")] == [2, 2]
    assert data["speedup"] == pytest.approx(
        data["median_ms_per_image"]["keras_own"]
        / data["median_ms_per_image"]["keras_vit"])
    with open(out + ".md") as f:
        assert f"{data['speedup']:.1f}x" in f.read()
    bad = subprocess.run(
        [sys.executable, os.path.join(root, "benchmarks", "augment_cost.py"),
         "--images=0", f"--output={out}"], capture_output=True, text=True,
        timeout=600)
    assert bad.returncode == 2 and "--images must be at least 1" in bad.stderr


def _seeded_map(fn, images, seed, parallel=True):
    """`fn(image, (seed, index))` over `images` in a tf.data map."""
    ds = tf.data.Dataset.from_tensor_slices(images).enumerate().map(
        lambda i, x: fn(x, tf.stack([tf.constant(seed, tf.int64), i])),
        num_parallel_calls=tf.data.AUTOTUNE if parallel else None,
        deterministic=True if parallel else None,
    )
    return ds, np.stack(list(ds.as_numpy_iterator()))


def test_randaugment_draws_repeat_from_the_example_seed():
    """Each image's ops and strengths come from its own stateless seed:
    the same seed augments every image alike in a parallel map and in a
    serial one, run after run (the layer's own state is left alone, so
    nothing depends on the order examples reach it), another seed
    otherwise; and the map holds no state, so the iterator can be saved
    in a checkpoint."""
    fn = augment.rand_augment(2, 15, seed=0)
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 255, (24, 20, 20, 3)).astype("float32")
    ds, first = _seeded_map(fn, images, 5)
    _, again = _seeded_map(fn, images, 5)
    _, serial = _seeded_map(fn, images, 5, parallel=False)
    _, other = _seeded_map(fn, images, 6)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, serial)
    assert all(not np.array_equal(a, b) for a, b in zip(first, other))
    assert len({image.tobytes() for image in first}) == len(images)
    eager = fn(tf.constant(images[3]), tf.constant([5, 3], tf.int64))
    np.testing.assert_allclose(eager, first[3], atol=1e-4)
    assert ip.is_checkpointable(ds)
    # Without a seed of its own, a call draws from the layer's state.
    _, stateful = _seeded_map(lambda x, s: fn(x), images, 5)
    assert not ip.is_checkpointable(
        tf.data.Dataset.from_tensor_slices(images).map(fn))
    assert not np.array_equal(stateful, first)


def test_mixes_repeat_from_the_batch_index():
    """With the pipeline's batch index, Mixup and CutMix draw from (seed,
    index): a parallel map mixes every batch as before, another seed
    mixes otherwise, and the map can be checkpointed."""
    mix = augment.mix_batch(16, mixup_alpha=0.4, cutmix_alpha=1.0, seed=3)
    images, labels = _batch(16, 8, 8)

    def mixed(m):
        ds = tf.data.Dataset.from_tensors((images, labels)).repeat(8)
        ds = ds.enumerate().map(lambda i, b: m(*b, index=i),
                                num_parallel_calls=tf.data.AUTOTUNE,
                                deterministic=True)
        return ds, [soft for _, soft in ds.as_numpy_iterator()]

    ds, first = mixed(mix)
    _, again = mixed(mix)
    _, other = mixed(augment.mix_batch(16, 0.4, 1.0, seed=4))
    for a, b, c in zip(first, again, other):
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)
    assert len({soft.tobytes() for soft in first}) == 8
    assert ip.is_checkpointable(ds)


def test_randaugment_in_the_training_preprocessing():
    config = tiny.digits_config()
    config.input.pp.randaug_ops, config.input.pp.randaug_magnitude = 2, 10
    plain = tiny.digits_config()
    fn, off = (pp.from_config(c.input.pp, c.model.image_size, c.seed,
                              training=True) for c in (config, plain))
    picture = tf.constant(_picture(36, 36))
    seed = tf.constant([1, 2], tf.int64)
    augmented = fn(picture, seed).numpy()
    assert augmented.shape == (32, 32, 3)
    assert -1 <= augmented.min() and augmented.max() <= 1
    assert np.abs(augmented - off(picture, seed).numpy()).max() > 0
    config.input.pp.train = "eval"
    with pytest.raises(ValueError, match="randaug_ops"):
        pp.from_config(config.input.pp, config.model.image_size,
                       config.seed, training=True)


# ----------------------------------------------------------- Mixup, CutMix
def _batch(n=16, h=8, w=8):
    """Images that say which example they are: image i is all i."""
    images = np.broadcast_to(
        np.arange(n, dtype=np.float32)[:, None, None, None], (n, h, w, 3)
    ).copy()
    return images, np.arange(n, dtype=np.int32)


def test_mixup_labels_sum_to_one_and_match_the_images():
    mix = augment.mix_batch(16, mixup_alpha=0.4, seed=0)
    images, labels = _batch()
    ds = tf.data.Dataset.from_tensors((images, labels)).repeat(4).map(mix)
    lambdas = []
    for mixed, soft in ds.as_numpy_iterator():
        assert soft.shape == (16, 16) and soft.dtype == np.float32
        np.testing.assert_allclose(soft.sum(1), 1.0, atol=1e-6)
        # Image i is sum_j soft[i, j] * image_j: the labels are the images'
        # mixing weights.
        expected = np.einsum("ij,jhwc->ihwc", soft, images)
        np.testing.assert_allclose(mixed, expected, atol=1e-4)
        lambdas.extend(soft[np.arange(16), labels])
    assert np.std(lambdas) > 0.01  # a weight per example, not per batch


def test_cutmix_labels_sum_to_one_and_match_the_pasted_area():
    mix = augment.mix_batch(16, cutmix_alpha=1.0, seed=1)
    images, labels = _batch(16, 32, 32)
    ds = tf.data.Dataset.from_tensors((images, labels)).repeat(4).map(mix)
    for mixed, soft in ds.as_numpy_iterator():
        np.testing.assert_allclose(soft.sum(1), 1.0, atol=1e-6)
        for i in range(16):
            values, counts = np.unique(mixed[i, :, :, 0], return_counts=True)
            share = dict(zip(values.astype(int), counts / counts.sum()))
            own = share.get(i, 0.0)
            # The label weight of each image is its share of the pixels
            # (Keras's own weight, of its box's fractional area, was off
            # by up to a row and a column of pixels: 6 points at 32 x 32).
            assert abs(soft[i, i] - own) <= 1e-6
            for j, pixels in share.items():
                assert abs(soft[i, j] - pixels) <= 1e-6
            assert len(share) <= 2 and mixed.shape == images.shape


def test_mixup_or_cutmix_per_batch_and_bad_alphas():
    mix = augment.mix_batch(16, mixup_alpha=0.2, cutmix_alpha=1.0, seed=2)
    images, labels = _batch(16, 16, 16)
    mixed, soft = mix(tf.constant(images), tf.constant(labels))
    np.testing.assert_allclose(soft.numpy().sum(1), 1.0, atol=1e-6)
    assert augment.mix_batch(10) is None
    with pytest.raises(ValueError, match="cutmix_alpha"):
        augment.mix_batch(10, cutmix_alpha=2.0)
    with pytest.raises(ValueError, match="mixup_alpha"):
        augment.mix_batch(10, mixup_alpha=-1.0)


def test_train_dataset_mixes_labels():
    config = tiny.digits_config()
    config.input.mix.mixup_alpha = 0.2
    images, soft = next(iter(ip.train_dataset(*tiny.pipeline(config), 8)))
    assert images.shape == (8, 32, 32, 3)
    assert soft.shape == (8, 10) and soft.dtype == tf.float32
    np.testing.assert_allclose(soft.numpy().sum(1), 1.0, atol=1e-6)


# ----------------------------------------------------------------- losses
def test_losses_of_mixed_labels():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 5)).astype("float32")
    soft = rng.dirichlet(np.ones(5), 4).astype("float32")
    log_softmax = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    np.testing.assert_allclose(
        losses.per_example_loss(soft, logits, 5).numpy(),
        -(soft * log_softmax).sum(1), rtol=1e-5,
    )
    sigmoid = 1 / (1 + np.exp(-logits))
    np.testing.assert_allclose(
        losses.per_example_loss(soft, logits, 5, "sigmoid_xent").numpy(),
        -(soft * np.log(sigmoid) + (1 - soft) * np.log(1 - sigmoid)).sum(1),
        rtol=1e-5,
    )
    hard = np.array([0, 3, 1, 4], "int32")
    onehot = np.eye(5, dtype="float32")[hard]
    for loss in losses.LOSSES:
        np.testing.assert_allclose(
            losses.per_example_loss(onehot, logits, 5, loss, 0.1).numpy(),
            losses.per_example_loss(hard, logits, 5, loss, 0.1).numpy(),
            rtol=1e-6,
        )
    np.testing.assert_array_equal(losses.hard_labels(soft).numpy(),
                                  soft.argmax(1))


# ---------------------------------------------------- fused Inception crop
def _jpeg(seed, subsampling):
    return tf.constant(_encode(_picture(64, 48, seed), "JPEG", quality=90,
                               subsampling=subsampling))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fused_jpeg_crop_equals_decode_then_crop(seed):
    """Full-resolution colour (4:4:4): the crop decoded alone is exactly
    the decoded image's crop, and so is the whole preprocessing."""
    data = _jpeg(seed, subsampling=0)
    key = tf.constant([seed, 7], tf.int64)
    fused = pp.decode_and_inception_crop(data, (0.1, 0.5), seed=key)
    whole = pp.decode_image(data)  # as Pillow decodes it
    begin, size = pp.inception_crop_window(tf.shape(whole), (0.1, 0.5),
                                           seed=key)
    np.testing.assert_array_equal(fused.numpy(),
                                  tf.slice(whole, begin, size).numpy())
    assert fused.shape[0] < 64 or fused.shape[1] < 48  # a real crop
    # The whole training preprocessing, fused or not, inside tf.data too.
    a = pp.preprocess_pretrain_encoded(data, 16, (0.1, 0.5), seed=key)
    b = pp.preprocess_pretrain(pp.decode_image(data), 16, (0.1, 0.5),
                               seed=key)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    ds = tf.data.Dataset.from_tensors(data).map(
        lambda d: pp.preprocess_pretrain_encoded(d, 16, (0.1, 0.5),
                                                 seed=key))
    np.testing.assert_array_equal(next(iter(ds)).numpy(), a.numpy())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fused_crop_of_subsampled_jpeg_differs_only_at_its_border(seed):
    """Half-resolution colour (4:2:0, the usual JPEG): libjpeg's chroma
    upsampling lacks the neighbours outside the window, so the last pixel
    row and column of the window can differ; everything else is equal."""
    data = _jpeg(seed, subsampling=2)
    key = tf.constant([seed, 7], tf.int64)
    fused = pp.decode_and_inception_crop(data, (0.1, 0.5), seed=key).numpy()
    whole = pp.decode_image(data)  # as Pillow decodes it
    begin, size = pp.inception_crop_window(tf.shape(whole), (0.1, 0.5),
                                           seed=key)
    reference = tf.slice(whole, begin, size).numpy()
    assert fused.shape == reference.shape
    np.testing.assert_array_equal(fused[:-1, :-1], reference[:-1, :-1])
    diff = np.abs(fused.astype(int) - reference.astype(int))
    assert diff.max() <= 16


def test_png_falls_back_to_a_full_decode():
    picture = _picture(40, 40, 3)
    data = tf.constant(_encode(picture, "PNG"))
    key = tf.constant([3, 4], tf.int64)
    crop = pp.decode_and_inception_crop(data, (0.2, 0.6), seed=key)
    begin, size = pp.inception_crop_window(tf.constant([40, 40, 3]),
                                           (0.2, 0.6), seed=key)
    np.testing.assert_array_equal(
        crop.numpy(), tf.slice(picture, begin, size).numpy())


# -------------------------------------------------------------- a real run
def test_resume_with_augmentation_matches_uninterrupted_run(
    tmp_path, monkeypatch
):
    """RandAugment, Mixup and CutMix draw from stateless seeds, so their
    input iterator is saved with each checkpoint: a run preempted and
    resumed ends exactly as the uninterrupted one."""
    config = tiny.digits_config(
        total_steps=16, steps_per_loop=4, log_every_steps=8,
        eval_every_steps=0, checkpoint_every_steps=8,
        **{"optimizer.warmup_steps": 4},
    )
    config.input.pp.train = "finetune"
    config.input.pp.randaug_ops, config.input.pp.randaug_magnitude = 2, 10
    config.input.mix.mixup_alpha, config.input.mix.cutmix_alpha = 0.2, 1.0
    straight = train_lib.train_and_evaluate(config, str(tmp_path / "a"))
    workdir = str(tmp_path / "b")
    with monkeypatch.context() as m:
        m.setattr(loop, "_Preemption", tiny.StopAfterFirstLoop)
        stopped = train_lib.train_and_evaluate(config, workdir)
    assert stopped["preempted"] and stopped["step"] == 8
    resumed = train_lib.train_and_evaluate(config, workdir)
    assert resumed["steps_this_run"] == 8
    assert resumed["test_loss"] == straight["test_loss"]
    assert resumed["test_accuracy"] == straight["test_accuracy"]


@pytest.mark.slow
def test_training_with_every_option_lowers_the_loss(tmp_path):
    """RandAugment, Mixup + CutMix, sigmoid loss with head bias -2,
    stochastic depth and sin-cos embeddings on the digits: the mean train
    loss of the last 20 of 60 steps is below that of the first 20."""
    config = tiny.digits_config(
        total_steps=60, eval_every_steps=0, checkpoint_every_steps=0,
        log_every_steps=20, steps_per_loop=20,
    )
    config.schedule.warmup_steps = 5
    config.input.pp.randaug_ops, config.input.pp.randaug_magnitude = 2, 10
    config.input.mix.mixup_alpha, config.input.mix.cutmix_alpha = 0.2, 1.0
    config.objective.loss = "sigmoid_xent"
    config.model.update(dict(head_bias_init=-2.0, posemb="sincos2d",
                             stochastic_depth_rate=0.1, num_layers=2))
    metrics = train_lib.train_and_evaluate(config, str(tmp_path / "run"))
    trained = tiny.train_losses(tmp_path / "run")
    assert len(trained) == 3 and all(math.isfinite(v) for v in trained)
    assert trained[-1] < trained[0]
    assert metrics["steps"] == 60 and math.isfinite(metrics["test_loss"])

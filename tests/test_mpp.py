"""Masked patch prediction (paper Section 4.6): the corruption's
statistics, the colour targets against NumPy, the loss on corrupted patches
only, real training steps, and the encoder's transfer into a classifier."""

import json
import logging
import os

import keras
import ml_collections as mlc
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import build, mpp, optim
from keras_vit.analysis import inputs as analysis_inputs
from keras_vit.analysis import mpp_figure
from keras_vit.architecture import Architecture
from keras_vit.checkpoint import loader, weights
from keras_vit.checkpoint.formats import npz as checkpoint_io
from keras_vit.commands import analysis as analysis_command
from keras_vit.data import masking, sources
from keras_vit.data import pipeline as input_pipeline
from keras_vit.errors import UsageError
from keras_vit.storage import workdir as wd
from keras_vit.training import loop, reporting, train_lib
from keras_vit.training.mpp_trainer import MppTrainer
from tests import test_recipes, tiny
from tests.strategies import two_cpu_mirrored

SIZES = dict(patch_size=4, hidden_size=32, num_layers=1, num_heads=2,
             mlp_dim=64)


# ------------------------------------------------------------ corruption
def _corrupt(images, patches, rate=0.5, seed=0):
    noise = np.random.default_rng(seed).uniform(size=(images, patches, 3))
    mode, source = masking.corruption_from_noise(
        tf.constant(noise, tf.float32), rate
    )
    return mode.numpy(), source.numpy()


def test_half_of_every_image_corrupted_80_10_10():
    mode, source = _corrupt(4000, 16)
    corrupted = mode > 0
    # Exactly 8 of 16 patches of every image.
    assert (corrupted.sum(axis=1) == 8).all()
    kinds = mode[corrupted]
    shares = [np.mean(kinds == k) for k in (mpp.MASKED, mpp.REPLACED,
                                             mpp.KEPT)]
    # 32,000 corrupted patches: a share's standard error is < 0.25%.
    assert shares == pytest.approx([0.8, 0.1, 0.1], abs=0.01)
    # Every position is corrupted equally often.
    assert corrupted.mean(axis=0) == pytest.approx(np.full(16, 0.5),
                                                   abs=0.03)


def test_random_replacements_come_from_other_patches_of_the_image():
    mode, source = _corrupt(2000, 16)
    index = np.broadcast_to(np.arange(16), mode.shape)
    replaced = mode == mpp.REPLACED
    assert replaced.sum() > 1400  # about 10% of 16,000
    assert (source[replaced] != index[replaced]).all()
    assert ((0 <= source) & (source < 16)).all()
    # Every other patch can be the replacement.
    offsets = (source[replaced] - index[replaced]) % 16
    assert set(offsets.tolist()) == set(range(1, 16))
    # Patches not replaced point at themselves.
    assert (source[~replaced] == index[~replaced]).all()


def test_corrupt_rate_015():
    mode, _ = _corrupt(100, 64, rate=0.15)
    assert ((mode > 0).sum(axis=1) == round(0.15 * 64)).all()


def test_patch_corruption_layer_masks_replaces_and_keeps():
    rng = np.random.default_rng(0)
    tokens = rng.normal(size=(64, 16, 8)).astype("float32")
    mode, source = _corrupt(64, 16)
    layer = mpp.PatchCorruption()
    out = np.asarray(layer(tokens, mode, source))
    token = np.asarray(layer.mask_token)[0, 0]
    rows = np.arange(64)[:, None]
    for kind in (mpp.NOT_CORRUPTED, mpp.KEPT):  # unchanged, bit for bit
        np.testing.assert_array_equal(out[mode == kind], tokens[mode == kind])
    np.testing.assert_array_equal(
        out[mode == mpp.MASKED],
        np.broadcast_to(token, out[mode == mpp.MASKED].shape),
    )
    replaced = mode == mpp.REPLACED
    np.testing.assert_array_equal(out[replaced],
                                  tokens[rows, source][replaced])


# --------------------------------------------------------------- targets
def _numpy_colour_classes(images, patch, grid=1, bits=3):
    """Direct computation: per patch (row-major), per cell (row-major), the
    float64 mean of each channel, its bin of 2**bits over [-1, 1]."""
    levels = 2 ** bits
    n, h, w, _ = images.shape
    cell = patch // grid
    out = np.zeros((n, (h // patch) * (w // patch), grid * grid), np.int64)
    for i in range(n):
        for p, (r, c) in enumerate(np.ndindex(h // patch, w // patch)):
            for q, (gr, gc) in enumerate(np.ndindex(grid, grid)):
                y, x = r * patch + gr * cell, c * patch + gc * cell
                mean = images[i, y:y + cell, x:x + cell].astype(
                    np.float64).mean(axis=(0, 1))
                b = [min(int(np.floor((m + 1) / 2 * levels)), levels - 1)
                     for m in mean]
                out[i, p, q] = (b[0] * levels + b[1]) * levels + b[2]
    return out


def test_mean_colour_bins_at_the_edges():
    """Hand-made 4 x 4 patches of an 8 x 8 image in [-1, 1]: constant
    patches on and just below bin edges (k / 4 - 1; 1.0 in the top bin),
    and a patch whose mean lands exactly on an edge."""
    image = np.zeros((8, 8, 3), np.float32)
    image[:4, :4] = [-1.0, 1.0, 0.0]  # bins 0, 7 (1.0 is top), 4
    image[:4, 4:] = [-0.75, -0.25, 0.75]  # exactly on edges: bins 1, 3, 7
    image[4:, :4] = [-0.7501, -0.0001, 0.5]  # just below edges: 0, 3; 6
    image[4:, 4:, 0] = np.tile([-1.0, -0.5], 8).reshape(4, 4)  # mean -0.75
    image[4:, 4:, 1] = 0.999  # bin 7
    image[4:, 4:, 2] = np.tile([-1.0, 1.0], 8).reshape(4, 4)  # mean 0: 4
    got = np.asarray(mpp.colour_targets(image[None], 4))
    expected = [[0 * 64 + 7 * 8 + 4], [1 * 64 + 3 * 8 + 7],
                [0 * 64 + 3 * 8 + 6], [1 * 64 + 7 * 8 + 4]]
    np.testing.assert_array_equal(got[0], expected)
    np.testing.assert_array_equal(got, _numpy_colour_classes(image[None], 4))
    assert got.dtype == np.int32 and got.max() < 512


@pytest.mark.parametrize("grid,patch", [(1, 8), (4, 8), (2, 4)])
def test_colour_targets_equal_numpy_on_random_images(grid, patch):
    rng = np.random.default_rng(grid)
    images = rng.uniform(-1, 1, (3, 16, 24, 3)).astype(np.float32)
    np.testing.assert_array_equal(
        np.asarray(mpp.colour_targets(images, patch, grid_size=grid)),
        _numpy_colour_classes(images, patch, grid),
    )


def test_colour_centres_invert_the_bins_and_pixels_are_row_major():
    classes = np.arange(512)
    centres = np.asarray(mpp.colour_centres(classes))
    np.testing.assert_array_equal(
        np.asarray(mpp.quantise_colours(centres)), classes)
    assert centres.min() == -0.875 and centres.max() == 0.875
    images = np.arange(2 * 8 * 8 * 3, dtype=np.float32).reshape(2, 8, 8, 3)
    pixels = np.asarray(mpp.patch_pixels(images, 4))
    assert pixels.shape == (2, 4, 48)
    np.testing.assert_array_equal(pixels[1, 2],
                                  images[1, 4:, :4].reshape(-1))


def test_bad_options_name_the_fix():
    with pytest.raises(ValueError, match="use one of mean_colour, "
                       "colour_grid, pixels"):
        mpp.check_options("colour")
    with pytest.raises(ValueError, match="does not divide the patch size"):
        mpp.check_options("colour_grid", grid_size=3, stride=8)
    with pytest.raises(ValueError, match="sum <= 1"):
        mpp.check_options("mean_colour", mask_fraction=0.9,
                          random_fraction=0.2)
    config = _mpp_config()
    config.export.enabled = True
    with pytest.raises(ValueError, match="Fine-tune it first"):
        train_lib.train_and_evaluate(config, "/nonexistent/never")
    # An image_size of 0 (the starting model's) is the schema's default
    # size, as for a classifier trained from scratch: here its resize is
    # too small for it, which names the size.
    config = _mpp_config(**{"model.image_size": 0})
    with pytest.raises(UsageError, match=r"resize_size=\d+ is smaller "
                       "than the image size 224"):
        train_lib.train_and_evaluate(config, "/nonexistent/never")


def test_one_patch_an_image_is_refused_before_any_work(tmp_path):
    """keras-vit-train with a patch as large as the image (one patch, no
    other to take its place): one line naming both fields, before the
    data pipeline is built (before, a traceback from inside tf.data);
    the Python API's MppModel refuses it alike."""
    from tests import console

    result = console.run("train", [
        "--config=mpp_digits", f"--workdir={tmp_path / 'run'}",
        "--config.model.patch_size=32", "--config.trainer.total_steps=2"],
        cwd=str(tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "keras-vit-train: error: Masked patch prediction needs at least 2 "
        "patches per image, and this model cuts its images into 1: use a "
        "smaller patch size or a larger image_size (--config.model."
        "patch_size, --config.model.image_size)."], result.stderr
    assert not (tmp_path / "run").exists()
    arch = Architecture.create("Ti/16", image_size=16, num_classes=0)
    with pytest.raises(UsageError, match="cuts its images into 1"):
        mpp.MppModel(arch)


# ----------------------------------------------------------------- model
def test_mpp_model_shares_the_classifier_weight_names():
    model = mpp.create_mpp_model(None, image_size=16, **SIZES)
    classifier = keras_vit.create_model(None, num_classes=10, image_size=16,
                                        **SIZES)
    own = {v.path for v in model.weights}
    shared = {v.path for v in classifier.weights
              if not v.path.startswith("head/")}
    assert own - shared == {"mpp_corruption/mask_token", "mpp_head/kernel",
                            "mpp_head/bias"}
    assert shared <= own
    assert model.output_shape == (None, 16, 512)
    grid = mpp.create_mpp_model(None, image_size=16, target="colour_grid",
                                grid_size=2, pooling="gap", **SIZES)
    assert grid.output_shape == (None, 16, 4 * 512)
    pixels = mpp.create_mpp_model(None, image_size=16, target="pixels",
                                  **SIZES)
    assert pixels.output_shape == (None, 16, 48)


@pytest.mark.parametrize("name", ["mpp_digits", "mpp_pretrain"])
def test_the_mask_token_is_not_weight_decayed(name):
    """The MPP configs leave the [mask] embedding, a learned token as the
    class token is, out of weight decay with it (at any weight decay)."""
    config = test_recipes.load(f"{test_recipes.ROOT}/configs/{name}.py")
    assert "mask_token" in config.optimizer.no_decay
    options = dict(config.optimizer.to_dict(), name="adamw",
                   weight_decay=0.1)
    opt = optim.create_optimizer(mlc.ConfigDict(options),
                                 config.trainer.total_steps,
                                 schedule=config.schedule)
    model = mpp.create_mpp_model(None, image_size=16, **SIZES)
    opt.build(model.trainable_variables)
    kept = {v.path for v in model.trainable_variables
            if not opt._use_weight_decay(v)}
    assert {"mpp_corruption/mask_token", "cls/cls"} <= kept
    assert "mpp_head/kernel" not in kept


def test_mpp_model_with_a_sincos_position_embedding_is_the_classifier():
    """posemb="sincos2d" computes its table from the images' grid; the MPP
    model's encoder, with nothing corrupted, is the classifier's."""
    model = mpp.create_mpp_model(None, image_size=16, posemb="sincos2d",
                                 **SIZES)
    classifier = keras_vit.create_model(
        None, num_classes=0, image_size=16, posemb="sincos2d",
        all_tokens=True, **SIZES)
    own = {v.path: v for v in model.weights}
    for v in classifier.weights:
        own[v.path].assign(v)
    features = _batch()
    features["mpp_mode"] = np.zeros_like(features["mpp_mode"])
    ours = keras.Model(model.inputs, model.get_layer("Transformer").output)
    theirs = keras.Model(classifier.input,
                         classifier.get_layer("Transformer").output)
    tokens = ours(features).numpy()
    assert tokens.shape == (8, 17, 32)
    np.testing.assert_allclose(
        tokens, theirs(features["images"]).numpy(), atol=1e-5)


def _batch(n=8, size=16, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.uniform(-1, 1, (n, size, size, 3)).astype(np.float32)
    mode, source = _corrupt(n, (size // 4) ** 2, seed=seed)
    return {"images": images, "mpp_mode": mode, "mpp_source": source}


def _trainer(target="mean_colour", strategy=None, accumulation=1,
             batch=8, dtype="float32"):
    strategy = strategy or tf.distribute.get_strategy()
    keras.utils.set_random_seed(3)
    with strategy.scope(), build.dtype_policy(dtype):
        model = mpp.create_mpp_model(None, image_size=16, target=target,
                                     grid_size=2, **SIZES)
        optimizer = optim.create_optimizer(
            mlc.ConfigDict(dict(name="adam", lr=3e-3)), 100)
    return MppTrainer(model, optimizer, strategy, global_batch_size=batch,
                      accumulation_steps=accumulation, grad_clip_norm=1.0)


@pytest.mark.parametrize("target", mpp.TARGETS)
def test_loss_counts_the_corrupted_patches_only(target):
    trainer = _trainer(target)
    features = _batch()
    outputs = trainer.model(features).numpy()
    losses, right, _ = (t.numpy() for t in trainer.objective(
        features, tf.constant(outputs)))
    corrupted = features["mpp_mode"] > 0
    changed = outputs + 5.0 * (~corrupted)[..., None]  # uncorrupted only
    again = trainer.objective(features, tf.constant(changed))
    np.testing.assert_allclose(again[0].numpy(), losses, rtol=1e-6)
    np.testing.assert_array_equal(again[1].numpy(), right)
    # The value: NumPy's mean over the corrupted patches.
    images = features["images"]
    if target == "pixels":
        targets = np.asarray(mpp.patch_pixels(images, 4))
        per_patch = ((outputs - targets) ** 2).mean(-1)
    else:
        grid = 2 if target == "colour_grid" else 1
        targets = _numpy_colour_classes(images, 4, grid)
        logits = outputs.reshape(*outputs.shape[:2], grid * grid, 512)
        logits = logits.astype(np.float64)
        log_z = np.log(np.exp(logits).sum(-1))
        picked = np.take_along_axis(logits, targets[..., None], -1)[..., 0]
        per_patch = (log_z - picked).mean(-1)
    expected = (per_patch * corrupted).sum(-1) / corrupted.sum(-1)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)


def _fit(trainer, features, steps):
    ds = tf.data.Dataset.from_tensors(
        (features, np.zeros(len(features["images"]), np.int32))).repeat()
    iterator = iter(trainer.strategy.experimental_distribute_dataset(ds))
    return trainer.train(iterator, steps)


@pytest.mark.parametrize("target", mpp.TARGETS)
def test_mpp_training_steps_reduce_the_loss(target):
    trainer = _trainer(target)
    features = _batch()
    before = trainer.objective(features, trainer.model(features))[0]
    _fit(trainer, features, 20)
    after = trainer.objective(features, trainer.model(features))[0]
    assert float(tf.reduce_mean(after)) < 0.7 * float(tf.reduce_mean(before))


@pytest.mark.parametrize("target", mpp.TARGETS)
def test_evaluation_ranks_top5_of_colour_classes_only(target, tmp_path,
                                                      caplog):
    """A colour-class target reports its top-5 accuracy; predicting
    pixels has no classes to rank: top5 is None in the results, left out
    of the log line and the summaries, null in metrics.json."""
    trainer = _trainer(target)
    features = _batch()
    n = len(features["images"])
    data = tf.data.Dataset.from_tensors(
        (features, np.zeros(n, np.int32), np.ones(n, np.float32)))
    results = trainer.evaluate(data)
    # (absl's level too: a command run earlier in this process set it.)
    caplog.set_level(logging.INFO, logger="absl")
    writers = {"eval": tf.summary.create_file_writer(str(tmp_path))}
    reporting.log_eval(writers, 1, "test", results, trainer.accuracy_name)
    metrics = reporting.final_metrics("test", "test", results,
                                      trainer.accuracy_name)
    line = [r.getMessage() for r in caplog.records
            if r.getMessage().startswith("eval test")][-1]
    if target == "pixels":
        assert results["top5_accuracy"] is None and "top5" not in line
        assert json.loads(json.dumps(metrics))[
            "test_top5_mpp_accuracy"] is None
    else:
        assert 0 <= results["accuracy"] <= results["top5_accuracy"] <= 1
        assert f"top5 {results['top5_accuracy']:.4f}" in line


def test_mirrored_and_accumulated_steps_equal_one_device():
    features = _batch(n=8)
    one = _trainer()
    _fit(one, features, 3)
    two = _trainer(strategy=two_cpu_mirrored())
    _fit(two, features, 3)
    acc = _trainer(accumulation=2)
    _fit(acc, features, 3)
    for other in (two, acc):
        for a, b in zip(one.model.weights, other.model.weights):
            np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2e-5)


def test_bfloat16_step_is_finite_and_predictions_float32():
    trainer = _trainer(dtype="bfloat16")
    metrics = _fit(trainer, _batch(), 2)
    assert np.isfinite(metrics["loss"])
    assert trainer.model(_batch()).dtype == "float32"


# ---------------------------------------------------- runs and transfer
def _mpp_config(**overrides):
    return tiny.digits_config({
        "mpp.enabled": True, "total_steps": 30, "steps_per_loop": 10,
        "log_every_steps": 10, "eval_every_steps": 20,
        "checkpoint_every_steps": 30, "optimizer.warmup_steps": 3,
        "optimizer.lr": 3e-3, **overrides,
    })


@pytest.fixture(scope="module")
def mpp_run(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("mpp_run"))
    metrics = train_lib.train_and_evaluate(_mpp_config(), workdir)
    keras.backend.clear_session()
    return workdir, metrics


def _summaries(workdir, split):
    tags = {}
    for path in tf.io.gfile.glob(os.path.join(workdir, split, "*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for v in event.summary.value:
                tags.setdefault(v.tag, []).append(
                    float(tf.make_ndarray(v.tensor)))
    return tags


def test_mpp_run_trains_logs_mpp_accuracy_and_writes_the_encoder(mpp_run):
    workdir, metrics = mpp_run
    train = _summaries(workdir, "train")
    assert len(train["loss"]) == 3 and train["loss"][-1] < train["loss"][0]
    assert len(train["mpp_accuracy"]) == 3
    assert set(_summaries(workdir, "eval")) >= {"mpp_accuracy", "loss"}
    with open(os.path.join(workdir, "metrics.json")) as f:
        saved = json.load(f)
    assert saved["test_mpp_accuracy"] == metrics["test_mpp_accuracy"]
    assert 0.0 < metrics["test_mpp_accuracy"] <= 1.0
    arrays = checkpoint_io.read_npz(metrics["encoder_npz"])
    classifier = keras_vit.create_model(
        None, num_classes=10, image_size=32, patch_size=8, hidden_size=32,
        num_layers=1, num_heads=4, mlp_dim=64)
    expected = set(weights.model_arrays(classifier)) - {"head/kernel",
                                                        "head/bias"}
    assert set(arrays) == expected


def test_mpp_resume_after_preemption_matches_uninterrupted_run(
        mpp_run, tmp_path, monkeypatch):

    _, straight = mpp_run
    workdir = str(tmp_path / "run")
    with monkeypatch.context() as m:
        m.setattr(loop, "_Preemption", tiny.StopAfterFirstLoop)
        stopped = train_lib.train_and_evaluate(_mpp_config(), workdir)
    assert stopped["preempted"] and 0 < stopped["step"] < 30
    resumed = train_lib.train_and_evaluate(_mpp_config(), workdir)
    assert resumed["steps_this_run"] == 30 - stopped["step"]
    assert resumed["test_mpp_accuracy"] == straight["test_mpp_accuracy"]
    assert resumed["test_loss"] == pytest.approx(straight["test_loss"],
                                                 rel=1e-6)
    # The workdir holds an MPP run: a classifier config is refused.
    with pytest.raises(train_lib.TrainingError, match="different model"):
        train_lib.train_and_evaluate(
            tiny.digits_config({"schedule.warmup_steps": 0}, total_steps=4),
            workdir)


def test_mpp_encoder_initialises_a_classifier_with_equal_weights(mpp_run):
    workdir, metrics = mpp_run
    trained = {v.path: v.numpy() for v in wd.restore_model(workdir).weights}
    for source in (loader.WorkdirSource(workdir),
                   loader.NpzSource(metrics["encoder_npz"])):
        classifier = keras_vit.create_model(
            None, num_classes=10, image_size=32, patch_size=8,
            hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64,
            head_zero_init=False)
        report = loader.initialise(classifier, source)
        assert report.head_initialized
        for v in classifier.weights:
            if v.path.startswith("head/"):
                assert not v.numpy().any()  # dropped: starts at zero
            else:
                np.testing.assert_array_equal(v.numpy(), trained[v.path])
    # Another resolution: the position embeddings are resized.
    bigger = keras_vit.create_model(
        None, num_classes=10, image_size=48, patch_size=8, hidden_size=32,
        num_layers=1, num_heads=4, mlp_dim=64)
    report = loader.initialise(bigger, loader.WorkdirSource(workdir))
    assert report.posemb_resized == ((4, 4), (6, 6))
    # Every tool's model: the encoder as a features model.
    features = loader.load_model(loader.WorkdirSource(workdir))
    assert not mpp.is_mpp_model(features)
    assert features.output_shape == (None, 32)
    assert loader.describe_source(
        loader.WorkdirSource(workdir)).num_classes == 0
    # VTAB's backbone file: the same arrays as the run's encoder.npz.
    backbone = loader.write_backbone(loader.WorkdirSource(workdir),
                                     os.path.join(workdir, "..", "bb.npz"))
    ours = checkpoint_io.read_npz(metrics["encoder_npz"])
    theirs = loader.source_arrays(backbone)
    assert set(ours) == set(theirs)
    for key, value in ours.items():
        np.testing.assert_array_equal(value, theirs[key])


def test_fine_tuning_from_mpp_with_few_labels(mpp_run, tmp_path):
    workdir, _ = mpp_run
    config = tiny.digits_config({
        "init.model": workdir, "train_examples_per_class": 2,
        "total_steps": 10, "steps_per_loop": 10, "log_every_steps": 10,
        "eval_every_steps": 0, "checkpoint_every_steps": 0,
        "optimizer.warmup_steps": 2,
    })
    metrics = train_lib.train_and_evaluate(config, str(tmp_path))
    assert metrics["test_examples"] == 360 and metrics["steps"] == 10
    tuned = wd.restore_model(str(tmp_path))
    assert tuned.output_shape == (None, 10)


def test_examples_per_class_is_a_seeded_draw(tmp_path):
    y = sources.digits_split("train")[1]
    first = sources.examples_per_class(y, 3, seed=0)
    assert len(first) == 30 and np.bincount(y[first]).tolist() == [3] * 10
    np.testing.assert_array_equal(first,
                                  sources.examples_per_class(y, 3, seed=0))
    assert set(first) != set(sources.examples_per_class(y, 3, seed=1))
    config = tiny.digits_config({"train_examples_per_class": 3,
                                 "pp.resize_size": None, "batch_size": 30})
    ds = input_pipeline.train_dataset(*tiny.pipeline(config), 30).take(20)
    images = np.concatenate([b[0].numpy() for b in ds])
    assert len({im.tobytes() for im in images}) == 30  # the 30, repeated
    config.input.dataset = "mnist"
    with pytest.raises(ValueError, match="slice train_split instead"):
        input_pipeline.train_dataset(*tiny.pipeline(config), 30)


def test_pipeline_draws_the_corruption_seeded():
    config = _mpp_config()
    data = tiny.pipeline(config)
    features, labels = next(iter(input_pipeline.train_dataset(*data, 32)))
    assert set(features) == set(mpp.INPUT_NAMES)
    assert features["mpp_mode"].shape == (32, 16)
    assert ((features["mpp_mode"].numpy() > 0).sum(1) == 8).all()
    again, _ = next(iter(input_pipeline.train_dataset(*data, 32)))
    np.testing.assert_array_equal(again["mpp_mode"], features["mpp_mode"])
    second, _ = list(input_pipeline.train_dataset(*data, 32).take(2))[1]
    assert (second["mpp_mode"].numpy() != features["mpp_mode"].numpy()).any()
    evals = list(input_pipeline.eval_dataset(*data, "test", 128))
    assert len(evals) == 3 and set(evals[0][0]) == set(mpp.INPUT_NAMES)
    # Every evaluation draws the same corruption, and not the first
    # training batches' (same seed and batch index would give it).
    again = list(input_pipeline.eval_dataset(*data, "test", 128))
    np.testing.assert_array_equal(again[0][0]["mpp_mode"],
                                  evals[0][0]["mpp_mode"])
    evals32 = next(iter(input_pipeline.eval_dataset(*data, "test", 32)))[0]
    assert (evals32["mpp_mode"].numpy() != features["mpp_mode"].numpy()).any()
    # Each image its own corruption, whatever the evaluation's batch size
    # (accumulation_steps divides it): the scores compare across runs.
    for name in ("mpp_mode", "mpp_source"):
        by_128 = np.concatenate([b[0][name].numpy() for b in evals])
        by_48 = np.concatenate([b[0][name].numpy() for b in
                                input_pipeline.eval_dataset(*data, "test",
                                                            48)])
        size = min(len(by_128), len(by_48))  # (each padded to its batch)
        np.testing.assert_array_equal(by_48[:size], by_128[:size])
        np.testing.assert_array_equal(evals32[name], by_128[:32])
    assert len({m.tobytes() for m in evals32["mpp_mode"].numpy()}) > 1


def test_analysis_draws_the_mpp_predictions(mpp_run, tmp_path):
    workdir, _ = mpp_run
    out = str(tmp_path / "analysis")
    assert analysis_command.main(["keras-vit-analysis", "--model", workdir,
                                  "--digits", "4", "--output_dir", out]) == 0
    assert os.path.getsize(os.path.join(out, mpp_figure.FIGURE)) > 1000
    assert os.path.exists(os.path.join(out, "attention_rollout.png"))
    images, _ = analysis_inputs.digits_images(4, (32, 32))
    pictures = mpp_figure.predict(wd.restore_model(workdir), images)
    corrupted = pictures.mode > 0
    assert (corrupted.sum(1) == 8).all()
    # Uncorrupted patches show the input; corrupted ones a bin's centre.
    patches = mpp_figure._to_patches(pictures.predictions, 8)
    inputs = mpp_figure._to_patches(images, 8)
    np.testing.assert_array_equal(patches[~corrupted], inputs[~corrupted])
    centres = np.asarray(mpp.colour_centres(np.arange(512)))
    colours = patches[corrupted][:, 0, 0]
    assert all(np.abs(centres - c).sum(1).min() < 1e-6 for c in colours)


def test_mpp_pictures_read_the_model_by_its_own_target():
    """mpp_figure.predict without options reads a colour_grid model by
    its own grid and bits (the config's defaults would decode the 4
    cells' logits as one patch's, classes past 511); options that
    differ from the model's are refused by name."""
    keras.utils.set_random_seed(0)
    model = mpp.create_mpp_model(None, image_size=16, target="colour_grid",
                                 grid_size=2, **SIZES)
    images = np.random.default_rng(0).uniform(-1, 1, (3, 16, 16, 3))
    images = images.astype(np.float32)
    pictures = mpp_figure.predict(model, images)
    named = mpp_figure.predict(model, images, target="colour_grid",
                               grid_size=2, colour_bits=3)
    for field in ("predictions", "targets", "accuracy", "mode"):
        np.testing.assert_array_equal(getattr(pictures, field),
                                      getattr(named, field))
    with pytest.raises(ValueError, match=r"grid_size=4 \(the model's: 2\)"
                       r".*leave them out"):
        mpp_figure.predict(model, images, grid_size=4)


# --------------------------------------------------------------- recipes
def test_mpp_pretrain_recipe_has_the_paper_numbers_and_runs_shrunk(
        tmp_path):
    import tensorflow_datasets as tfds

    from tests.test_recipes import ROOT, load, shrink

    config = load(os.path.join(ROOT, "configs", "mpp_pretrain.py"), "B/16")
    mpp_options = config.objective.mpp
    assert mpp_options.enabled and mpp_options.target == "mean_colour"
    assert (mpp_options.corrupt_rate, mpp_options.mask_fraction,
            mpp_options.random_fraction) == (0.5, 0.8, 0.1)
    opt, schedule = config.optimizer, config.schedule
    assert (opt.name, schedule.lr, schedule.warmup_steps,
            schedule.decay_type) == ("adam", 2e-4, 10_000, "cosine")
    # 100k steps on ImageNet (the paper's 1M were on JFT).
    assert (config.input.batch_size, config.trainer.total_steps) == (
        4096, 100_000)
    assert config.trainer.dtype == "bfloat16" and config.model.variant == "B/16"
    config = shrink(config)
    with tfds.testing.mock_data(num_examples=8,
                                policy=tfds.testing.MockPolicy.USE_CODE):
        metrics = train_lib.train_and_evaluate(config, str(tmp_path / "run"))
    assert metrics["steps"] == 2 and np.isfinite(metrics["test_loss"])
    assert os.path.exists(metrics["encoder_npz"])


@pytest.mark.slow
def test_mpp_model_keras_file_round_trips_and_runs_on_jax(tmp_path):
    """The .keras file reloads with identical outputs, on TensorFlow and
    on the JAX backend (the model core is portable Keras 3)."""
    import subprocess
    import sys
    import textwrap

    keras.utils.set_random_seed(0)
    model = mpp.create_mpp_model(None, image_size=16, **SIZES)
    features = _batch(n=2)
    expected = model(features).numpy()
    path = str(tmp_path / "mpp.keras")
    model.save(path)
    again = keras.models.load_model(path)
    np.testing.assert_array_equal(again(features).numpy(), expected)
    # The file says what the model is: its architecture and its target.
    assert isinstance(again, mpp.MppModel)
    assert again.architecture == model.architecture
    assert (again.target, again.colour_bits, again.grid_size) == (
        "mean_colour", 3, 4)
    assert again.architecture.all_tokens and not again.architecture.num_classes
    np.savez(tmp_path / "io.npz", expected=expected, **features)
    pytest.importorskip("jax")
    script = textwrap.dedent(f"""
        import numpy as np, keras
        from keras_vit import mpp
        assert keras.backend.backend() == "jax"
        io = dict(np.load({str(tmp_path / "io.npz")!r}))
        expected = io.pop("expected")
        model = keras.models.load_model({path!r})
        np.testing.assert_allclose(np.asarray(model(io)), expected,
                                   rtol=1e-5, atol=1e-5)
        targets = np.asarray(mpp.colour_targets(io["images"], 4))
        assert targets.shape == (2, 16, 1)
        print("JAX_OK", mpp.encoder_model(model).output_shape)
        """)
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", script], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "JAX_OK (None, 32)" in result.stdout

"""Tests for keras_vit.analysis: exact numerics, figures, the command line."""

import itertools
import json
import math
import os
import re
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from PIL import Image, PngImagePlugin

import keras_vit
from keras_vit.analysis import core, extract, inputs, plots
from keras_vit.analysis import report as cli
from keras_vit.commands import analysis as command
from keras_vit.commands import flags as cli_flags
from keras_vit.errors import UsageError
from tests.reliability_cases import check_says, covers

PATCH = 4.0


def _layout(grid=(3, 5), prefix=1, pixels=(PATCH, PATCH)):
    return core.TokenLayout(
        grid=grid, patch_pixels=pixels, num_prefix_tokens=prefix
    )


def _brute_force_mean_distance(rows, cols, patch):
    cells = list(itertools.product(range(rows), range(cols)))
    total = sum(
        math.hypot((r1 - r2) * patch, (c1 - c2) * patch)
        for (r1, c1), (r2, c2) in itertools.product(cells, cells)
    )
    return total / len(cells) ** 2


# --- mean attention distance -------------------------------------------


@pytest.mark.parametrize("prefix", [0, 1])
def test_uniform_attention_gives_mean_pairwise_distance(prefix):
    layout = _layout(prefix=prefix)
    t = layout.num_tokens
    uniform = np.full((2, 3, t, t), 1.0 / t)
    got = core.mean_attention_distance([uniform, uniform], layout)
    expected = _brute_force_mean_distance(3, 5, PATCH)
    assert got.shape == (2, 3)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert core.uniform_attention_distance(layout) == pytest.approx(
        expected, rel=1e-12
    )


def test_identity_attention_gives_zero_distance():
    layout = _layout()
    eye = np.broadcast_to(np.eye(layout.num_tokens), (2, 4, 16, 16))
    np.testing.assert_array_equal(
        core.mean_attention_distance([eye], layout), np.zeros((1, 4))
    )


def _right_neighbour_attention(layout, cls_weight=0.0):
    # Every patch attends to the patch to its right (the last column to its
    # left): always exactly one patch width away.
    rows, cols = layout.grid
    p = layout.num_prefix_tokens
    weights = np.zeros((1, 1, layout.num_tokens, layout.num_tokens))
    weights[0, 0, :p, :] = 1.0 / layout.num_tokens
    for r, c in itertools.product(range(rows), range(cols)):
        target = c + 1 if c + 1 < cols else c - 1
        weights[0, 0, p + r * cols + c, p + r * cols + target] = 1 - cls_weight
        if p:
            weights[0, 0, p + r * cols + c, 0] = cls_weight
    return weights


def test_neighbour_attention_gives_patch_size():
    layout = _layout(prefix=0)
    got = core.mean_attention_distance(
        [_right_neighbour_attention(layout)], layout
    )
    np.testing.assert_allclose(got, [[PATCH]], rtol=1e-12)


def test_class_token_weight_is_excluded_and_renormalised():
    # Half the weight on the class token, half on the neighbour: the
    # distance over patch keys is still one patch, not half of one.
    layout = _layout(prefix=1)
    weights = _right_neighbour_attention(layout, cls_weight=0.5)
    got = core.mean_attention_distance([weights], layout)
    np.testing.assert_allclose(got, [[PATCH]], rtol=1e-12)


def test_attention_shape_mismatch_names_the_fix():
    with pytest.raises(ValueError, match="attention_model"):
        core.mean_attention_distance([np.ones((1, 1, 5, 5))], _layout())


# --- attention rollout -------------------------------------------------


def test_rollout_of_identity_is_identity():
    eye = np.broadcast_to(np.eye(6), (2, 3, 6, 6))
    np.testing.assert_array_equal(
        core.attention_rollout([eye, eye, eye]),
        np.broadcast_to(np.eye(6), (2, 6, 6)),
    )


HEADS_1 = np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [0.0, 1.0]]])
HEADS_2 = np.array([[[0.0, 1.0], [1.0, 0.0]]])


def test_rollout_two_layers_by_hand():
    # Layer 1: head mean [[.5, .5], [0, 1]]; (A + I) / 2 = [[.75, .25],
    # [0, 1]]. Layer 2: [[0, 1], [1, 0]]; (A + I) / 2 = [[.5, .5], [.5, .5]].
    # Rollout = R2 @ R1 = [[.375, .625], [.375, .625]].
    got = core.attention_rollout([HEADS_1[None], HEADS_2[None]])
    np.testing.assert_allclose(got, [[[0.375, 0.625], [0.375, 0.625]]])
    # Without residuals: A2 @ A1 = [[0, 1], [.5, .5]].
    got = core.attention_rollout([HEADS_1[None], HEADS_2[None]], residual=False)
    np.testing.assert_allclose(got, [[[0.0, 1.0], [0.5, 0.5]]])


def test_rollout_patch_maps_class_row_and_gap_mean():
    rollout = np.arange(2 * 7 * 7, dtype=float).reshape(2, 7, 7)
    token = core.rollout_patch_maps(rollout, _layout((2, 3), prefix=1))
    np.testing.assert_array_equal(token, rollout[:, 0, 1:].reshape(2, 2, 3))
    rollout = rollout[:, 1:, 1:]
    gap = core.rollout_patch_maps(rollout, _layout((2, 3), prefix=0))
    np.testing.assert_allclose(gap, rollout.mean(axis=1).reshape(2, 2, 3))


@pytest.mark.parametrize("size", [(12, 20), (7, 11)])
def test_upsample_matches_tf_bilinear(size):
    maps = np.random.default_rng(0).normal(size=(2, 3, 5))
    expected = tf.image.resize(maps[..., None], size, method="bilinear")
    np.testing.assert_allclose(
        core.upsample_bilinear(maps, size), expected.numpy()[..., 0], atol=1e-5
    )


# --- position embeddings and patch filters ------------------------------


def test_position_similarity_is_cosine_without_class_token():
    from sklearn.metrics.pairwise import cosine_similarity

    table = np.random.default_rng(1).normal(size=(1, 1 + 12, 8))
    got = core.position_embedding_similarity(table, num_prefix_tokens=1)
    assert got.shape == (12, 12)
    np.testing.assert_allclose(np.diag(got), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(got, got.T)
    np.testing.assert_allclose(got, cosine_similarity(table[0, 1:]), atol=1e-12)


def test_similarity_mosaic_non_square_grid():
    grid = (2, 3)
    sim = np.arange(36, dtype=float).reshape(6, 6)
    mosaic = core.similarity_mosaic(sim, grid, gap=1)
    assert mosaic.shape == (2 * 3 - 1, 3 * 4 - 1)
    for index in range(6):
        r, c = divmod(index, 3)
        tile = mosaic[r * 3 : r * 3 + 2, c * 4 : c * 4 + 3]
        np.testing.assert_array_equal(tile, sim[index].reshape(2, 3))
    assert np.isnan(mosaic[2]).all() and np.isnan(mosaic[:, 3]).all()
    assert np.isnan(mosaic).sum() == mosaic.size - 36


def test_patch_pca_orthonormal_and_matches_sklearn():
    from sklearn.decomposition import PCA

    kernel = np.random.default_rng(2).normal(size=(4, 4, 3, 40))
    components, explained = core.patch_embedding_pca(kernel, 10)
    assert components.shape == (10, 4, 4, 3)
    flat = components.reshape(10, -1)
    np.testing.assert_allclose(flat @ flat.T, np.eye(10), atol=1e-10)
    assert np.all(np.diff(explained) <= 0)
    reference = PCA().fit(kernel.reshape(48, 40).T)
    np.testing.assert_allclose(
        explained, reference.explained_variance_ratio_[:10], rtol=1e-8
    )
    # Same directions up to sign.
    overlap = np.abs(np.sum(flat * reference.components_[:10], axis=1))
    np.testing.assert_allclose(overlap, 1.0, atol=1e-8)
    # 40 filters centred on their mean span 39 directions: no 40th
    # component (it would explain nothing, an arbitrary direction).
    _, everything = core.patch_embedding_pca(kernel, 100)
    assert len(everything) == 39 and everything.sum() == pytest.approx(1.0)
    assert reference.explained_variance_ratio_[39] < 1e-12
    assert everything.min() > 1e-6


# --- the model side ------------------------------------------------------


def _tiny(pooling="token", image_size=(32, 48)):
    return keras_vit.create_model(
        None,
        num_classes=5,
        image_size=image_size,
        pooling=pooling,
        patch_size=8,
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        mlp_dim=64,
        head_zero_init=False,
    )


@pytest.fixture(scope="module")
def tiny_model():
    keras.utils.set_random_seed(0)
    return _tiny()


@pytest.fixture(scope="module")
def images():
    return (
        np.random.default_rng(3)
        .uniform(-1, 1, (3, 32, 48, 3))
        .astype("float32")
    )


def test_attention_model_shares_weights_and_outputs(tiny_model, images):
    attention = keras_vit.attention_model(tiny_model)
    assert attention.count_params() == tiny_model.count_params()
    output, weights = attention(images)
    np.testing.assert_allclose(
        output.numpy(), tiny_model(images).numpy(), rtol=1e-5, atol=1e-6
    )
    assert len(weights) == 2
    for w in weights:
        assert w.shape == (3, 2, 1 + 4 * 6, 1 + 4 * 6)
        np.testing.assert_allclose(w.numpy().sum(-1), 1.0, rtol=1e-5)


def test_token_layout_non_square_and_gap(tiny_model):
    layout = extract.token_layout(tiny_model)
    assert layout == core.TokenLayout((4, 6), (8.0, 8.0), 1)
    gap = extract.token_layout(_tiny("gap", image_size=16))
    assert gap == core.TokenLayout((2, 2), (8.0, 8.0), 0)


def test_attention_stats_over_batches(tiny_model, images):
    layout = extract.token_layout(tiny_model)
    _, weights = keras_vit.attention_model(tiny_model)(images)
    weights = [w.numpy() for w in weights]
    one = extract.attention_stats(tiny_model, images, batch_size=1)
    two = extract.attention_stats(tiny_model, images, batch_size=2)
    np.testing.assert_allclose(
        one.mean_distance,
        core.mean_attention_distance(weights, layout),
        rtol=1e-5,
    )
    np.testing.assert_allclose(two.mean_distance, one.mean_distance, rtol=1e-6)
    maps = core.rollout_patch_maps(core.attention_rollout(weights), layout)
    np.testing.assert_allclose(one.rollout_maps, maps, rtol=1e-5)
    np.testing.assert_allclose(
        one.outputs, tiny_model(images).numpy(), rtol=1e-5, atol=1e-6
    )
    with pytest.raises(ValueError, match="preprocess_eval"):
        extract.attention_stats(tiny_model, images[:, :16])


def test_images_outside_the_input_range_are_refused(tiny_model, images):
    """Pixels of 0 to 255 (a PIL image as it is), or not finite: one
    UsageError naming the range and the preprocessing, at the first
    batch that holds one, not figures of plausible, wrong numbers."""
    raw = (images + 1.0) * 127.5
    with pytest.raises(UsageError, match=r"from index 0 hold values in "
                       r"\[.*\]; the model takes pixels in \[-1, 1\]: "
                       r"preprocess them .*preprocess_eval"):
        extract.attention_stats(tiny_model, raw)
    broken = images.copy()
    broken[-1, 0, 0, 0] = np.nan
    with pytest.raises(UsageError, match=f"from index {len(images) - 1} "):
        extract.attention_stats(tiny_model, broken, batch_size=1)


# --- figures --------------------------------------------------------------


def _assert_png(path, min_bytes=5000):
    assert os.path.getsize(path) > min_bytes
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert min(image.size) > 100


def test_figures_are_written(tmp_path, images):
    rng = np.random.default_rng(4)
    layout = _layout((4, 6), prefix=1, pixels=(8.0, 8.0))
    _assert_png(
        plots.plot_attention_rollout(
            images, rng.uniform(size=(3, 4, 6)), str(tmp_path / "r.png")
        )
    )
    _assert_png(
        plots.plot_mean_attention_distance(
            rng.uniform(0, 20, (3, 2)),
            str(tmp_path / "d.png"),
            uniform_distance=core.uniform_attention_distance(layout),
        )
    )
    sim = core.position_embedding_similarity(rng.normal(size=(25, 8)), 1)
    _assert_png(
        plots.plot_position_similarity(sim, (4, 6), str(tmp_path / "s.png"))
    )
    comps, explained = core.patch_embedding_pca(
        rng.normal(size=(4, 4, 3, 32)), 28
    )
    _assert_png(
        plots.plot_patch_embedding_pca(
            comps, explained, str(tmp_path / "p.png")
        )
    )
    with pytest.raises(ValueError, match="hybrid"):
        plots.plot_patch_embedding_pca(
            np.zeros((2, 1, 1, 64)), explained[:2], str(tmp_path / "x.png")
        )
    assert sorted(os.listdir(tmp_path)) == ["d.png", "p.png", "r.png", "s.png"]
    # A title in a script the font lacks: drawn, without matplotlib's
    # notice per glyph.
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plots.plot_attention_rollout(
            images, rng.uniform(size=(3, 4, 6)), str(tmp_path / "cjk.png"),
            titles=["日本", "a", "b"])
    assert not [w for w in caught if "Glyph" in str(w.message)]


def test_the_rollout_title_names_the_tokens_it_follows(images, tmp_path,
                                                      monkeypatch):
    """The class token's row, or (global average pooling: no class token)
    the mean over all tokens' rows, as the pooled output is."""
    titles = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: titles.append(
        fig._suptitle.get_text()))
    maps = np.random.default_rng(0).uniform(size=(3, 4, 6))
    for class_token in (True, False):
        plots.plot_attention_rollout(images, maps, str(tmp_path / "r.png"),
                                     class_token=class_token)
    assert titles == [
        "Attention from the class token to the input (attention rollout)",
        "Attention from all tokens to the input, averaged as the pooled "
        "output is (attention rollout)"]


# --- command line -------------------------------------------------------


def _random_photos(folder, count, shape, seed):
    """`folder` made, holding `count` random RGB PNGs 0.png, 1.png, ...
    of `shape` (height, width)."""
    folder.mkdir()
    rng = np.random.default_rng(seed)
    for i in range(count):
        Image.fromarray(rng.integers(0, 255, (*shape, 3), np.uint8)).save(
            folder / f"{i}.png")
    return folder


@pytest.fixture(scope="module")
def saved_model(tiny_model, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("model") / "tiny.keras")
    tiny_model.save(path)
    return path


def test_cli_end_to_end_with_digits(saved_model, tiny_model, tmp_path, capsys):
    out = str(tmp_path / "analysis")
    assert (
        command.main(["keras-vit-analysis", "--model", saved_model,
                      "--digits", "4", "--output_dir", out])
        == 0
    )
    for name in cli.FIGURES.values():
        _assert_png(os.path.join(out, name))
    with open(os.path.join(out, cli.JSON_NAME)) as f:
        data = json.load(f)
    assert set(data["figures"]) == set(cli.FIGURES)
    assert len(data["images"]) == 4
    assert data["layout"] == {
        "grid": [4, 6],
        "patch_pixels": [8.0, 8.0],
        "class_token": True,
    }
    # The numbers are those of the library on the same inputs.
    digits, _ = inputs.digits_images(4, (32, 48))
    stats = extract.attention_stats(tiny_model, digits)
    np.testing.assert_allclose(
        data["mean_attention_distance"]["pixels"],
        stats.mean_distance,
        atol=1e-4,
    )
    np.testing.assert_allclose(
        data["images"][2]["rollout_map"], stats.rollout_maps[2], atol=1e-5
    )
    assert data["images"][0]["predicted_class"] == int(
        stats.outputs[0].argmax()
    )
    assert len(data["patch_embedding_pca"]["explained_variance_ratio"]) == 28
    assert np.shape(data["position_embedding_similarity"]["matrix"]) == (24, 24)
    assert out in capsys.readouterr().out


def test_image_files_are_read_a_batch_at_a_time(tiny_model, tmp_path,
                                                monkeypatch):
    # A folder's images are decoded once to check them, then made again
    # one batch at a time: the statistics equal those of the whole stack,
    # and no batch holds more than batch_size images.
    folder = _random_photos(tmp_path / "imgs", 5, (30, 40), seed=0)
    files, names = inputs.load_images([str(folder)], (32, 48))
    assert isinstance(files, inputs.ImageFiles) and len(names) == 5
    stacked = files[:]
    assert stacked.shape == files.shape == (5, 32, 48, 3)
    np.testing.assert_array_equal(files[3], stacked[3])
    sizes = []
    read = inputs.ImageFiles.__getitem__
    monkeypatch.setattr(inputs.ImageFiles, "__getitem__", lambda self, i: (
        sizes.append(len(read(self, i))) or read(self, i)))
    lazy = extract.attention_stats(tiny_model, files, batch_size=2)
    whole = extract.attention_stats(tiny_model, stacked, batch_size=2)
    assert sizes == [2, 2, 1]
    np.testing.assert_allclose(lazy.rollout_maps, whole.rollout_maps)
    np.testing.assert_allclose(lazy.outputs, whole.outputs)


def test_remote_image_folders_are_walked_as_local_ones(tmp_path):
    """A folder at a tf.io.gfile URL (ram://, standing for gs://) is read
    with its sub-folders (hidden ones skipped), as a local one is."""
    local = _random_photos(tmp_path / "imgs", 3, (30, 40), seed=1)
    remote = "ram://analysis_photos"
    # 0.png at the top (and in a hidden folder), 1.png and 2.png in cls/.
    for where, name in [("", "0.png"), (".hidden/", "0.png"),
                        ("cls/", "1.png"), ("cls/", "2.png")]:
        tf.io.gfile.makedirs(f"{remote}/{where}")
        tf.io.gfile.copy(str(local / name), f"{remote}/{where}{name}",
                         overwrite=True)
    want, _ = inputs.load_images([str(local)], (32, 48))
    got, names = inputs.load_images([remote], (32, 48))
    assert names == ["0.png", "cls/1.png", "cls/2.png"]
    np.testing.assert_allclose(got[:], want[:], atol=1e-6)
    with pytest.raises(keras_vit.errors.UsageError, match="web addresses"):
        inputs.load_images(["http://example.com/a.png"], (32, 32))


def test_load_images_files_and_folders(tmp_path, capsys):
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("L", (20, 10), 255).save(folder / "a.png")
    Image.new("RGB", (50, 60), (0, 0, 0)).save(folder / "b.jpg")
    (folder / "notes.txt").write_text("not an image")
    images, names = inputs.load_images([str(folder)], (32, 48))
    assert names == ["a.png", "b.jpg"]
    assert images.shape == (2, 32, 48, 3)
    np.testing.assert_allclose(images[0], 1.0)
    np.testing.assert_allclose(images[1], -1.0, atol=0.02)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png")
    with pytest.raises(keras_vit.errors.UsageError, match="bad.png") as info:
        inputs.load_images([str(bad)], (32, 32))
    # The decoder's reason, without TensorFlow's op decorations.
    assert "Unknown image file format" in str(info.value)
    assert "[Op:" not in str(info.value) and "{{" not in str(info.value)
    assert not str(info.value).endswith("..")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(keras_vit.errors.UsageError, match="No images"):
        inputs.load_images([str(empty)], (32, 32))
    with pytest.raises(keras_vit.errors.UsageError, match="does not exist"):
        inputs.load_images([str(tmp_path / "nowhere")], (32, 32))
    # A folder of class folders is searched as keras-vit-predict does; a
    # folder named like an image is searched, not read; a link to nothing
    # in a folder is one line naming it.
    classes = tmp_path / "classes"
    (classes / "cat" / "album.jpg").mkdir(parents=True)
    Image.new("RGB", (20, 20), (9, 9, 9)).save(classes / "cat" / "c.png")
    Image.new("RGB", (20, 20), (9, 9, 9)).save(
        classes / "cat" / "album.jpg" / "d.png")
    images, names = inputs.load_images([str(classes)], (16, 16))
    assert names == ["cat/album.jpg/d.png", "cat/c.png"]
    assert images.shape == (2, 16, 16, 3)
    os.symlink(tmp_path / "gone.jpg", classes / "cat" / "link.jpg")
    with pytest.raises(keras_vit.errors.UsageError) as info:
        inputs.load_images([str(classes)], (16, 16))
    assert str(info.value) == (
        f"Cannot read '{classes / 'cat' / 'link.jpg'}' as an image (JPEG, "
        "PNG, GIF, BMP or WebP): No such file or directory. Leave such "
        "files out with `skip_bad_images`.")
    # Left out, each named on stderr; none readable is one line.
    images, names = inputs.load_images([str(classes), str(bad)], (16, 16),
                                       skip_bad_images=True)
    assert names == ["cat/album.jpg/d.png", "cat/c.png"]
    assert images.shape == (2, 16, 16, 3)
    err = capsys.readouterr().err
    assert f"skipped {classes / 'cat' / 'link.jpg'}: Cannot read" in err
    assert f"skipped {bad}: Cannot read" in err
    with pytest.raises(keras_vit.errors.UsageError,
                       match="None of the 1 images can be read"):
        inputs.load_images([str(bad)], (16, 16), skip_bad_images=True)


def test_digits_images():
    images, names = inputs.digits_images(3, (16, 24))
    assert images.shape == (3, 16, 24, 3) and names[2] == "digit #2 (label 2)"
    np.testing.assert_array_equal(images[..., 0], images[..., 2])
    assert images.min() == -1.0 and images.max() <= 1.0
    with pytest.raises(keras_vit.errors.UsageError, match="between 1 and 1797"):
        inputs.digits_images(0, (16, 16))


def _analysis(*args):
    return command.main(["keras-vit-analysis", *args])


@covers("analysis_output_not_ours")
def test_a_users_own_file_of_a_figures_name_is_not_replaced(
        saved_model, tmp_path, capsys):
    """--output_dir holding a file of a figure's (or analysis.json's)
    name that no analysis wrote: refused in one line before the model
    loads, the file kept. An earlier analysis's figures are replaced,
    listed by its analysis.json or, where that is gone (a run killed as
    they moved in), known by their PNG's own mark."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "mean_attention_distance.png").write_text("my precious")
    (out / "analysis.json").write_text('{"mine": 1}')
    args = ("--model", saved_model, "--digits", "2", "--output_dir", str(out))
    assert _analysis(*args) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"keras-vit-analysis: error: {out} holds mean_attention_distance."
        "png, analysis.json, which no earlier keras-vit-analysis wrote "
        "there (no analysis.json of one lists them): not replaced; move "
        "them away, or pass another --output_dir.")
    check_says("analysis_output_not_ours", line)
    assert (out / "mean_attention_distance.png").read_text() == "my precious"
    ours = tmp_path / "ours"
    assert _analysis(*args[:-1], str(ours)) == 0
    os.remove(ours / cli.JSON_NAME)  # figures no analysis.json lists
    assert _analysis(*args[:-1], str(ours)) == 0
    assert os.path.exists(ours / cli.JSON_NAME)
    with Image.open(ours / "attention_rollout.png") as image:
        assert image.info[plots.MADE_BY[0]] == plots.MADE_BY[1]
    capsys.readouterr()


def test_cli_errors_name_the_fix(tmp_path, capsys):
    out = f"--output_dir={tmp_path}"
    run = tmp_path / "run"  # a training run's workdir, to the resolver
    run.mkdir()
    (run / "config.json").write_text("{}")
    cases = [
        (["--model=x.keras", out], "Give the images"),
        ([f"--model={tmp_path}/missing.keras", "--digits=1", out],
         "missing.keras"),
        ([f"--model={run}", "--digits=1", "--variant=B/16", out],
         "--variant goes with an .npz model only"),
        ([f"--model={tmp_path}", "--digits=1", out], "config.json"),
        (["--model=x.keras", "--digits=1", str(tmp_path), out], "not both"),
    ]
    for args, message in cases:
        assert _analysis(*args) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert err[0].startswith("keras-vit-analysis: error: ")


def _command_model(*args):
    """The model keras-vit-analysis loads for these flags."""
    values = flags.FlagValues()
    argv = ["keras-vit-analysis", *args, "--output_dir=x"]
    command.define_flags(values, argv)
    cli_flags.define_verbose(values)
    cli_flags.parse(values, argv)
    return cli_flags.load_flagged_model(values)


def test_workdir_source(monkeypatch, tiny_model, tmp_path):
    from keras_vit.storage import workdir

    monkeypatch.setattr(
        workdir, "restore_model", lambda path, use_ema: tiny_model
    )
    (tmp_path / workdir.CONFIG).write_text("{}")  # a run's workdir
    assert _command_model(f"--model={tmp_path}") is tiny_model


def test_npz_source_round_trip(tmp_path, images):
    from keras_vit.checkpoint import weights as checkpoint

    keras.utils.set_random_seed(5)
    model = _tiny(image_size=32)
    path = str(tmp_path / "tiny.npz")
    checkpoint.save_npz(model, path)
    loaded = _command_model(f"--model={path}", "--image_size=32")
    x = images[:, :, :32]
    np.testing.assert_allclose(
        loaded(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6
    )
    with pytest.raises(keras_vit.errors.UsageError, match="B/16"):
        _command_model(f"--model={path}", "--variant=B/16")
    with pytest.raises(keras_vit.errors.UsageError,
                       match="no such file or folder"):
        _command_model(f"--model={tmp_path}/missing.npz")


def test_hybrid_layout_and_no_rgb_filters(tmp_path, images):
    # A ResNet stem of two stages has stride 8: a 4 x 4 grid of 8-pixel
    # cells on a 32 x 32 input, embedded by 1 x 1 "patches".
    model = keras_vit.create_model(
        None,
        num_classes=5,
        image_size=32,
        patch_size=1,
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        mlp_dim=64,
        resnet_layers=(1, 1),
    )
    layout = extract.token_layout(model)
    assert layout == core.TokenLayout((4, 4), (8.0, 8.0), 1)
    data = cli.run_analysis(model, images[:2, :, :32], str(tmp_path))
    assert "skipped" in data["patch_embedding_pca"]
    assert sorted(os.listdir(tmp_path)) == sorted(
        [cli.JSON_NAME]
        + [f for k, f in cli.FIGURES.items() if k != "patch_embedding_pca"]
    )


@pytest.fixture(scope="module")
def mpp_ema_run(tmp_path_factory):
    """A 2-step MPP run at image 16 that keeps EMA weights."""
    from keras_vit.training import train_lib
    from tests import tiny

    config = tiny.digits_config({
        "objective.mpp.enabled": True, "model.image_size": 16,
        "model.patch_size": 4, "trainer.ema_decay": 0.5,
        "schedule.warmup_steps": 1,
        "trainer.total_steps": 2, "trainer.steps_per_loop": 1,
        "checkpoints.every_steps": 0, "log.every_steps": 1,
        "evals.test.every_steps": 0})
    workdir = str(tmp_path_factory.mktemp("mpp_ema"))
    train_lib.train_and_evaluate(config, workdir)
    keras.backend.clear_session()
    return workdir


def test_cli_mpp_figure_uses_the_same_model(mpp_ema_run, tmp_path,
                                            monkeypatch, capsys):
    """--image_size and --no_ema reach the MPP figure: it is drawn at 24
    (not a traceback at the run's 16) from the raw weights, as the other
    figures are."""
    from keras_vit.analysis import mpp_figure
    from keras_vit.storage import workdir as wd

    calls = []
    restore = wd.restore_model

    def spy(path, **kwargs):
        calls.append(kwargs.get("use_ema", True))
        return restore(path, **kwargs)

    monkeypatch.setattr(wd, "restore_model", spy)
    out = str(tmp_path / "analysis")
    assert _analysis(f"--model={mpp_ema_run}", "--image_size=24",
                     "--no_ema", "--digits=2", f"--output_dir={out}") == 0
    assert os.path.join(out, mpp_figure.FIGURE) in capsys.readouterr().out
    _assert_png(os.path.join(out, mpp_figure.FIGURE))
    # analysis.json, written last, lists it and its numbers: every figure
    # beside it, and nothing else.
    with open(os.path.join(out, cli.JSON_NAME)) as f:
        data = json.load(f)
    assert data["figures"]["mpp_predictions"] == mpp_figure.FIGURE
    assert sorted(os.listdir(out)) == sorted(
        [cli.JSON_NAME, *data["figures"].values()])
    # The model analysed: the run's raw weights (not its EMA), at 24.
    assert {k: data["source"][k] for k in (
        "location", "use_ema", "image_size")} == {
            "location": os.path.abspath(mpp_ema_run), "use_ema": False,
            "image_size": [24, 24]}
    numbers = data["mpp_predictions"]
    assert [i["name"] for i in numbers["images"]] == [
        "digit #0 (label 0)", "digit #1 (label 1)"]
    for image in numbers["images"]:
        assert image["masked"] + image["replaced"] + image["kept"] > 0
        assert 0.0 <= image["accuracy"] <= 1.0
    assert numbers["mean_accuracy"] == pytest.approx(np.mean(
        [i["accuracy"] for i in numbers["images"]]), abs=1e-4)
    assert calls and not any(calls)  # raw weights, everywhere
    # The rebuilt MPP model: its encoder is the one the figures read.
    model = mpp_figure._at_resolution(
        restore(mpp_ema_run, use_ema=False), 24,
        wd.read_config(mpp_ema_run).objective.mpp)
    assert model.architecture.image_size == (24, 24)
    assert tuple(model.output_shape[1:2]) == (36,)


EARLIER = os.path.join(os.path.dirname(__file__), "fixtures", "earlier")


def test_images_listed_once_and_named_apart(tmp_path):
    """A file reached twice (a folder and one of its files) is analysed
    once; two files of one name given alone are named by their paths; an
    analysis's own figures in its output folder are no input, a photo
    there is."""
    from keras_vit.analysis import inputs

    folder = tmp_path / "photos"
    for name in ("a/1.png", "b/1.png", "2.png", "out/attention_rollout.png",
                 "out/training_curves.png", "out/3.png"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"")
    listed = inputs._list_images(
        [str(folder), str(folder / "2.png")], str(folder / "out"))
    assert [name for _, name in listed] == [
        "2.png", "a/1.png", "b/1.png", "out/3.png"]
    alone = [str(folder / "a" / "1.png"), str(folder / "b" / "1.png")]
    assert inputs._list_images(alone) == [(f, f) for f in alone]


def test_the_command_over_a_folder_holding_its_output(tmp_path):
    """keras-vit-analysis of an earlier version's MPP run on a folder of
    photos whose output folder is inside it, twice: the second run reads
    the same three photos (not the first run's figures), the upgrade
    notice is said once per run, no library notice reaches the terminal,
    the checks and the forward pass show their counts, and more principal
    components than the filters have are drawn as many as there are,
    saying so."""
    from PIL import Image
    from sklearn.datasets import load_digits

    from tests import console

    folder = tmp_path / "photos"
    for i, name in enumerate(("a/1.png", "b/1.png", "2.png")):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        pixels = (load_digits().images[i] * 15).astype(np.uint8)
        Image.fromarray(pixels).resize((32, 32)).save(folder / name)
    out = folder / "analysis"
    for _ in range(2):
        result = console.run("analysis", [
            f"--model={os.path.join(EARLIER, 'mpp_workdir')}",
            "--batch_size=1", "--num_components=1000",
            f"--output_dir={out}", str(folder), str(folder / "2.png")])
        assert result.returncode == 0, result.stderr[-3000:]
        with open(out / cli.JSON_NAME) as f:
            names = [i["name"] for i in json.load(f)["images"]]
        assert names == ["2.png", "a/1.png", "b/1.png"]
        err = result.stderr
        assert "1000 principal components asked for; the patch filters, " \
            "centred on their mean, span 15 directions: drew those." in err
        assert err.count("fields of an earlier version") == 1, err
        assert "oneDNN" not in err and "E0000" not in err, err
        # (Each count starts with a carriage return: a line here.)
        assert "\nchecked 3/3 images" in err and "\nanalysed 3/3 images" in err
    # Into another folder: the earlier analysis's figures, beside its
    # analysis.json, are no images either, and that is said.
    result = console.run("analysis", [
        f"--model={os.path.join(EARLIER, 'mpp_workdir')}", "--batch_size=1",
        f"--output_dir={tmp_path / 'elsewhere'}", str(folder)])
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "elsewhere" / cli.JSON_NAME) as f:
        assert [i["name"] for i in json.load(f)["images"]] == [
            "2.png", "a/1.png", "b/1.png"]
    assert "figure(s) of an earlier analysis (beside its analysis.json) " \
        "not read as images." in result.stderr


HUB = os.path.join(os.path.dirname(__file__), "fixtures", "hub")


def test_analysis_preprocesses_as_predict_does(tmp_path, capsys):
    """A timm folder evaluates with its crop_pct (resize to 35, central
    32 crop): keras-vit-analysis names the class keras-vit-predict names,
    with the same probability, by default, with --resize_size and with
    --scores=sigmoid; the resize and the scores change the answer, so
    neither is left out."""
    import shutil

    from keras_vit.commands import predict

    folder = str(tmp_path / "timm")
    shutil.copytree(os.path.join(HUB, "timm_vit"), folder)
    rng = np.random.default_rng(3)
    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (40 + 7 * i, 50, 3),
                                     np.uint8)).save(photos / f"{i}.png")

    def analysed(*extra):
        out = tmp_path / "analysis"
        assert _analysis(f"--model={folder}", f"--output_dir={out}",
                         str(photos), *extra) == 0
        with open(out / cli.JSON_NAME) as f:
            return [(p["predicted_class"], p["probability"])
                    for p in json.load(f)["images"]]

    def predicted(*extra):
        out = tmp_path / "predictions.json"
        assert predict.main(["keras-vit-predict", f"--model={folder}",
                             str(photos), f"--output={out}", "--overwrite",
                             "--top_k=1", *extra]) == 0
        return [(p["top_k"][0]["class"], p["top_k"][0]["probability"])
                for p in json.loads(out.read_text())["predictions"]]

    for extra in ((), ("--resize_size=40",), ("--scores=sigmoid",)):
        ours, theirs = analysed(*extra), predicted(*extra)
        assert [c for c, _ in ours] == [c for c, _ in theirs], extra
        np.testing.assert_allclose([p for _, p in ours],
                                   [p for _, p in theirs], atol=1e-5)
    direct = analysed("--resize_size=32")  # no crop: resized directly
    default = [p for _, p in analysed()]
    assert not np.allclose([p for _, p in direct], default, atol=1e-4)
    alone = [p for _, p in analysed("--scores=sigmoid")]
    assert not np.allclose(alone, default, atol=1e-3)
    capsys.readouterr()


def test_skip_bad_images_leaves_out_what_cannot_be_read(saved_model,
                                                        tmp_path, capsys):
    """keras-vit-analysis over a folder with a broken file: one line
    naming the file and --skip_bad_images; with it, the figures of the
    rest and the broken file named on stderr."""
    photos = _random_photos(tmp_path / "photos", 2, (40, 50), seed=5)
    (photos / "broken.jpg").write_bytes(b"not a jpeg")
    out = tmp_path / "analysis"
    assert _analysis(f"--model={saved_model}", f"--output_dir={out}",
                     str(photos)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("keras-vit-analysis: error: Cannot read "), err
    assert "broken.jpg" in err[-1] and err[-1].endswith(
        "Leave such files out with --skip_bad_images.")
    assert _analysis(f"--model={saved_model}", f"--output_dir={out}",
                     str(photos), "--skip_bad_images") == 0
    assert f"skipped {photos / 'broken.jpg'}: Cannot read" in (
        capsys.readouterr().err)
    with open(out / cli.JSON_NAME) as f:
        assert [p["name"] for p in json.load(f)["images"]] == [
            "0.png", "1.png"]
    # An image too elongated for the keep-aspect resize is refused when
    # checked, like a broken one, not as a traceback from the resize.
    (photos / "broken.jpg").unlink()
    strip = photos / "strip.png"
    strip.write_bytes(tf.io.encode_png(np.zeros((1, 300, 3), np.uint8)
                                       ).numpy())
    kept = [f"--model={saved_model}", f"--output_dir={tmp_path / 'kept'}",
            str(photos), "--resize_size=256", "--keep_aspect"]
    assert _analysis(*kept) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"keras-vit-analysis: error: '{strip}': The "
                              "image is too elongated"), err
    assert _analysis(*kept, "--skip_bad_images") == 0
    assert f"skipped {strip}: '{strip}': The image is too elongated" in (
        capsys.readouterr().err)


def test_flags_are_checked_before_any_image(saved_model, tmp_path, capsys):
    """A --class_names_file of another count than the model's classes (a
    traceback in the figure titles, or names silently wrong), a blank
    line in it, --max_rollout_images=0 and --no_ema with a .keras file:
    one line naming the flag, before any image is read (the broken one
    given is never reported)."""
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    three, blank = tmp_path / "three.txt", tmp_path / "blank.txt"
    three.write_text("a\nb\nc\n")
    blank.write_text("a\n\nb\n")
    out = f"--output_dir={tmp_path / 'out'}"
    cases = [
        ([f"--model={saved_model}", f"--class_names_file={three}"],
         f"--class_names_file={three} holds 3 class names for a 5-class "
         "model: give one name per class"),
        ([f"--model={saved_model}", f"--class_names_file={blank}"],
         f"--class_names_file={blank} line 2 is blank"),
        ([f"--model={tmp_path / 'missing.keras'}",
          "--max_rollout_images=0"], "--max_rollout_images=0: must be >= 1."),
        ([f"--model={saved_model}", "--no_ema"],
         "--no_ema goes with a training workdir only"),
    ]
    for args, message in cases:
        assert _analysis(*args, out, str(broken)) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert err[0].startswith("keras-vit-analysis: error: ")
    assert not (tmp_path / "out").exists()


# --- dynamic image sizes, matplotlib, memory, the output folder ----------


def test_dynamic_image_size_models_through_the_console(tmp_path):
    """A .keras model saved with dynamic_image_size (input (None, None)):
    analysed at the size it keeps its position embeddings at, as
    keras-vit-predict reads it; with sin-cos embeddings (kept at no
    size), one line naming --image_size=N before any image is read (the
    broken one given is never reported), and analysed with it."""
    from tests import console

    learned, sincos = str(tmp_path / "d.keras"), str(tmp_path / "s.keras")
    keras_vit.create_model(
        None, num_classes=5, image_size=(32, 48), patch_size=8,
        hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64,
        dynamic_image_size=True).save(learned)
    keras_vit.create_model(
        None, num_classes=5, image_size=32, patch_size=8, hidden_size=32,
        num_layers=1, num_heads=2, mlp_dim=64, posemb="sincos2d",
        dynamic_image_size=True).save(sincos)
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a png")
    out = tmp_path / "out"

    def layout(*args):
        result = console.run("analysis", [*args, f"--output_dir={out}"])
        assert result.returncode == 0, result.stderr[-3000:]
        with open(out / cli.JSON_NAME) as f:
            return json.load(f)["layout"]["grid"]

    assert layout(f"--model={learned}", "--digits=2") == [4, 6]
    result = console.run("analysis", [f"--model={sincos}", str(broken),
                                      f"--output_dir={tmp_path / 'o2'}"])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = [x for x in result.stderr.splitlines()
               if x.startswith("keras-vit-analysis: error: ")]
    assert "saved with a dynamic image size" in line
    assert "pass --image_size=N" in line and "broken" not in line
    assert not (tmp_path / "o2").exists()
    assert layout(f"--model={sincos}", "--image_size=16", "--digits=1") \
        == [2, 2]


def _without_matplotlib(monkeypatch):
    # None in sys.modules makes the import fail as if not installed.
    for name in ("matplotlib", "matplotlib.figure",
                 "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)


def test_without_matplotlib_stops_before_any_model_computation(
        saved_model, tiny_model, images, tmp_path, capsys, monkeypatch):
    """One line naming the install command the docs give, before the
    model is read (the command) or run (run_analysis), not after the
    forward pass."""
    _without_matplotlib(monkeypatch)
    loaded, run = [], []
    monkeypatch.setattr(cli_flags, "load_flagged_model",
                        lambda *a, **k: loaded.append(a))
    monkeypatch.setattr(extract, "attention_stats",
                        lambda *a, **k: run.append(a))
    out = tmp_path / "out"
    assert _analysis(f"--model={saved_model}", "--digits=2",
                     f"--output_dir={out}") == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("keras-vit-analysis: error: ")
    assert "pip install 'keras-vision-transformer[figures]'" in line
    hint = "pip install matplotlib"
    assert hint in line
    with pytest.raises(ImportError, match="matplotlib"):
        cli.run_analysis(tiny_model, images, str(out))
    assert not loaded and not run and not out.exists()
    docs = os.path.join(os.path.dirname(os.path.dirname(__file__)), "docs",
                        "analysis.md")
    with open(docs) as f:
        assert hint in " ".join(f.read().split())


def test_run_analysis_takes_one_name_per_image_and_per_class(
        tiny_model, images, tmp_path):
    """run_analysis refuses names that are not one per image and class
    names that are not one per class of the head, before the forward pass
    and with no output folder (a name short was an IndexError deep in the
    drawing, a name too many was drawn on the wrong image unsaid)."""
    out = tmp_path / "out"
    classes = int(tiny_model.output_shape[-1])
    for kwargs, says in (
            (dict(names=["a"]), f"names: 1 given for {len(images)} images"),
            (dict(class_names=["a"] * (classes + 2)),
             f"class_names: {classes + 2} given for the model's {classes} "
             "classes"),
            (dict(class_names=["a"]), f"class_names: 1 given for the "
             f"model's {classes} classes")):
        with pytest.raises(UsageError, match=re.escape(says)):
            cli.run_analysis(tiny_model, images, str(out), **kwargs)
    assert not out.exists()
    # An empty argument (an unset shell variable) is said as such.
    with pytest.raises(UsageError, match=r"An image argument is empty "
                       r"\(an unset shell variable\?\)"):
        inputs._list_images([""])
    backbone = keras_vit.features_model(tiny_model)
    with pytest.raises(UsageError, match="no classification head"):
        cli.run_analysis(backbone, images, str(out), class_names=["a"])


def test_attention_is_taken_one_layer_at_a_time(tiny_model, images,
                                                monkeypatch):
    """Each layer's attention is made float64 and dropped once used (not
    every layer's float32 plus a float64 copy of them all): the same
    numbers as the library's functions of all layers at once, bit for
    bit."""
    layout = extract.token_layout(tiny_model)
    _, weights = keras_vit.attention_model(tiny_model)(images)
    arrays = [w.numpy() for w in weights]
    remaining = list(weights)
    held, step = [], core.rollout_step

    def spy(joint, layer, *args):
        held.append(sum(w is not None for w in remaining))
        return step(joint, layer, *args)

    monkeypatch.setattr(core, "rollout_step", spy)
    distance, rollout = extract._layer_by_layer(
        remaining, layout, core.patch_distances(layout))
    assert held == [1, 0] and remaining == [None, None]
    np.testing.assert_array_equal(
        distance, core.mean_attention_distance(arrays, layout))
    np.testing.assert_array_equal(rollout, core.attention_rollout(arrays))


def test_a_folder_used_before_holds_no_stale_result(saved_model, tmp_path,
                                                    monkeypatch, capsys):
    """A hybrid analysed where a ViT was: its patch_embedding_pca.png (and
    an earlier MPP run's figure) is removed, not left beside a JSON that
    says it was skipped; a run that fails midway leaves the earlier
    analysis as it was (its figures are drawn aside, then moved in
    together); files not the analysis's are kept."""
    hybrid = str(tmp_path / "hybrid.keras")
    keras_vit.create_model(
        None, num_classes=5, image_size=32, patch_size=1, hidden_size=32,
        num_layers=1, num_heads=2, mlp_dim=64, resnet_layers=(1, 1),
    ).save(hybrid)
    out = tmp_path / "analysis"
    assert _analysis(f"--model={saved_model}", "--digits=2",
                     f"--output_dir={out}") == 0
    assert (out / cli.FIGURES["patch_embedding_pca"]).exists()
    # An earlier MPP analysis's figure (marked as one; its analysis.json
    # was replaced since).
    mark = PngImagePlugin.PngInfo()
    mark.add_text(*plots.MADE_BY)
    Image.new("RGB", (4, 4)).save(out / "mpp_predictions.png", pnginfo=mark)
    (out / "notes.txt").write_text("mine")
    assert _analysis(f"--model={hybrid}", "--digits=2",
                     f"--output_dir={out}") == 0
    with open(out / cli.JSON_NAME) as f:
        data = json.load(f)
    assert "skipped" in data["patch_embedding_pca"]
    assert sorted(os.listdir(out)) == sorted(
        [cli.JSON_NAME, "notes.txt", *data["figures"].values()])
    assert "patch_embedding_pca" not in data["figures"]

    def full_disk(*args, **kwargs):
        raise RuntimeError("disk full")

    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    monkeypatch.setattr(plots, "plot_position_similarity", full_disk)
    with pytest.raises(RuntimeError, match="disk full"):
        _analysis(f"--model={saved_model}", "--digits=2",
                  f"--output_dir={out}")
    assert {name: (out / name).read_bytes()
            for name in os.listdir(out)} == before
    capsys.readouterr()
    # The figures an analysis killed outright (kill -9) left aside are
    # removed by the next one; a running process's, or another
    # machine's, are not judged.
    import subprocess

    from keras_vit.storage import leftovers

    gone = subprocess.Popen(["true"])
    gone.wait()
    killed = f"{leftovers.HOST}-{gone.pid}"
    aside = [f".{killed}.tmp-0123456789ab.analysis",
             # As this version names it (its writer twice).
             f".{killed}.tmp-0123456789ab-{killed}.analysis",
             f".{leftovers.writer()}.tmp-0123456789ab.analysis",
             f".other_host-{gone.pid}.tmp-0123456789ab.analysis"]
    for name in aside:
        (out / name).mkdir()
        (out / name / "attention_rollout.png").write_bytes(b"drawn")
    monkeypatch.undo()
    assert _analysis(f"--model={saved_model}", "--digits=2",
                     f"--output_dir={out}") == 0
    assert sorted(n for n in os.listdir(out) if ".tmp-" in n) == sorted(
        aside[2:])
    assert cli._STAGING.fullmatch(os.path.basename(
        cli._staging(str(tmp_path / "elsewhere"))))


def test_a_resized_model_draws_its_position_table_as_learned(tmp_path):
    """keras-vit-analysis --image_size at another grid than the table was
    learned at: the similarity figure is the learned table's, at its own
    grid (bilinear resizing alone makes neighbouring rows alike: a random
    table's neighbours score about 0.8 once resized), said in
    analysis.json; the other figures are at --image_size. Without it the
    model's own table is drawn, at its grid."""
    from tests import console

    keras.utils.set_random_seed(3)
    model = keras_vit.create_model(
        None, num_classes=5, image_size=32, patch_size=8, hidden_size=32,
        num_layers=1, num_heads=2, mlp_dim=64)
    table = model.parts.position_embedding.pos_embedding
    learned = np.random.default_rng(0).normal(size=table.shape)
    table.assign(learned.astype("float32"))
    path = str(tmp_path / "m.keras")
    model.save(path)
    rows = learned[0, 1:]
    unit = rows / np.linalg.norm(rows, axis=-1, keepdims=True)
    expected = unit @ unit.T

    def analysis(*args):
        out = tmp_path / "out"
        result = console.run("analysis", [f"--model={path}", "--digits=1",
                                          f"--output_dir={out}", *args])
        assert result.returncode == 0, result.stderr[-3000:]
        with open(out / cli.JSON_NAME) as f:
            return json.load(f)

    resized = analysis("--image_size=64")
    section = resized["position_embedding_similarity"]
    assert resized["layout"]["grid"] == [8, 8]
    assert section["grid"] == [4, 4] and "as learned" in section["note"]
    np.testing.assert_allclose(section["matrix"], expected, atol=1e-4)
    own = analysis()["position_embedding_similarity"]
    assert own["grid"] == [4, 4] and "as learned" not in own["note"]
    np.testing.assert_allclose(own["matrix"], expected, atol=1e-4)

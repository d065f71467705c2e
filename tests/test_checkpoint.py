"""Official .npz checkpoints: loading, layouts, resizing, head, key errors.

Every numerical test writes random non-zero arrays in the official layout,
loads them into a Keras model and compares its outputs with
tests/numpy_reference.py, an independent NumPy forward pass that reads the
arrays directly (unfused q/k/v, HWIO convolutions). Position embeddings of
the references are resized with scipy.ndimage.zoom(order=1), as the
official code does, not with the function under test.
"""

import logging
import subprocess

import keras
import ml_collections
import numpy as np
import pytest
import scipy.ndimage
from PIL import Image

from keras_vit import create_model, load_model
from keras_vit.checkpoint import loader
from keras_vit.checkpoint import posemb as posemb_lib
from keras_vit.checkpoint import weights as checkpoint
from keras_vit.checkpoint.formats import npz_layout
from keras_vit.checkpoint.npz_source import NpzSource
from keras_vit.checkpoint.resolution import rebuild_at_resolution
from keras_vit.errors import UsageError, flat_text
from keras_vit.training import model_init
from tests import console
from tests import numpy_reference as ref

POSEMB = "Transformer/posembed_input/pos_embedding"
TOL = 1e-5  # relative to the largest |logit|


def tiny(num_classes=5, image_size=32, **kw):
    sizes = dict(
        patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64
    )
    if kw.get("resnet_layers"):
        sizes["patch_size"] = 1
    sizes.update(kw)
    return create_model(
        None, num_classes=num_classes, image_size=image_size, **sizes
    )


def random_arrays(model, seed=0):
    """The model's official keys with random, well-scaled values."""
    rng = np.random.default_rng(seed)
    out = {}
    for key, value in checkpoint.model_arrays(model).items():
        shape = value.shape
        if key.endswith("scale"):
            x = 1.0 + 0.2 * rng.normal(size=shape)
        elif key.endswith("kernel"):
            qkv = key.split("/")[-2] in ("query", "key", "value")
            fan_in = shape[0] if qkv else int(np.prod(shape[:-1]))
            x = rng.normal(size=shape) / np.sqrt(fan_in)
        else:
            x = 0.3 * rng.normal(size=shape)
        out[key] = x.astype("float32")
    return out


def save(path, arrays):
    np.savez(path, **arrays)
    return str(path)


def images(size, seed=1):
    h, w = (size, size) if isinstance(size, int) else size
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, size=(2, h, w, 3)).astype("float32")


def assert_close(got, want):
    got = keras.ops.convert_to_numpy(got)
    assert got.shape == want.shape
    scale = max(np.abs(want).max(), 1e-6)
    assert np.abs(got - want).max() <= TOL * scale, np.abs(got - want).max()


def zoom_posemb(posemb, old, new, prefix):
    """The official resize (scipy) of a (1, N, D) position embedding."""
    grid = posemb[0, prefix:].reshape(old[0], old[1], -1)
    factors = (new[0] / old[0], new[1] / old[1], 1)
    grid = scipy.ndimage.zoom(grid.astype("float64"), factors, order=1)
    assert grid.shape[:2] == tuple(new)
    grid = grid.reshape(1, new[0] * new[1], -1).astype(posemb.dtype)
    return np.concatenate([posemb[:, :prefix], grid], axis=1)


# ------------------------------------------------------------- numerics


@pytest.mark.parametrize(
    "kw",
    [
        dict(pooling="token"),
        dict(pooling="gap"),
        dict(pooling="token", representation_size=24),
        dict(pooling="gap", representation_size=24),
        dict(pooling="token", resnet_layers=(1,)),
        dict(pooling="gap", resnet_layers=(1, 1), num_layers=1),
    ],
    ids=["token", "gap", "token-prelogits", "gap-prelogits", "hybrid",
         "hybrid-2stages-gap"],
)
def test_loaded_model_matches_numpy_reference(tmp_path, kw):
    model = tiny(**kw)
    arrays = random_arrays(model)
    report = checkpoint.load_npz(model, save(tmp_path / "c.npz", arrays))
    assert report.ok and not report.dropped and not report.head_initialized
    assert sorted(report.loaded) == sorted(arrays)
    x = images(32)
    assert_close(model(x), ref.forward(arrays, x))


def test_fused_qkv_and_out_layout():
    model = tiny(num_layers=1)
    arrays = random_arrays(model)
    checkpoint.load_arrays(model, arrays)
    att = model.get_layer("Transformer").blocks[0].attention
    pre = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/"
    q, k, v = (arrays[f"{pre}{n}/kernel"] for n in ("query", "key", "value"))
    fused = keras.ops.convert_to_numpy(att.qkv.kernel)
    np.testing.assert_array_equal(fused[:, :32], q.reshape(32, 32))
    np.testing.assert_array_equal(fused[:, 64:], v.reshape(32, 32))
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(att.qkv.bias)[32:64],
        arrays[pre + "key/bias"].reshape(-1),
    )
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(att.out.kernel),
        arrays[pre + "out/kernel"].reshape(32, 32),
    )


def test_groupnorm_accepts_flat_and_released_shapes():
    model = tiny(resnet_layers=(1,))
    arrays = random_arrays(model)
    assert arrays["gn_root/scale"].shape == (1, 1, 1, 64)  # released files
    flat = {
        k: (v.reshape(-1) if "/gn" in "/" + k else v)
        for k, v in arrays.items()
    }
    assert flat["block1/unit1/gn_proj/bias"].shape == (256,)
    checkpoint.load_arrays(model, flat)
    x = images(32)
    assert_close(model(x), ref.forward(arrays, x))


def test_training_checkpoint_prefix(tmp_path):
    model = tiny()
    arrays = random_arrays(model)
    stored = {f"opt/target/{k}": v for k, v in arrays.items()}
    stored["opt/state/step"] = np.array([7])
    report = checkpoint.load_npz(model, save(tmp_path / "t.npz", stored))
    assert report.layout == "official, opt/target/ prefix"
    assert [d[0] for d in report.dropped] == ["opt/state/step"]
    x = images(32)
    assert_close(model(x), ref.forward(arrays, x))
    # The parameters beside their opt/target/ copies: two checkpoints in
    # one file, refused (one of them was dropped as "optimizer state").
    path = save(tmp_path / "both.npz", {**stored, **arrays})
    with pytest.raises(ValueError, match=r"both.npz holds \d+ of the "
                       "model's arrays twice, under opt/target/ and by their "
                       "own names"):
        checkpoint.load_npz(tiny(), path)


@pytest.mark.parametrize("scan,size,table", [
    (False, 32, "pos_embedding"), (True, 32, "pos_embedding"),
    (False, (32, 48), "pos_embedding"),
    (True, 32, "Transformer/pos_embedding")])
def test_big_vision_layout(tmp_path, scan, size, table):
    """big_vision's layout (and its scanned blocks) reads as the official
    one; its table, which never holds the class token's row, gets a zero
    one whatever its grid's shape (a 4 x 6 grid's was read one short);
    a file from before 2022 keeps it in the encoder, which big_vision's
    fix_old_checkpoints moves out (it was read as a sin-cos model)."""
    model = tiny(image_size=size)
    arrays = random_arrays(model)
    # big_vision adds no position embedding to the class token.
    arrays[POSEMB][:, 0] = 0.0
    renames = [
        ("MultiHeadDotProductAttention_1", "MultiHeadDotProductAttention_0"),
        ("LayerNorm_2", "LayerNorm_1"),
        ("MlpBlock_3", "MlpBlock_0"),
    ]
    bv = {}
    for key, value in arrays.items():
        if key == POSEMB:
            key, value = table, value[:, 1:]
        for old, new in renames:
            key = key.replace(old, new)
        bv[f"params/img/{key}"] = value
    if scan:
        stacked = {}
        for key in list(bv):
            if "encoderblock_" in key:
                rest = key.split("/", 4)[4]
                stacked.setdefault(rest, []).append(bv.pop(key))
        for rest, values in stacked.items():
            bv[f"params/img/Transformer/encoderblock/{rest}"] = np.stack(values)
    report = checkpoint.load_npz(model, save(tmp_path / "bv.npz", bv))
    assert report.layout == "big_vision" and report.ok
    x = images(size)
    assert_close(model(x), ref.forward(arrays, x))


# ------------------------------------------------ position-embedding resize


def _bilinear_loop(grid, new):
    """Direct bilinear sampling, corners aligned, one output cell at a time."""
    old_h, old_w, d = grid.shape
    out = np.zeros((new[0], new[1], d))
    for i in range(new[0]):
        y = 0.0 if new[0] == 1 else i * (old_h - 1) / (new[0] - 1)
        for j in range(new[1]):
            x = 0.0 if new[1] == 1 else j * (old_w - 1) / (new[1] - 1)
            y0, x0 = int(np.floor(y)), int(np.floor(x))
            y1, x1 = min(y0 + 1, old_h - 1), min(x0 + 1, old_w - 1)
            dy, dx = y - y0, x - x0
            out[i, j] = (
                grid[y0, x0] * (1 - dy) * (1 - dx)
                + grid[y0, x1] * (1 - dy) * dx
                + grid[y1, x0] * dy * (1 - dx)
                + grid[y1, x1] * dy * dx
            )
    return out


@pytest.mark.parametrize(
    "old,new",
    [((14, 14), (24, 32)), ((7, 5), (3, 9)), ((4, 4), (4, 4)),
     ((3, 3), (1, 1)), ((1, 1), (2, 3)), ((6, 4), (6, 7))],
)
def test_resize_matches_scipy_zoom_and_direct_bilinear(old, new):
    rng = np.random.default_rng(0)
    posemb = rng.normal(size=(1, 1 + old[0] * old[1], 6)).astype("float32")
    got = posemb_lib.resize_position_embedding(posemb, new, old)
    assert got.shape == (1, 1 + new[0] * new[1], 6)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got[:, 0], posemb[:, 0])
    np.testing.assert_allclose(
        got, zoom_posemb(posemb, old, new, 1), atol=1e-6
    )
    direct = _bilinear_loop(posemb[0, 1:].reshape(*old, 6), new)
    np.testing.assert_allclose(got[0, 1:], direct.reshape(-1, 6), atol=1e-6)
    # Unbatched input and no prefix token work too.
    flat = posemb_lib.resize_position_embedding(posemb[0, 1:], new, old, 0)
    np.testing.assert_allclose(flat, got[0, 1:], atol=1e-7)


def _lerp_resize_float64(posemb, new, old, prefix):
    """The loader's resize as it was written before it became the model
    core's `resize_grid`: gather the two neighbours along each axis and
    mix them, in float64 (kept here to pin its results bit for bit)."""
    def axis(o, n):
        coords = (np.zeros(n) if n == 1 or o == 1
                  else np.arange(n) * ((o - 1) / (n - 1)))
        low = np.clip(np.floor(coords).astype(np.int64), 0, o - 1)
        return low, np.minimum(low + 1, o - 1), coords - low

    x = posemb[0, prefix:].reshape(old[0], old[1], -1).astype(np.float64)
    lo, hi, t = axis(old[0], new[0])
    x = x[lo] * (1 - t)[:, None, None] + x[hi] * t[:, None, None]
    lo, hi, t = axis(old[1], new[1])
    x = x[:, lo] * (1 - t)[None, :, None] + x[:, hi] * t[None, :, None]
    x = x.reshape(1, new[0] * new[1], -1).astype(posemb.dtype)
    return np.concatenate([posemb[:, :prefix], x], axis=1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("prefix", [0, 1])
def test_posemb_resize_bit_identical_to_the_float64_lerp(dtype, prefix):
    rng = np.random.default_rng(7)
    for old, new in [((14, 14), (24, 32)), ((7, 5), (3, 9)), ((4, 4), (4, 4)),
                     ((3, 3), (1, 1)), ((1, 1), (2, 3)), ((24, 24), (14, 14)),
                     ((14, 14), (37, 11))]:
        posemb = rng.normal(size=(1, prefix + old[0] * old[1], 6))
        posemb = posemb.astype(dtype)
        got = checkpoint.resize_position_embedding(posemb, new, old, prefix)
        want = _lerp_resize_float64(posemb, new, old, prefix)
        assert got.dtype == want.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, want)


def test_resize_224_to_384x512_and_square_inference():
    posemb = np.random.default_rng(0).normal(size=(1, 197, 4))
    out = posemb_lib.resize_position_embedding(posemb, (24, 32))
    assert out.shape == (1, 1 + 24 * 32, 4)
    # Corners are aligned: the four corner embeddings are unchanged.
    grid, new = posemb[0, 1:].reshape(14, 14, 4), out[0, 1:].reshape(24, 32, 4)
    for (a, b), (c, d) in [((0, 0), (0, 0)), ((13, 13), (23, 31)),
                           ((0, 13), (0, 31))]:
        np.testing.assert_allclose(new[c, d], grid[a, b])
    with pytest.raises(ValueError, match="posemb_grid"):
        posemb_lib.resize_position_embedding(posemb[:, :-1], (24, 32))


@pytest.mark.parametrize(
    "pooling,train_size,new_size,grid_arg",
    [
        ("token", 32, (48, 64), None),  # 4x4 -> 6x8
        ("gap", 32, (24, 40), None),  # 4x4 -> 3x5
        ("token", (32, 48), 40, (4, 6)),  # non-square file -> 5x5
    ],
)
def test_load_with_position_embedding_resize(
    tmp_path, pooling, train_size, new_size, grid_arg
):
    source = tiny(image_size=train_size, pooling=pooling)
    arrays = random_arrays(source)
    path = save(tmp_path / "c.npz", arrays)
    model = tiny(image_size=new_size, pooling=pooling)
    report = checkpoint.load_npz(model, path, posemb_grid=grid_arg)
    old = checkpoint.model_grid(source)
    new = checkpoint.model_grid(model)
    assert report.posemb_resized == (old, new) and report.ok
    prefix = 1 if pooling == "token" else 0
    expected = dict(arrays)
    expected[POSEMB] = zoom_posemb(arrays[POSEMB], old, new, prefix)
    x = images(new_size)
    assert_close(model(x), ref.forward(expected, x))


def test_a_square_table_of_as_many_patches_as_a_non_square_model(tmp_path):
    """A 4x4 table into a 2x8 model (16 patches each): an .npz cannot say
    whether it is square (to be resized) or saved at 2x8, so without
    `posemb_grid` it is refused naming both (it was loaded row for row as
    the 2x8 grid); posemb_grid=(4, 4) resizes it as the official code
    does, (2, 8) loads it as it is; a released checkpoint (square, every
    one) is resized without being told; load_model says it too."""
    source = tiny(image_size=32)
    arrays = random_arrays(source)
    path = save(tmp_path / "c.npz", arrays)
    with pytest.raises(UsageError) as error:
        checkpoint.load_npz(tiny(image_size=(16, 64)), path)
    assert str(error.value) == (
        f"{path}: its position table has 16 patches, as many as the "
        "model's 2x8 grid: it is a square 4x4 table (every released "
        "checkpoint's), to be resized, or one saved at 2x8, and an .npz "
        "cannot say which. Pass its grid as `posemb_grid`=(rows, cols): "
        "4x4 to resize it, or 2x8 if it was saved at the model's grid.")
    with pytest.raises(UsageError, match="as many as the model's 2x8"):
        load_model(path, image_size=(16, 64))
    x = images((16, 64))
    resized = dict(arrays)
    resized[POSEMB] = zoom_posemb(arrays[POSEMB], (4, 4), (2, 8), 1)
    model = tiny(image_size=(16, 64))
    report = checkpoint.load_npz(model, path, posemb_grid=(4, 4))
    assert report.posemb_resized == ((4, 4), (2, 8)) and report.ok
    assert_close(model(x), ref.forward(resized, x))
    report = checkpoint.load_npz(model, path, posemb_grid=(2, 8))
    assert report.posemb_resized is None and report.ok
    assert_close(model(x), ref.forward(arrays, x))
    model, report = NpzSource(path, image_size=32).build(image_size=(16, 64))
    assert report.posemb_resized == ((4, 4), (2, 8))
    assert_close(model(x), ref.forward(resized, x))
    # A square model of as many patches needs no word: nothing to tell.
    model = tiny(image_size=32)
    assert checkpoint.load_npz(model, path).posemb_resized is None
    # A backbone written for transfer (VTAB) is square: said, so resized.
    backbone = loader.write_backbone(path, str(tmp_path / "backbone.npz"))
    assert backbone.posemb_grid == (4, 4)
    model, report = backbone.build(image_size=(16, 64), num_classes=7)
    assert report.posemb_resized == ((4, 4), (2, 8))


def test_non_square_file_grid_needs_posemb_grid(tmp_path):
    path = save(tmp_path / "c.npz", random_arrays(tiny(image_size=(32, 48))))
    with pytest.raises(ValueError, match=r"`posemb_grid`=\(rows, cols\)"):
        checkpoint.load_npz(tiny(image_size=40), path)
    # Built without its grid or size: asked for them, naming the grids its
    # 24 patches make, not built at 224 (a table its grid does not fit).
    for strict in (True, False):
        with pytest.raises(UsageError) as info:
            NpzSource(path).build(strict=strict)
        assert str(info.value) == (
            "Cannot infer the patch grid of a position embedding with 24 "
            "patch tokens (not a square: 4x6, 6x4 or 3x8?): pass the grid it "
            "was trained with as `posemb_grid`=(rows, cols), or the "
            "`image_size`=(height, width) it was trained at.")
    with pytest.raises(UsageError) as info:
        NpzSource(path, posemb_grid=(5, 5)).build()
    assert str(info.value) == (
        f"{path}: `posemb_grid`=5x5 holds 25 patches, its position table "
        "24 (a 4x6 or 6x4 grid holds that many): pass the grid it was "
        "trained with.")
    # Loaded into a model, the same: no lenient load uses a table by a
    # grid it does not fill (the table loaded as it is, the grid ignored).
    for strict in (True, False):
        with pytest.raises(UsageError, match=r"`posemb_grid`=5x5 holds 25 "
                           "patches, its position table 24"):
            checkpoint.load_npz(tiny(image_size=(32, 48)), path,
                                posemb_grid=(5, 5), strict=strict)
    # Described (no model built), it reads as before; given its size, built.
    assert NpzSource(path).architecture().image_size == (224, 224)
    assert NpzSource(path).build((32, 48))[0].input_shape == (
        None, 32, 48, 3)


def test_a_non_square_file_loads_at_its_own_grid_given_posemb_grid(tmp_path):
    # With the grid named, the model is built at the resolution the file
    # was trained at (4 x 6 patches of 8: 32 x 48), its table unchanged; a
    # square resolution would stretch the table to fit.
    arrays = random_arrays(tiny(image_size=(32, 48)))
    path = save(tmp_path / "c.npz", arrays)
    model, report = NpzSource(path, posemb_grid=(4, 6)).build()
    assert model.input_shape == (None, 32, 48, 3)
    assert report.ok and report.posemb_resized is None
    x = images((32, 48))
    assert_close(model(x), ref.forward(arrays, x))
    # The same through the functions named by a path, report and all.
    model, report = loader.load_report(path, posemb_grid=(4, 6))
    assert model.input_shape == (None, 32, 48, 3) and report.ok
    assert_close(model(x), ref.forward(arrays, x))
    assert load_model(path, posemb_grid=(4, 6)).input_shape == (
        None, 32, 48, 3)


def test_rebuild_at_resolution():
    model = tiny(representation_size=24)
    arrays = random_arrays(model)
    checkpoint.load_arrays(model, arrays)
    bigger = rebuild_at_resolution(model, (48, 64))
    assert bigger.input_shape == (None, 48, 64, 3)
    assert model.input_shape == (None, 32, 32, 3)  # original untouched
    expected = dict(arrays)
    expected[POSEMB] = zoom_posemb(arrays[POSEMB], (4, 4), (6, 8), 1)
    x = images((48, 64))
    assert_close(bigger(x), ref.forward(expected, x))
    assert_close(model(images(32)), ref.forward(arrays, images(32)))
    with pytest.raises(ValueError, match="not divisible by .* stride 8"):
        rebuild_at_resolution(model, 50)
    hybrid = tiny(resnet_layers=(1,))
    hybrid_arrays = random_arrays(hybrid)
    checkpoint.load_arrays(hybrid, hybrid_arrays)
    rebuilt = rebuild_at_resolution(hybrid, 48)
    hybrid_arrays[POSEMB] = zoom_posemb(
        hybrid_arrays[POSEMB], (8, 8), (12, 12), 1
    )
    assert_close(rebuilt(images(48)), ref.forward(hybrid_arrays, images(48)))


# ------------------------------------------------------------ head policy


def test_head_kept_or_dropped_and_zero_initialised(tmp_path):
    arrays = random_arrays(tiny(num_classes=5, representation_size=24))
    path = save(tmp_path / "c.npz", arrays)
    x = images(32)

    same = tiny(num_classes=5, representation_size=24)
    report = checkpoint.load_npz(same, path)
    assert not report.dropped and not report.head_initialized
    assert_close(same(x), ref.forward(arrays, x))

    # Another class count: head and pre-logits dropped, head zeroed.
    other = tiny(num_classes=7, head_zero_init=False)
    report = checkpoint.load_npz(other, path)
    assert [d[:2] for d in report.dropped] == [
        ("head/kernel", (24, 5)), ("head/bias", (5,)),
        ("pre_logits/kernel", (32, 24)), ("pre_logits/bias", (24,)),
    ]
    assert report.head_initialized
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(other(x)), 0.0)
    body = {
        k: v for k, v in arrays.items() if not k.startswith(("head", "pre"))
    }
    features = keras_features(other, x)
    assert_close(features, ref.features(body, x))

    # The new head's bias is the model's head_bias_init, as the official
    # transfer builds it (vit_jax load_pretrained keeps the init's head).
    biased = tiny(num_classes=7, head_bias_init=-10.0)
    assert checkpoint.load_npz(biased, path).head_initialized
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(biased(x)), np.full((2, 7), -10.0))

    # keep_pre_logits with a model that has them: only the head is reset.
    keep = tiny(num_classes=7, representation_size=24)
    report = checkpoint.load_npz(keep, path, keep_pre_logits=True)
    assert [d[0] for d in report.dropped] == ["head/kernel", "head/bias"]
    assert_close(keras_features(keep, x), ref.features(arrays, x))

    # A model with pre-logits that are not loaded is an error naming the fix.
    with pytest.raises(ValueError, match="pass `keep_pre_logits`=True"):
        checkpoint.load_npz(tiny(num_classes=7, representation_size=24), path)

    # A features model (num_classes=0) drops the head.
    feats = tiny(num_classes=0)
    report = checkpoint.load_npz(feats, path)
    assert not report.head_initialized
    assert_close(feats(x), ref.features(body, x))


@pytest.mark.parametrize("width", [24, 32])
def test_fine_tuning_drops_a_head_that_reads_dropped_pre_logits(tmp_path,
                                                                width):
    """Fine-tuning (`loader.initialise`) from a file with pre-logits, of
    the task's class count: the pre-logits go, as for transfer in the
    paper, and the head with them, zeroed. Before, a 24-wide pre-logits
    layer was refused ("build it with representation_size"), and one as
    wide as the encoder (the released i21k files' 768 on B/16) kept the
    head, reading the encoder's features in place of its own."""
    arrays = random_arrays(tiny(num_classes=5, representation_size=width))
    path = save(tmp_path / "c.npz", arrays)
    model = tiny(num_classes=5, head_zero_init=False)
    report = loader.initialise(model, path)
    assert report.head_initialized
    assert [d[0] for d in report.dropped] == [
        "head/kernel", "head/bias", "pre_logits/kernel", "pre_logits/bias"]
    assert "it reads the pre-logits layer, which is dropped (config.init." \
        "keep_pre_logits=True keeps both)" in report.dropped[0][2]
    x = images(32)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model(x)), 0.0)
    # Kept with keep_pre_logits, in a model that has them: as saved.
    keep = tiny(num_classes=5, representation_size=width)
    report = loader.initialise(keep, path, keep_pre_logits=True)
    assert not report.dropped and not report.head_initialized
    assert_close(keep(x), ref.forward(arrays, x))


def test_a_head_dropped_with_the_pre_logits_is_not_said_kept(
        tmp_path, monkeypatch, caplog):
    """Fine-tuning (`model_init.initialise_from`) from a source with a
    pre-logits layer whose class names share none with the data's: the
    head goes with the pre-logits layer, and the log says so alone.
    Before, it also warned that the head was kept ("may be the same
    classes written otherwise")."""
    arrays = random_arrays(tiny(num_classes=2, representation_size=24))
    path = save(tmp_path / "c.npz", arrays)
    monkeypatch.setattr(NpzSource, "class_names", lambda self: ["a", "b"])
    init = ml_collections.ConfigDict(dict(
        model=str(path), head="match", keep_pre_logits=False))
    model = tiny(num_classes=2, head_zero_init=False)
    # (On absl's logger: a test before it may have set absl's verbosity.)
    with caplog.at_level(logging.INFO, logger="absl"):
        model_init.initialise_from(init, model, class_names=["x", "y"])
    said = caplog.text
    assert "Dropped head/kernel (24, 2): it reads the pre-logits layer, " \
        "which is dropped" in said, said
    assert "kept" not in said.replace("keep_pre_logits=True keeps", ""), said
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(model(images(32))), 0.0)


def test_a_head_of_the_same_classes_in_another_unicode_form_is_kept(
        tmp_path, monkeypatch, caplog):
    """Fine-tuning from a source whose class names write "é" composed
    (NFC) on data whose class folder writes it as "e" and a combining
    accent (NFD, as macOS names folders): the same classes, so the head
    is kept as saved; a class truly other drops it."""
    import unicodedata

    composed, decomposed = (unicodedata.normalize(form, "café")
                            for form in ("NFC", "NFD"))
    arrays = random_arrays(tiny(num_classes=2))
    path = save(tmp_path / "c.npz", arrays)
    monkeypatch.setattr(NpzSource, "class_names",
                        lambda self: [composed, "tea"])
    init = ml_collections.ConfigDict(dict(
        model=str(path), head="match", keep_pre_logits=False))
    with caplog.at_level(logging.INFO, logger="absl"):
        model = tiny(num_classes=2, head_zero_init=True)
        model_init.initialise_from(init, model,
                                   class_names=[decomposed, "tea"])
        assert "Dropped head" not in caplog.text, caplog.text
        np.testing.assert_array_equal(
            model.get_layer("head").get_weights()[0], arrays["head/kernel"])
        other = tiny(num_classes=2, head_zero_init=True)
        model_init.initialise_from(init, other, class_names=["cafe", "tea"])
    assert "Dropped head/kernel" in caplog.text, caplog.text


@pytest.mark.parametrize("edit, says", [
    (lambda a: a.update({"head/bias": a["head/bias"][:4]}),
     "its head/kernel (24, 5) and head/bias (4,) disagree on the class "
     "count"),
    (lambda a: a.update({"head/kernel": a["head/kernel"][:16]}),
     "its head/kernel (16, 5) takes 16 features but the pre-logits layer "
     "gives 24"),
    (lambda a: a.pop("head/bias"), "it has head/kernel but no head/bias"),
])
def test_a_head_that_does_not_fit_its_own_file_is_refused(tmp_path, edit,
                                                         says):
    """A damaged head is not "another class count": it is never dropped
    and zeroed in silence (a model that answers every class alike), for a
    model of the file's class count or of another."""
    arrays = random_arrays(tiny(num_classes=5, representation_size=24))
    edit(arrays)
    path = save(tmp_path / "c.npz", arrays)
    for classes in (5, 7):
        model = tiny(num_classes=classes, representation_size=24)
        before = [w.numpy().copy() for w in model.weights]
        with pytest.raises(ValueError, match="classification head is "
                           "malformed") as caught:
            checkpoint.load_npz(model, path, keep_pre_logits=True)
        assert says in str(caught.value)
        assert all(np.array_equal(b, w.numpy())
                   for b, w in zip(before, model.weights))
    # Not strict: what fits loads, and the report says what is wrong.
    report = checkpoint.load_npz(tiny(num_classes=5), path, strict=False)
    assert any(says in h for h in report.hints)


def test_a_damaged_encoder_norm_is_not_blamed_on_the_head(tmp_path):
    """An .npz whose encoder_norm lost half its width: the shape check
    names that array; the head, which fits the encoder's width (its class
    token's), is not called malformed."""
    arrays = random_arrays(tiny(num_classes=5))
    key = "Transformer/encoder_norm/scale"
    arrays[key] = arrays[key][:8]
    path = save(tmp_path / "n.npz", arrays)
    with pytest.raises(ValueError) as caught:
        checkpoint.load_npz(tiny(num_classes=5), path)
    assert f"{key}: model expects (32,), file has (8,)" in str(caught.value)
    assert "head is malformed" not in str(caught.value)


def test_a_damaged_head_is_one_line_at_the_users_door(tmp_path):
    """keras-vit-predict on an .npz whose head/bias lost an entry."""
    from PIL import Image

    from tests import console

    arrays = random_arrays(tiny(num_classes=5))
    arrays["head/bias"] = arrays["head/bias"][:4]
    path = save(tmp_path / "c.npz", arrays)
    Image.new("RGB", (32, 32), (200, 30, 30)).save(tmp_path / "a.png")
    out = console.run("predict", [f"--model={path}",
                                  str(tmp_path / "a.png")])
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and "classification head is malformed" in lines[0]
    assert "Traceback" not in out.stderr


def keras_features(model, x):
    from keras_vit import features_model

    return features_model(model)(x)


# ---------------------------------------------------------------- errors


def test_strict_error_lists_every_offending_key(tmp_path):
    model = tiny()
    arrays = random_arrays(model)
    before = [w.numpy().copy() for w in model.weights]
    del arrays["cls"], arrays["Transformer/encoderblock_1/LayerNorm_2/bias"]
    arrays["extra/kernel"] = np.ones((3, 3), "float32")
    arrays["Transformer/encoderblock_9/LayerNorm_0/scale"] = np.ones(32)
    ln = "Transformer/encoderblock_0/LayerNorm_0/scale"
    arrays[ln] = np.ones(31, "float32")
    path = save(tmp_path / "bad.npz", arrays)
    with pytest.raises(ValueError) as info:
        checkpoint.load_npz(model, path)
    message = str(info.value)
    for line in [
        "missing in file: cls (model expects (1, 1, 32))",
        "missing in file: Transformer/encoderblock_1/LayerNorm_2/bias "
        "(model expects (32,))",
        "unexpected in file: extra/kernel (3, 3)",
        "unexpected in file: Transformer/encoderblock_9/LayerNorm_0/scale",
        f"shape mismatch: {ln}: model expects (32,), file has (31,)",
        path,
    ]:
        assert line in message, message
    # Nothing was assigned.
    for weight, value in zip(model.weights, before):
        np.testing.assert_array_equal(weight.numpy(), value)

    report = checkpoint.load_npz(model, path, strict=False)
    assert not report.ok
    assert sorted(k for k, _ in report.missing) == [
        "Transformer/encoderblock_1/LayerNorm_2/bias", "cls",
    ]
    assert sorted(k for k, _ in report.unexpected) == [
        "Transformer/encoderblock_9/LayerNorm_0/scale", "extra/kernel",
    ]
    assert report.mismatched == [(ln, (32,), (31,))]
    assert ln not in report.loaded and "embedding/kernel" in report.loaded
    np.testing.assert_array_equal(
        model.get_layer("embedding").conv.kernel.numpy(),
        arrays["embedding/kernel"],
    )
    assert "shape mismatch" in str(report)



def test_the_command_line_keeps_the_offending_keys_apart(tmp_path):
    """On one line, each key the file lacks or adds is its own item (the
    lines of the error were run together with spaces)."""
    model = tiny()
    arrays = random_arrays(model)
    del arrays["Transformer/encoderblock_1/LayerNorm_2/bias"]
    arrays["extra/kernel"] = np.ones((3, 3), "float32")
    path = save(tmp_path / "bad.npz", arrays)
    image = tmp_path / "a.png"
    Image.fromarray(np.zeros((32, 32, 3), "uint8")).save(image)
    done = subprocess.run(
        console.script("predict") + [str(image), "--model", path],
        capture_output=True, text=True, env=console.env(), timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"keras-vit-predict: error: Checkpoint {path} does not fit the "
        f"model 'vit': missing in file: Transformer/encoderblock_1/"
        "LayerNorm_2/bias (model expects (32,)); unexpected in file: "
        "extra/kernel (3, 3) (model has no such parameter). "
        "keras-vit-convert --non_strict loads what fits into a .keras "
        "file, with a report."), done.stderr


def test_a_grid_that_does_not_hold_the_table_is_refused_by_its_flag(
        tmp_path):
    """A square file read with a wrong --posemb_grid: the flag named,
    without the --non_strict advice (a lenient load would have ignored
    the grid)."""
    path = save(tmp_path / "square.npz", random_arrays(tiny()))
    image = tmp_path / "a.png"
    Image.fromarray(np.zeros((32, 32, 3), "uint8")).save(image)
    done = subprocess.run(
        console.script("predict") + [str(image), "--model", path,
                                     "--posemb_grid=3x5"],
        capture_output=True, text=True, env=console.env(), timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"keras-vit-predict: error: {path}: --posemb_grid=3x5 holds 15 "
        "patches, its position table 16 (a 4x4 or 2x8 grid holds that "
        "many): pass the grid it was trained with."), done.stderr


@pytest.mark.parametrize("text, flat", [
    ("a\n  b: 1\n  c: 2\nd", "a b: 1; c: 2. d"),
    ("list:\n  one.\n  two", "list: one. two"),
    ("wrapped  words\nand more\n\n", "wrapped words and more"),
    ("  only: item", "only: item"), ("", ""),
    ("  a?\nb", "a? b"),
    ('File "x.py", line 1:\n  f(\n      x)\nValueError: boom',
     'File "x.py", line 1: f( x). ValueError: boom'),
])
def test_flat_text(text, flat):
    assert flat_text(text) == flat

def test_wrong_variant_is_named(tmp_path):
    path = save(tmp_path / "wide.npz", random_arrays(tiny(hidden_size=48)))
    with pytest.raises(ValueError, match="another architecture") as info:
        checkpoint.load_npz(tiny(), path)
    assert ("checkpoint: patch_size=8, hidden_size=48,"
            in str(info.value))
    assert ("model:      patch_size=8, hidden_size=32,"
            in str(info.value))


def test_describe_names_official_variants():
    shapes = {
        "cls": (1, 1, 768), "embedding/kernel": (16, 16, 3, 768),
        "head/kernel": (768, 21843), "pre_logits/kernel": (768, 768),
    }
    for i in range(12):
        pre = f"Transformer/encoderblock_{i}/"
        shapes[pre + "MultiHeadDotProductAttention_1/query/kernel"] = (
            768, 12, 64,
        )
        shapes[pre + "MlpBlock_3/Dense_0/kernel"] = (768, 3072)
    info = npz_layout.describe_arrays(shapes)
    assert info["variant"] == "B/16" and info["num_classes"] == 21843
    assert info["representation_size"] == 768 and info["pooling"] == "token"
    shapes["embedding/kernel"] = (1, 1, 1024, 768)
    for s, n in enumerate((3, 4, 9), start=1):
        shapes[f"block{s}/unit{n}/conv1/kernel"] = (1, 1, 64, 64)
    assert npz_layout.describe_arrays(shapes)["variant"] == "R50+B/16"


def test_a_table_with_a_class_row_but_no_cls_array_says_so():
    """17 tokens in a file without `cls`: not a square grid, but 4 x 4
    and a class token's row, which the message says (a damaged file)."""
    from keras_vit.checkpoint.posemb import square_grid

    assert square_grid(16) == (4, 4)
    with pytest.raises(UsageError, match=r"17 = 4 x 4 \+ 1: a class "
                       "token's row beside a square grid, whose `cls` array"):
        square_grid(17)
    with pytest.raises(UsageError) as info:
        square_grid(18)
    assert "class token" not in str(info.value)


def test_a_dynamic_size_sincos_model_round_trips_through_npz(tmp_path):
    """A model of any image size with sin-cos positions (no table, no
    fixed input size) is written and read back as .npz and .keras, its
    grid its own: the grid was computed from the unknown input size (a
    TypeError)."""
    def model():
        return create_model("Ti/16", num_classes=3, posemb="sincos2d",
                            dynamic_image_size=True, image_size=32,
                            num_layers=1)

    written, read = model(), model()
    path = str(tmp_path / "m.npz")
    checkpoint.save_npz(written, path)
    checkpoint.load_npz(read, path)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 48, 64, 3))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(written(x)),
                                  keras.ops.convert_to_numpy(read(x)))
    written.save(tmp_path / "m.keras")
    assert loader.resolve(str(tmp_path / "m.keras")).content().grid == (2, 2)


def test_a_features_model_with_pre_logits_round_trips_through_npz(
        tmp_path):
    """keras_vit.save_npz then load_npz of a features model (no head) with
    a pre-logits layer: loaded as written. Before, its pre-logits were
    dropped "with the head" that neither had, then said missing in the
    file. A features model without one drops the file's, as before."""
    written, read = (tiny(num_classes=0, representation_size=8)
                     for _ in range(2))
    path = str(tmp_path / "f.npz")
    checkpoint.save_npz(written, path)
    report = checkpoint.load_npz(read, path)
    assert not report.dropped
    x = images(32)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(written(x)),
                                  keras.ops.convert_to_numpy(read(x)))
    assert [d[0] for d in checkpoint.load_npz(tiny(num_classes=0), path)
            .dropped] == ["pre_logits/kernel", "pre_logits/bias"]


def test_a_table_of_the_class_token_alone_is_named():
    """A position table of one row, the class token's: no patch position
    to resize, said as such (it was an IndexError from the resize)."""
    with pytest.raises(UsageError, match=r"holds 1 row\(s\) for 1 class "
                       r"token\(s\), so no patch position"):
        posemb_lib.resize_position_embedding(np.zeros((1, 1, 4)), (2, 2),
                                             None, 1)


def test_an_npz_of_bfloat16_arrays_as_numpy_writes_them(tmp_path):
    """np.savez writes a bfloat16 array's dtype as a 2-byte void ('|V2'),
    as big_vision's bfloat16 checkpoints hold it; it loads as bfloat16
    (big_vision's and timm's reading), computing what the float32 of the
    same numbers computes. A structured 2-byte void is still refused."""
    import ml_dtypes

    arrays = random_arrays(tiny())
    halves = {k: v.astype(ml_dtypes.bfloat16) for k, v in arrays.items()}
    path = save(tmp_path / "bf16.npz", halves)
    assert np.load(path)["cls"].dtype == np.dtype("V2")
    model = tiny()
    assert checkpoint.load_npz(model, path).ok
    x = images(32)
    assert_close(model(x), ref.forward(
        {k: v.astype(np.float32) for k, v in halves.items()}, x))
    pairs = dict(arrays, cls=np.zeros((1, 1, 1), [("a", "u1"), ("b", "u1")]))
    with pytest.raises(UsageError, match=r"array 'cls' has dtype .*, not a "
                       "real number"):
        checkpoint.load_npz(tiny(), save(tmp_path / "pairs.npz", pairs))

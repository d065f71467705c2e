"""AugReg's model options: stochastic depth, fixed 2-D sin-cos position
embeddings, the R+Ti/16 hybrid, head bias initialisation."""

import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import droppath
from keras_vit.analysis import extract
from keras_vit.checkpoint import weights

TINY = dict(patch_size=4, hidden_size=32, num_layers=2, num_heads=2,
            mlp_dim=32)


def tiny(**kwargs):
    args = dict(num_classes=3, image_size=16, head_zero_init=False, **TINY)
    args.update(kwargs)
    return keras_vit.create_model(None, **args)


def images(n=8, h=16, w=16, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, h, w, 3)).astype("float32")


# ------------------------------------------------------- stochastic depth
def test_stochastic_depth_rates_are_linear_over_depth():
    assert droppath.stochastic_depth_rates(0.1, 1) == [0.0]
    np.testing.assert_allclose(
        droppath.stochastic_depth_rates(0.3, 4), [0.0, 0.1, 0.2, 0.3]
    )
    model = tiny(num_layers=3, stochastic_depth_rate=0.2)
    blocks = model.get_layer("Transformer").blocks
    assert [b.stochastic_depth_rate for b in blocks] == [0.0, 0.1, 0.2]


def test_stochastic_depth_is_the_same_function_at_inference():
    keras.utils.set_random_seed(1)
    with_sd = tiny(stochastic_depth_rate=0.5)
    without = tiny()
    without.set_weights(with_sd.get_weights())
    x = images()
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(with_sd(x, training=False)),
        keras.ops.convert_to_numpy(without(x, training=False)),
    )
    # In training the network varies from call to call; without stochastic
    # depth (and without dropout) training is deterministic.
    a, b = (keras.ops.convert_to_numpy(with_sd(x, training=True))
            for _ in range(2))
    assert np.abs(a - b).max() > 1e-3
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(without(x, training=True)),
        keras.ops.convert_to_numpy(without(x, training=False)), atol=1e-5,
    )


def test_stochastic_depth_drops_whole_examples_and_rescales():
    """With the MLP branch at zero, a block in training returns x + m *
    attention(x) / (1 - rate) with m in {0, 1} per example: the branch
    seen at inference, dropped or scaled by exactly 1 / (1 - rate)."""
    keras.utils.set_random_seed(2)
    rate = 0.25
    block = keras_vit.EncoderBlock(2, 16, stochastic_depth_rate=rate)
    x = np.random.default_rng(0).normal(size=(256, 5, 32)).astype("float32")
    block.build(x.shape)
    for w in (block.mlp2.kernel, block.mlp2.bias):
        w.assign(np.zeros(w.shape, "float32"))
    branch = keras.ops.convert_to_numpy(block(x, training=False)) - x
    out = keras.ops.convert_to_numpy(block(x, training=True)) - x
    kept = np.abs(out).reshape(256, -1).max(1) > 0
    np.testing.assert_allclose(out[kept], branch[kept] / (1 - rate),
                               rtol=1e-4, atol=1e-5)
    assert not out[~kept].any()  # dropped examples: exactly zero branch
    assert 0.6 < kept.mean() < 0.9  # ~ 1 - rate = 0.75 of 256 examples


def test_drop_path_keeps_the_expectation():
    keras.utils.set_random_seed(3)
    layer = keras_vit.DropPath(0.4)
    rows = np.ones((4000 * 3, 8), "float32")
    layer.build(rows.shape)
    out = keras.ops.convert_to_numpy(layer(rows, queries=3, training=True))
    per_example = out.reshape(4000, 3, 8)
    # Every example's rows share one draw: all 0 or all 1 / (1 - 0.4).
    values = np.unique(per_example.reshape(4000, -1), axis=1)
    assert values.shape[1] == 1
    np.testing.assert_allclose(np.unique(values), [0.0, 1 / 0.6],
                               rtol=1e-6)
    assert abs(out.mean() - 1.0) < 0.05
    assert keras.ops.convert_to_numpy(layer(rows, queries=3)).min() == 1.0


def test_stochastic_depth_rate_is_checked():
    with pytest.raises(ValueError, match="stochastic_depth_rate"):
        tiny(stochastic_depth_rate=1.0)


# ------------------------------------------------------------- sincos2d
def big_vision_posemb_sincos_2d(h, w, width, temperature=10_000.0):
    """big_vision models/vit.py posemb_sincos_2d, in NumPy."""
    y, x = np.mgrid[:h, :w]
    omega = np.arange(width // 4) / (width // 4 - 1)
    omega = 1.0 / (temperature ** omega)
    y = np.einsum("m,d->md", y.flatten(), omega)
    x = np.einsum("m,d->md", x.flatten(), omega)
    pe = [np.sin(x), np.cos(x), np.sin(y), np.cos(y)]
    return np.concatenate(pe, axis=1)[None]


def test_sincos2d_equals_big_vision_and_has_no_weights(tmp_path):
    model = tiny(image_size=(16, 24), posemb="sincos2d", pooling="gap",
                 stochastic_depth_rate=0.1)
    layer = model.get_layer("posembed_input")
    assert isinstance(layer, keras_vit.SinCosPositionEmbedding)
    assert not layer.weights
    table = keras.ops.convert_to_numpy(layer.table((4, 6), 32))
    np.testing.assert_allclose(
        table, big_vision_posemb_sincos_2d(4, 6, 32), atol=1e-5
    )
    # What the layer adds to the tokens is that table.
    tokens = np.zeros((1, 24, 32), "float32")
    added = layer(tokens, np.zeros((1, 16, 24, 3), "float32"))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(added), table,
                               atol=1e-5)
    # A class token gets zeros, as in big_vision (added before it).
    token_model = tiny(posemb="sincos2d", num_layers=1)
    prefixed = keras.ops.convert_to_numpy(
        token_model.get_layer("posembed_input").table((4, 4), 32)
    )
    assert not prefixed[0, 0].any()
    # The analysis (position-embedding similarity) reads the same table.
    np.testing.assert_array_equal(
        extract.position_embeddings(token_model), prefixed[0])
    np.testing.assert_allclose(prefixed[:, 1:],
                               big_vision_posemb_sincos_2d(4, 4, 32),
                               atol=1e-5)
    # Checkpoint: no position-embedding array, and a round trip.
    arrays = weights.model_arrays(model)
    assert not any("pos" in k for k in arrays)
    path = str(tmp_path / "m.npz")
    weights.save_npz(model, path)
    loaded = keras_vit.load_model(path,
                                  image_size=(16, 24))
    x = images(2, 16, 24)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(x)),
        keras.ops.convert_to_numpy(model(x)), atol=1e-5,
    )
    assert isinstance(loaded.get_layer("posembed_input"),
                      keras_vit.SinCosPositionEmbedding)
    # .keras round trip (stochastic depth included).
    keras_path = str(tmp_path / "m.keras")
    model.save(keras_path)
    again = keras.models.load_model(keras_path)
    assert again.get_layer("Transformer").stochastic_depth_rate == 0.1
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(again(x)),
        keras.ops.convert_to_numpy(model(x)), atol=1e-6,
    )


def test_sincos2d_at_any_size():
    keras.utils.set_random_seed(4)
    fixed = tiny(posemb="sincos2d", image_size=(16, 24), num_layers=1)
    dynamic = keras_vit.with_dynamic_image_size(tiny(
        posemb="sincos2d", image_size=16, num_layers=1))
    dynamic.set_weights(fixed.get_weights())
    assert dynamic.input_shape[1:3] == (None, None)
    x = images(2, 16, 24)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(dynamic(x)),
        keras.ops.convert_to_numpy(fixed(x)), atol=1e-5,
    )
    rebuilt = keras_vit.rebuild_at_resolution(fixed, (32, 16))
    bigger = tiny(posemb="sincos2d", image_size=(32, 16), num_layers=1)
    bigger.set_weights(fixed.get_weights())
    y = images(2, 32, 16)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(rebuilt(y)),
        keras.ops.convert_to_numpy(bigger(y)), atol=1e-5,
    )


def test_sincos2d_needs_a_width_divisible_by_4():
    with pytest.raises(ValueError, match="divisible by 4"):
        keras_vit.create_model(
            None, num_classes=2, image_size=8, patch_size=4,
            hidden_size=6, num_layers=1, num_heads=2, mlp_dim=8,
            posemb="sincos2d",
        )
    with pytest.raises(ValueError, match="posemb"):
        tiny(posemb="sincos")


# --------------------------------------------------------------- R+Ti/16
def test_r_ti16_layout_and_parameter_count():
    """vit_jax/configs/models.py get_r_ti16_config: Ti/16 sizes, patches
    8x8, resnet.num_layers = (), width factor 1. The root (7x7 stride-2
    StdConv to 64 channels, GroupNorm, ReLU, 3x3 stride-2 max-pool) then
    8x8 patches: total stride 32, 7 x 7 tokens + class token at 224."""
    model = keras_vit.create_model("R+Ti/16", num_classes=1000)
    spec = keras_vit.decode_variant("R+Ti/16")
    assert (spec.patch_size, spec.resnet_layers) == (8, ())
    assert keras_vit.model_stride(model) == 32
    resnet = model.get_layer("resnet")
    assert resnet.units == [] and resnet.stride == 4
    arrays = weights.model_arrays(model)
    shapes = {k: v.shape for k, v in arrays.items()}
    assert shapes["conv_root/kernel"] == (7, 7, 3, 64)
    assert shapes["gn_root/scale"] == (1, 1, 1, 64)
    assert shapes["embedding/kernel"] == (8, 8, 64, 192)
    assert shapes["Transformer/posembed_input/pos_embedding"] == (1, 50, 192)
    assert not any(k.startswith("block") for k in shapes)
    # The count, by hand: Ti/16 at 224 with 1000 classes (5,717,416, paper
    # facts) with its 16x16x3 patch kernel and 197-row position table
    # swapped for the 8x8x64 kernel and a 50-row table, plus the root conv
    # (7*7*3*64) and its GroupNorm (2*64).
    ti16 = 5_717_416
    expected = (ti16 - 16 * 16 * 3 * 192 + 8 * 8 * 64 * 192
                - 197 * 192 + 50 * 192 + 7 * 7 * 3 * 64 + 2 * 64)
    assert expected == 6_337_704
    assert model.count_params() == expected


@pytest.mark.slow
def test_other_augreg_hybrids_keep_their_layout():
    for variant, stages, tokens in (("R26+S/32", (2, 2, 2, 2), 49),
                                    ("R50+L/32", (3, 4, 6, 3), 49)):
        spec = keras_vit.decode_variant(variant)
        assert spec.resnet_layers == stages and spec.patch_size == 1
    model = keras_vit.create_model("R26+S/32", num_classes=10)
    assert keras_vit.model_stride(model) == 32
    assert model.get_layer("posembed_input").pos_embedding.shape[1] == 50


# -------------------------------------------------------- head bias init
def test_head_bias_init_through_the_config():
    from keras_vit import build
    from keras_vit.config import base_config

    config = base_config()
    config.model.update(dict(variant=None, head_bias_init=-10.0,
                             stochastic_depth_rate=0.1, posemb="sincos2d",
                             **TINY))
    config.model.image_size = 16
    model = build.build_run(config, num_classes=5)[0]
    np.testing.assert_array_equal(
        model.get_layer("head").bias.numpy(), np.full(5, -10.0, "float32")
    )
    assert model.get_layer("Transformer").stochastic_depth_rate == 0.1
    assert isinstance(model.get_layer("posembed_input"),
                      keras_vit.SinCosPositionEmbedding)


@pytest.mark.slow
def test_options_run_on_the_jax_backend():
    import subprocess
    import sys

    pytest.importorskip("jax")
    code = (
        "import numpy as np, keras, keras_vit\n"
        "assert keras.backend.backend() == 'jax'\n"
        "m = keras_vit.create_model(None, num_classes=3, image_size=16,"
        " patch_size=4, hidden_size=32, num_layers=2, num_heads=2,"
        " mlp_dim=32, head_zero_init=False, stochastic_depth_rate=0.5,"
        " posemb='sincos2d')\n"
        "x = np.random.default_rng(0).uniform(-1, 1, (8, 16, 16, 3))"
        ".astype('float32')\n"
        "a = np.asarray(m(x, training=True)); b = np.asarray(m(x))\n"
        "c = np.asarray(m(x, training=True))\n"
        "assert np.abs(a - c).max() > 1e-4 and np.isfinite(b).all()\n"
        "r = keras_vit.create_model('R+Ti/16', num_classes=10,"
        " image_size=64)\n"
        "assert r(np.zeros((1, 64, 64, 3), 'float32')).shape == (1, 10)\n"
        "print('ok')\n"
    )
    env = dict(os.environ, KERAS_BACKEND="jax", CUDA_VISIBLE_DEVICES="")
    run = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-3000:]

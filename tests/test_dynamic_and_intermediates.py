"""One model at any input size, and token features from chosen blocks.

Dynamic image size: the in-graph interpolation equals the loader's, so a
dynamic model's logits at a new size equal those of a model rebuilt at that
size with the loader's resized weights; .keras files, the JAX backend, the
hybrids, bad sizes and the serving export's variable-size signature.
Intermediates: shapes, the final norm on and off, one forward pass, and the
few-shot probe of a chosen block.
"""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import flags

import keras_vit
from keras_vit import build, embedding
from keras_vit import layers as vit_layers
from keras_vit.checkpoint import posemb
from keras_vit.checkpoint.resolution import rebuild_at_resolution
from keras_vit.checkpoint.weights import load_npz, save_npz
from keras_vit.commands import export as export_command
from keras_vit.commands import flags as cli_flags
from keras_vit.export import files as export_files

TINY = dict(
    patch_size=4, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64
)
# Float32 rounding of the interpolation (the loader's runs in float64)
# through two blocks: measured differences are below 1e-6.
ATOL = 1e-5


def numpy(x):
    return keras.ops.convert_to_numpy(x)


def images(h, w, batch=2, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (batch, h, w, 3)).astype("float32")


def pair(pooling="token", **kwargs):
    """A fixed-size model at 16 x 16 and a dynamic one with its weights."""
    fixed = keras_vit.create_model(
        None, num_classes=5, image_size=16, pooling=pooling,
        head_zero_init=False, **TINY, **kwargs,
    )
    dynamic = keras_vit.create_model(
        None, num_classes=5, image_size=16, pooling=pooling,
        head_zero_init=False, dynamic_image_size=True, **TINY, **kwargs,
    )
    dynamic.set_weights(fixed.get_weights())
    return fixed, dynamic


# ------------------------------------------------------- interpolation
@pytest.mark.parametrize(
    "old,new", [((4, 4), (6, 6)), ((4, 4), (3, 5)), ((3, 5), (8, 2)),
                ((4, 4), (1, 1)), ((1, 3), (4, 3)), ((4, 4), (4, 4))],
)
@pytest.mark.parametrize("prefix", [0, 1])
def test_graph_interpolation_equals_the_loaders(old, new, prefix):
    rng = np.random.default_rng(0)
    table = rng.normal(size=(1, prefix + old[0] * old[1], 8))
    table = table.astype("float32")
    want = posemb.resize_position_embedding(table, new, old, prefix)
    got = numpy(embedding.resize_grid(
        keras.ops.convert_to_tensor(table), old, new, prefix
    ))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    if old == new:
        np.testing.assert_array_equal(got, table)


def test_one_resizer_in_numpy_and_in_the_graph():
    """The loader's resize is the graph's function run in NumPy float64:
    the same code, so the graph's float32 result differs only by float32
    rounding, and the corners come through unchanged in both."""
    table = np.random.default_rng(1).normal(size=(1, 1 + 5 * 3, 4))
    table = table.astype("float32")
    host = embedding.resize_grid(table, (5, 3), (9, 7), 1,
                                 dtype="float64", xp=np)
    assert isinstance(host, np.ndarray) and host.dtype == np.float32
    np.testing.assert_array_equal(
        host, posemb.resize_position_embedding(table, (9, 7), (5, 3), 1)
    )
    graph = numpy(embedding.resize_grid(
        keras.ops.convert_to_tensor(table), (5, 3), (9, 7), 1
    ))
    np.testing.assert_allclose(graph, host, rtol=0, atol=1e-6)
    old = table[0, 1:].reshape(5, 3, 4)
    for new in (host, graph):
        grid = new[0, 1:].reshape(9, 7, 4)
        for (a, b), (c, d) in [((0, 0), (0, 0)), ((4, 2), (8, 6)),
                               ((0, 2), (0, 6)), ((4, 0), (8, 0))]:
            np.testing.assert_array_equal(grid[c, d], old[a, b])


# ------------------------------------------------- dynamic image size
@pytest.mark.parametrize("pooling", ["token", "gap"])
def test_dynamic_equals_a_model_rebuilt_at_each_size(pooling):
    fixed, dynamic = pair(pooling)
    assert dynamic.input_shape == (None, None, None, 3)
    assert dynamic.count_params() == fixed.count_params()
    x = images(16, 16)
    np.testing.assert_array_equal(numpy(dynamic(x)), numpy(fixed(x)))
    for size in [(24, 24), (12, 20), (32, 8)]:  # up, non-square, extreme
        rebuilt = rebuild_at_resolution(fixed, size)
        x = images(*size)
        want = numpy(rebuilt(x))
        got = numpy(dynamic(x))
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
        # Compiled prediction (a traced graph) gives the same.
        np.testing.assert_allclose(
            dynamic.predict(x, verbose=0), want, rtol=0, atol=ATOL
        )


def test_dynamic_hybrid_equals_rebuilt():
    kwargs = dict(patch_size=1, hidden_size=32, num_layers=1, num_heads=2,
                  mlp_dim=64, resnet_layers=(1, 1), head_zero_init=False)
    fixed = keras_vit.create_model(None, num_classes=3, image_size=32,
                                   **kwargs)
    dynamic = keras_vit.create_model(None, num_classes=3, image_size=32,
                                     dynamic_image_size=True, **kwargs)
    dynamic.set_weights(fixed.get_weights())
    assert keras_vit.model_stride(dynamic) == 8
    x = images(48, 24)
    np.testing.assert_allclose(
        numpy(dynamic(x)), numpy(rebuild_at_resolution(fixed, (48, 24))(x)),
        rtol=0, atol=ATOL,
    )
    with pytest.raises(ValueError, match="multiple of 8"):
        dynamic(images(36, 24))


def test_bad_size_names_the_fix():
    _, dynamic = pair()
    with pytest.raises(ValueError, match="height 18 is not divisible by 4"):
        dynamic(images(18, 16))
    with pytest.raises(ValueError, match="multiple of 4"):
        dynamic(images(16, 10))
    # In a graph with a run-time size, a failing reshape whose name says it.
    serve = tf.function(
        lambda x: dynamic(x),
        input_signature=[tf.TensorSpec((None, None, None, 3), tf.float32)],
        autograph=False,
    )
    assert serve(tf.zeros((1, 8, 12, 3))).shape == (1, 5)
    np.testing.assert_allclose(
        serve(images(12, 20)).numpy(), numpy(dynamic(images(12, 20))),
        rtol=0, atol=1e-5,  # a graph may fuse float32 ops another way
    )
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="image_height_must_be_a_multiple_of_4"):
        serve(tf.zeros((1, 9, 12, 3)))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="image_width_must_be_a_multiple_of_4"):
        serve(tf.zeros((1, 8, 14, 3)))
    # Keras's predict relaxes the traced sizes after a few; either way.
    for size in [(8, 8), (12, 16), (16, 20)]:
        dynamic.predict(images(*size), verbose=0)
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError),
                       match="multiple.of.4"):
        dynamic.predict(images(18, 8), verbose=0)
    # image_size=None is no dynamic size (it was the default, 224).
    with pytest.raises(ValueError, match=r"image_size=None: .*"
                       r"dynamic_image_size=True"):
        keras_vit.create_model("Ti/16", num_classes=5, image_size=None)


def test_dynamic_image_size_models_in_predict_and_evaluate(tmp_path):
    """keras-vit-predict and keras-vit-evaluate --mode=eval on .keras
    models saved with dynamic_image_size: one with a learned table reads
    images at the size it keeps it at (the same answers as that model
    rebuilt at a fixed size); one with sin-cos embeddings (kept at no
    size) gets one line naming the fix, evaluated with --image_size=N."""
    from tests import console

    learned, sincos = str(tmp_path / "d.keras"), str(tmp_path / "s.keras")
    dynamic = keras_vit.create_model(
        None, num_classes=2, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16, dynamic_image_size=True)
    dynamic.save(learned)
    fixed = str(tmp_path / "f.keras")
    rebuild_at_resolution(dynamic, (16, 16)).save(fixed)
    keras_vit.create_model(
        None, num_classes=2, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16, posemb="sincos2d",
        dynamic_image_size=True).save(sincos)
    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        (tmp_path / "photos" / name).mkdir(parents=True)
        for i in range(3):
            tf.io.write_file(
                str(tmp_path / "photos" / name / f"{i}.png"),
                tf.io.encode_png(rng.integers(0, 256, (20, 24, 3), np.uint8)))
    photo = str(tmp_path / "photos" / "cat" / "0.png")
    data = ["--dataset=folder", f"--data_dir={tmp_path / 'photos'}",
            "--split=train+val"]

    def ran(command, *args):
        result = console.run(command, list(args))
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout

    assert ran("predict", f"--model={learned}", photo) == ran(
        "predict", f"--model={fixed}", photo)
    scores = [json.loads(ran("evaluate", "--mode=eval", f"--model={m}",
                             *data)) for m in (learned, fixed)]
    assert scores[0]["num_examples"] == 6
    assert scores[0]["accuracy"] == scores[1]["accuracy"]
    assert scores[0]["loss"] == pytest.approx(scores[1]["loss"], abs=1e-5)
    for command, args, fix in (
            ("predict", [photo], "keras-vit-convert --model="),
            ("evaluate", ["--mode=eval", *data], "pass --image_size=N")):
        result = console.run(command, [f"--model={sincos}", *args])
        assert result.returncode == 1 and "Traceback" not in result.stderr
        (line,) = [x for x in result.stderr.splitlines()
                   if x.startswith(f"keras-vit-{command}: error: ")]
        assert "saved with a dynamic image size" in line and fix in line
    assert json.loads(ran("evaluate", "--mode=eval", f"--model={sincos}",
                          "--image_size=16", *data))["num_examples"] == 6
    # A resize below the size the model is read at: one line, not
    # TensorFlow's shape check inside the pipeline.
    result = console.run("evaluate", ["--mode=eval", f"--model={learned}",
                                      "--resize_size=8", *data])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert ("--resize_size 8 is smaller than the model's input 16x16"
            in result.stderr)


def test_keras_file_round_trip_at_two_sizes(tmp_path):
    _, dynamic = pair()
    path = str(tmp_path / "dynamic.keras")
    dynamic.save(path)
    again = keras.models.load_model(path, compile=False)
    assert again.input_shape == (None, None, None, 3)
    assert again.get_layer("posembed_input").grid_size == (4, 4)
    for size in [(16, 16), (20, 12)]:
        x = images(*size)
        np.testing.assert_array_equal(numpy(again(x)), numpy(dynamic(x)))


def test_position_embedding_config_round_trip():
    layer = embedding.PositionEmbedding(
        0.1, grid_size=(3, 5), stride=16, num_prefix_tokens=1
    )
    config = layer.get_config()
    clone = embedding.PositionEmbedding.from_config(config)
    assert clone.get_config() == config
    assert (clone.grid_size, clone.stride, clone.num_prefix_tokens) == (
        (3, 5), 16, 1
    )
    with pytest.raises(ValueError, match="stride"):
        embedding.PositionEmbedding(grid_size=(3, 5))


def test_npz_loads_into_a_dynamic_model(tmp_path):
    fixed, _ = pair()
    path = str(tmp_path / "w.npz")
    save_npz(fixed, path)
    dynamic = keras_vit.create_model(
        None, num_classes=5, image_size=16, dynamic_image_size=True, **TINY
    )
    report = load_npz(dynamic, path)
    assert report.posemb_resized is None
    x = images(16, 16)
    np.testing.assert_array_equal(numpy(dynamic(x)), numpy(fixed(x)))
    # A table of another grid is resized on load to the model's grid.
    other = keras_vit.create_model(
        None, num_classes=5, image_size=(24, 12), dynamic_image_size=True,
        **TINY,
    )
    report = load_npz(other, path)
    assert report.posemb_resized == ((4, 4), (6, 3))
    assert keras_vit.input_image_size(other) == (24, 12)


def test_with_dynamic_image_size_copies_a_fixed_model():
    fixed, dynamic = pair(representation_size=8)
    copy = keras_vit.with_dynamic_image_size(fixed)
    assert copy.input_shape == (None, None, None, 3)
    assert keras_vit.input_image_size(copy) == (16, 16)
    assert keras_vit.with_dynamic_image_size(copy) is copy
    x = images(12, 28)
    np.testing.assert_array_equal(numpy(copy(x)), numpy(dynamic(x)))
    assert fixed.input_shape == (None, 16, 16, 3)  # left as it was


def test_rebuild_at_resolution_fixes_a_dynamic_model():
    _, dynamic = pair()
    fixed = rebuild_at_resolution(dynamic, (12, 20))
    assert fixed.input_shape == (None, 12, 20, 3)
    assert fixed.get_layer("posembed_input").grid_size is None
    assert fixed.get_layer("posembed_input").pos_embedding.shape == (
        1, 1 + 3 * 5, 32
    )
    x = images(12, 20)
    np.testing.assert_allclose(
        numpy(fixed(x)), numpy(dynamic(x)), rtol=0, atol=ATOL
    )


def test_attention_model_of_a_dynamic_model():
    _, dynamic = pair()
    attention = keras_vit.attention_model(dynamic)
    for h, w in [(16, 16), (8, 20)]:
        x = images(h, w)
        out, weights = attention(x)
        tokens = 1 + (h // 4) * (w // 4)
        assert [tuple(a.shape) for a in weights] == [(2, 2, tokens, tokens)] * 2
        np.testing.assert_allclose(
            numpy(out), numpy(dynamic(x)), rtol=0, atol=1e-5
        )


@pytest.mark.slow
def test_jax_backend_runs_two_sizes(tmp_path):
    """On JAX: a dynamic model built there gives the rebuilt models'
    logits at two sizes, called eagerly and through compiled predict."""
    pytest.importorskip("jax")
    script = textwrap.dedent(
        """
        import numpy as np, keras, keras_vit
        from keras_vit.checkpoint.resolution import rebuild_at_resolution
        assert keras.backend.backend() == "jax"
        tiny = dict(patch_size=4, hidden_size=32, num_layers=2,
                    num_heads=2, mlp_dim=64, head_zero_init=False)
        fixed = keras_vit.create_model(None, num_classes=5, image_size=16,
                                       **tiny)
        dynamic = keras_vit.create_model(None, num_classes=5,
                                         image_size=16,
                                         dynamic_image_size=True, **tiny)
        dynamic.set_weights(fixed.get_weights())
        rng = np.random.default_rng(0)
        worst = 0.0
        for size in [(24, 24), (12, 20)]:
            x = rng.uniform(-1, 1, (2,) + size + (3,)).astype("float32")
            want = np.asarray(rebuild_at_resolution(fixed, size)(x))
            for got in (np.asarray(dynamic(x)),
                        dynamic.predict(x, verbose=0)):
                worst = max(worst, float(np.abs(got - want).max()))
        grid = keras_vit.intermediate_model(dynamic, (0, -1),
                                            output="grid")
        shapes = [tuple(v.shape) for v in grid(x).values()]
        assert shapes == [(2, 3, 5, 32)] * 2, shapes
        try:
            dynamic(np.zeros((1, 18, 16, 3), "float32"))
        except ValueError as e:
            assert "multiple of 4" in str(e)
        else:
            raise AssertionError("no error for 18 x 16")
        print("JAX_OK", worst)
        """
    )
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True,
        text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = [s for s in result.stdout.splitlines() if s.startswith("JAX_OK")]
    assert line and float(line[0].split()[1]) < ATOL, result.stdout


def test_export_serves_any_size(tmp_path):
    pytest.importorskip("tensorflow_serving")
    from keras_vit.export.saved_model import export_model

    fixed, _ = pair()
    photo = tf.io.encode_png(np.full((20, 28, 3), 90, np.uint8)).numpy()
    path = export_model(fixed, str(tmp_path), warmup_images=[photo],
                        dynamic_size=True)
    loaded = tf.saved_model.load(path)
    assert "predict_any_size" in loaded.signatures
    # The warm-up touches every signature, this one too (a first request
    # to it after each load would pay its tracing), and each answers it.
    warmup = [log.predict_log.request for log in export_files.read_warmup_file(
        os.path.join(path, "assets.extra", "tf_serving_warmup_requests"))]
    assert {r.model_spec.signature_name for r in warmup} == set(
        loaded.signatures)
    for request in warmup:
        loaded.signatures[request.model_spec.signature_name](**{
            k: tf.constant(v)
            for k, v in export_files.request_inputs(request).items()})
    with open(os.path.join(path, "assets.extra", "export.json")) as f:
        info = json.load(f)
    assert "predict_any_size" in info["signatures"]
    assert info["image_size"] == [16, 16]
    rng = np.random.default_rng(1)
    for size in [(16, 16), (12, 24)]:
        pixels = rng.uniform(0, 255, (2,) + size + (3,)).astype("float32")
        got = loaded.signatures["predict_any_size"](
            images=tf.constant(pixels)
        )["probabilities"].numpy()
        logits = numpy(rebuild_at_resolution(fixed, size)(
            pixels / 127.5 - 1.0
        ))
        np.testing.assert_allclose(
            got, tf.nn.softmax(logits).numpy(), rtol=0, atol=1e-5
        )
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="multiples of 4"):
        loaded.signatures["predict_any_size"](
            images=tf.zeros((1, 10, 16, 3))
        )
    # At most 4 times the model's 4 x 4 patches: 8 x 8 runs, 9 x 8 is
    # refused before the attention is computed (a huge declared shape
    # would hold the server's memory).
    assert loaded.signatures["predict_any_size"](images=tf.zeros(
        (1, 32, 32, 3)))["probabilities"].shape[0] == 1
    with pytest.raises(tf.errors.InvalidArgumentError, match=(
            "predict_any_size runs images of at most 64 patches of 4 \\(4 "
            "times those of the exported 16 x 16\\): send smaller images")):
        loaded.signatures["predict_any_size"](
            images=tf.zeros((1, 36, 32, 3)))
    # An empty batch declaring sides whose patches overflow int32.
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="predict_any_size runs images of at most 64"):
        loaded.signatures["predict_any_size"](
            images=tf.zeros((0, 741456, 741456, 3)))
    # keras-vit-export --dynamic_size asks for the signature.
    values = flags.FlagValues()
    argv = ["keras-vit-export", "--export_dir=x", "--model=m.keras",
            "--dynamic_size"]
    export_command.define_flags(values, argv)
    cli_flags.define_verbose(values)
    cli_flags.parse(values, argv)
    assert values.dynamic_size


# ------------------------------------------------------ intermediates
def reference_blocks(model, x):
    """Every block's output, run one block at a time from the encoder's
    input (all tokens), and the final norm."""
    encoder = model.get_layer("Transformer")
    start = keras.Model(model.input, encoder.input)
    y = start(x)
    outputs = []
    for block in encoder.blocks:
        y = block(y)
        outputs.append(numpy(y))
    return outputs, lambda t: numpy(encoder.encoder_norm(t))


@pytest.mark.parametrize("pooling", ["token", "gap"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_intermediate_shapes(pooling, dynamic):
    fixed, dyn = pair(pooling)
    model = dyn if dynamic else fixed
    h, w = (12, 20) if dynamic else (16, 16)
    x = images(h, w)
    prefix = int(pooling == "token")
    tokens = keras_vit.intermediate_model(model, (0, -1))(x)
    assert list(tokens) == ["block_0", "block_1"]
    for value in tokens.values():
        assert value.shape == (2, prefix + (h // 4) * (w // 4), 32)
    grid = keras_vit.intermediate_model(model, [1, 0], output="grid")(x)
    assert list(grid) == ["block_1", "block_0"]
    for name, value in grid.items():
        assert value.shape == (2, h // 4, w // 4, 32)
        # Row-major patches, the class token left out.
        np.testing.assert_array_equal(
            numpy(value).reshape(2, -1, 32), numpy(tokens[name])[:, prefix:]
        )


@pytest.mark.parametrize("norm", [False, True])
def test_intermediates_equal_blocks_run_by_hand(norm):
    fixed, _ = pair()
    x = images(16, 16)
    want, final_norm = reference_blocks(fixed, x)
    got = keras_vit.intermediate_model(fixed, (0, 1), norm=norm)(x)
    for i in (0, 1):
        expected = final_norm(want[i]) if norm else want[i]
        np.testing.assert_allclose(
            numpy(got[f"block_{i}"]), expected, rtol=0, atol=1e-5
        )


def test_one_forward_pass_matches_the_models_own_outputs():
    """The last block, normalised, is the encoder's output; its class token
    is the model's pooled representation (the default model computes only
    that token in its last block: the fast path still agrees)."""
    model = keras_vit.create_model(
        None, num_classes=5, image_size=16, all_tokens=True, **TINY
    )
    x = images(16, 16)
    both = keras_vit.intermediate_model(model, (-1,), norm=True)(x)
    encoder_out = keras.Model(
        model.input, model.get_layer("Transformer").output
    )(x)
    np.testing.assert_allclose(
        numpy(both["block_1"]), numpy(encoder_out), rtol=0, atol=1e-5
    )
    fast = keras_vit.create_model(None, num_classes=5, image_size=16, **TINY)
    fast.set_weights(model.get_weights())
    pooled = numpy(keras_vit.features_model(fast)(x))
    last = keras_vit.intermediate_model(fast, -1, norm=True)(x)["block_1"]
    np.testing.assert_allclose(numpy(last)[:, 0], pooled, rtol=0, atol=1e-5)


def test_intermediates_of_a_bfloat16_model_declare_its_dtype():
    """Under mixed bfloat16 the blocks' outputs are bfloat16, and the
    derived model says so (its outputs' specs were float32)."""
    with build.dtype_policy("bfloat16"):
        model = keras_vit.create_model(
            None, num_classes=5, image_size=16, patch_size=8,
            hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64)
    derived = keras_vit.intermediate_model(model, (0, 1))
    got = derived(np.zeros((1, 16, 16, 3), np.float32))
    got = list(got.values()) if isinstance(got, dict) else list(got)
    assert [o.dtype for o in derived.outputs] == ["bfloat16"] * 2
    assert [keras.backend.standardize_dtype(o.dtype) for o in got] == [
        "bfloat16"] * 2


def test_blocks_run_once_up_to_the_deepest_asked(monkeypatch):
    model = keras_vit.create_model(
        None, num_classes=5, image_size=16,
        **dict(TINY, num_layers=4),
    )
    features = keras_vit.intermediate_model(model, (2, 0, 1))
    calls = []
    original = vit_layers.EncoderBlock.call

    def counting(self, *args, **kwargs):
        calls.append(self.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(vit_layers.EncoderBlock, "call", counting)
    features(images(16, 16))
    assert calls == ["encoderblock_0", "encoderblock_1", "encoderblock_2"]


def test_intermediate_errors_name_the_fix():
    fixed, _ = pair()
    with pytest.raises(ValueError, match="0 to 1"):
        keras_vit.intermediate_model(fixed, 2)
    with pytest.raises(ValueError, match="twice"):
        keras_vit.intermediate_model(fixed, (1, -1))
    with pytest.raises(ValueError, match="tokens"):
        keras_vit.intermediate_model(fixed, 0, output="map")
    with pytest.raises(ValueError, match="empty"):
        keras_vit.intermediate_model(fixed, ())


# ----------------------------------------------------------- few-shot
def test_fewshot_probe_of_a_chosen_block():
    from keras_vit.config_schema import evaluator
    from keras_vit.evaluation import fewshot

    assert evaluator("fewshot").layer is None
    assert evaluator("fewshot").layer_norm is True
    model = keras_vit.create_model(
        None, num_classes=10, image_size=32, patch_size=8, hidden_size=32,
        num_layers=2, num_heads=2, mlp_dim=64, head_zero_init=False,
    )
    x = images(32, 32)
    # The last block, normalised, is the pre-logits representation here.
    np.testing.assert_allclose(
        numpy(fewshot.probe_model(model, -1)(x)),
        numpy(fewshot.probe_model(model)(x)), rtol=0, atol=1e-5,
    )
    block0 = numpy(fewshot.probe_model(model, 0, norm=False)(x))
    want, _ = reference_blocks(model, x)
    np.testing.assert_allclose(block0, want[0][:, 0], rtol=0, atol=1e-5)
    data = fewshot.FewShotData("digits", "digits", "train", "test")
    results, not_run = fewshot.run(
        model, dict(shots=(5,), seeds=(0,), batch_size=200, layer=0),
        [data], image_size=32, resize_size=36,
    )
    assert not_run == {}
    assert 0.0 <= results["digits"]["5"]["mean"] <= 1.0

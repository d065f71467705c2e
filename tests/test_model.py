"""Model tests: golden parameter counts, layer contracts, serialisation,
construction errors, the features/attention views, the JAX backend."""

import json
import os
import subprocess
import sys
import textwrap
import warnings

import keras
import numpy as np
import pytest
import scipy.special
import tensorflow as tf

import keras_vit
from keras_vit import attention as vit_attention
from keras_vit import embedding as vit_embedding
from keras_vit import layers as vit_layers
from keras_vit.build import dtype_policy
from keras_vit.checkpoint.weights import save_npz
from keras_vit.model import HYBRID_RESNETS, VARIANTS, Numerics, policy_scope
from tests import numpy_reference as ref

# Paper / official repository values: 224 x 224 input, class token, no
# pre-logits, 1000 classes (see shared reference paper_facts.md). S/32 and B/8
# are not in the paper's table; they are checked against the analytic count
# below, which is written independently of the model code.
GOLDEN = {
    "Ti/16": 5_717_416,
    "S/16": 22_050_664,
    "S/32": 22_878_952,
    "B/16": 86_567_656,
    "B/32": 88_224_232,
    "B/8": 86_576_872,
    "L/16": 304_326_632,
    "L/32": 306_535_400,
    "H/14": 632_045_800,
}

SIZES = {  # width, depth, mlp, heads
    "Ti": (192, 12, 768, 3),
    "S": (384, 12, 1536, 6),
    "B": (768, 12, 3072, 12),
    "L": (1024, 24, 4096, 16),
    "H": (1280, 32, 5120, 16),
}


def analytic_count(d, depth, mlp, patch, image=224, classes=1000, tokens_cls=1):
    n = (image // patch) ** 2 + tokens_cls
    embed = patch * patch * 3 * d + d
    block = 2 * 2 * d + 4 * (d * d + d) + (d * mlp + mlp) + (mlp * d + d)
    return embed + d + n * d + depth * block + 2 * d + d * classes + classes


TINY = dict(
    patch_size=4, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64
)


def tiny(**kwargs):
    args = dict(TINY, num_classes=7, image_size=16, head_zero_init=False)
    args.update(kwargs)
    return keras_vit.create_model(None, **args)


def images(n=2, h=16, w=16, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, h, w, 3)).astype("float32")


def test_golden_table_covers_every_plain_variant():
    plain = {v for v in VARIANTS if v not in HYBRID_RESNETS}
    assert plain == set(GOLDEN), "add the new variant to GOLDEN"


@pytest.mark.parametrize("variant", sorted(GOLDEN))
def test_golden_parameter_count(variant):
    width, patch = variant.split("/")
    assert GOLDEN[variant] == analytic_count(*SIZES[width][:3], int(patch))
    model = keras_vit.create_model(variant, num_classes=1000)
    assert model.count_params() == GOLDEN[variant]
    del model
    keras.backend.clear_session()


def test_imagenet21k_head_with_pre_logits():
    model = keras_vit.create_model(
        "B/16", num_classes=21843, representation_size=768
    )
    assert model.count_params() == 103_186_515


def test_gap_has_no_class_token():
    token = tiny()
    gap = tiny(pooling="gap")
    assert token.count_params() - gap.count_params() == 32 + 32  # cls + 1 pos
    assert "cls" not in [layer.name for layer in gap.layers]


def test_outputs_and_features():
    model = tiny(representation_size=16)
    x = images()
    assert model(x).shape == (2, 7)
    features = keras_vit.features_model(model)
    assert features(x).shape == (2, 16)
    assert features.count_params() == model.count_params() - (16 * 7 + 7)
    # The head applied to the features gives the logits.
    head = model.get_layer("head")
    np.testing.assert_allclose(
        head(features(x)), model(x), rtol=1e-6, atol=1e-6
    )
    assert keras_vit.create_model(
        None, num_classes=0, image_size=16, **TINY
    )(x).shape == (2, 32)


def test_head_zero_init():
    model = keras_vit.create_model(None, num_classes=5, image_size=16, **TINY)
    np.testing.assert_array_equal(model(images()), np.zeros((2, 5)))


def test_head_bias_init(tmp_path):
    """The pre-training recipe's head bias (-10): every logit starts there,
    a sigmoid gives each class ~4.5e-5, and the value survives .keras."""
    model = keras_vit.create_model(
        None, num_classes=5, image_size=16, head_bias_init=-10.0, **TINY
    )
    logits = keras.ops.convert_to_numpy(model(images()))
    np.testing.assert_array_equal(logits, np.full((2, 5), -10.0))
    np.testing.assert_allclose(1 / (1 + np.exp(10.0)), 4.54e-5, rtol=1e-3)
    path = str(tmp_path / "m.keras")
    model.save(path)
    again = keras.models.load_model(path, compile=False)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(again(images())), logits
    )
    fresh = keras.models.clone_model(again)  # re-initialised from config
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(fresh.get_layer("head").bias),
        np.full((5,), -10.0),
    )


def test_non_square_image():
    model = tiny(image_size=(16, 24))
    assert model(images(h=16, w=24)).shape == (2, 7)
    pos = model.get_layer("posembed_input").pos_embedding
    assert tuple(pos.shape) == (1, 4 * 6 + 1, 32)


def test_attention_model_shares_weights():
    model = tiny()
    attn = keras_vit.attention_model(model)
    out, weights = attn(images())
    assert attn.count_params() == model.count_params()
    # Explicit softmax path vs the fused attention op: float32 noise only.
    np.testing.assert_allclose(out, model(images()), rtol=1e-5, atol=1e-5)
    assert len(weights) == 2
    assert weights[0].shape == (2, 4, 17, 17)
    np.testing.assert_allclose(np.sum(weights[1], -1), 1.0, rtol=1e-5)


def test_last_block_computes_only_the_class_token():
    """With token pooling the last block skips every other token's row:
    same logits and same gradients as computing all tokens."""
    import tensorflow as tf

    pruned = tiny(dropout_rate=0.0)
    full = tiny(all_tokens=True)
    full.set_weights(pruned.get_weights())
    assert pruned.get_layer("Transformer").output.shape == (None, 1, 32)
    assert full.get_layer("Transformer").output.shape == (None, 17, 32)
    assert tiny(pooling="gap").get_layer("Transformer").output.shape == (
        None, 16, 32
    )
    x = images(4)
    labels = tf.constant([0, 3, 6, 1])
    grads, logits = [], []
    for model in (pruned, full):
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels, out)
            )
        logits.append(out.numpy())
        grads.append(tape.gradient(loss, model.trainable_variables))
    np.testing.assert_allclose(logits[0], logits[1], rtol=1e-5, atol=1e-6)
    assert len(grads[0]) == len(grads[1])
    for g_pruned, g_full in zip(*grads):
        np.testing.assert_allclose(g_pruned, g_full, rtol=1e-4, atol=1e-6)
    # The last block's own weights get gradient (it is computed, not cut).
    last = pruned.get_layer("Transformer").blocks[-1]
    names = [v.path for v in pruned.trainable_variables]
    i = names.index(last.mlp1.kernel.path)
    assert np.abs(grads[0][i]).sum() > 0
    # Attention maps (the analysis path) still cover every query token.
    _, weights = keras_vit.attention_model(pruned)(x)
    assert weights[-1].shape == (4, 4, 17, 17)


def _randomise(model, seed=5):
    """Every weight random, biases and LayerNorm shifts included (the
    default init leaves them at zero, which would hide folding errors)."""
    rng = np.random.default_rng(seed)
    for w in model.weights:
        scale = 0.5 if w.path.endswith(("gamma", "beta", "bias")) else 0.2
        w.assign(rng.normal(size=w.shape).astype("float32") * scale)


def _reference_attention_weights(arrays, block, x):
    """Softmax attention weights of block `block` on encoder input `x`,
    (batch, heads, tokens, tokens), in NumPy float64 from the .npz arrays."""
    pre = f"Transformer/encoderblock_{block}/"
    att = pre + "MultiHeadDotProductAttention_1/"
    p = {k: np.asarray(v, np.float64) for k, v in arrays.items()}
    y = ref.layer_norm(x, p[pre + "LayerNorm_0/scale"],
                       p[pre + "LayerNorm_0/bias"])

    def proj(name):
        return (np.einsum("btd,dhk->bthk", y, p[f"{att}{name}/kernel"])
                + p[f"{att}{name}/bias"])

    q, k = proj("query"), proj("key")
    logits = np.einsum("bqhk,bthk->bhqt", q / np.sqrt(q.shape[-1]), k)
    return ref.softmax(logits, axis=-1)


@pytest.mark.parametrize(
    "kwargs", [dict(), dict(all_tokens=True), dict(pooling="gap")],
    ids=["class-token-last-block", "all-tokens", "gap"],
)
def test_training_and_inference_calls_match_the_numpy_reference(
    kwargs, tmp_path
):
    """One path for both calls: with dropout at 0, a training call and an
    inference call give the logits of the independent NumPy forward pass
    (tests/numpy_reference.py) on the same weights, every bias and
    LayerNorm shift random; and the attention maps are its softmax."""
    model = tiny(dropout_rate=0.0, **kwargs)
    _randomise(model)
    save_npz(model, tmp_path / "w.npz")
    arrays = dict(np.load(tmp_path / "w.npz"))
    x = images(3)
    want = ref.forward(arrays, x)
    assert np.abs(want).max() > 1.0  # a real signal, not zeros
    for training in (False, True):
        got = keras.ops.convert_to_numpy(model(x, training=training))
        np.testing.assert_allclose(got, want, rtol=0,
                                   atol=2e-5 * np.abs(want).max())
    encoder = model.get_layer("Transformer")
    tokens = np.random.default_rng(2).normal(size=(2, 16, 32))
    tokens = tokens.astype("float32")
    for training in (False, True):
        _, maps = encoder(tokens, training=training,
                          return_attention_scores=True)
        assert maps[0].shape == (2, 4, 16, 16)
        np.testing.assert_allclose(
            maps[0], _reference_attention_weights(arrays, 0, tokens),
            rtol=0, atol=1e-5,
        )


def test_a_gap_model_over_one_patch_matches_the_reference_quietly(tmp_path):
    """A GAP model whose image is one patch attends over one token: its
    weight is exactly 1 (Keras's softmax warned that it always is), and
    the logits and their gradients are the NumPy reference's, with no
    warning, in training and inference calls."""
    model = tiny(dropout_rate=0.0, pooling="gap", image_size=8,
                 patch_size=8)
    _randomise(model)
    save_npz(model, tmp_path / "w.npz")
    x = images(3, 8, 8)
    want = ref.forward(dict(np.load(tmp_path / "w.npz")), x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for training in (False, True):
            got = keras.ops.convert_to_numpy(model(x, training=training))
            np.testing.assert_allclose(got, want, rtol=0,
                                       atol=2e-5 * np.abs(want).max())
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x, training=True) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
    assert all(g is not None and np.isfinite(g).all() for g in grads)
    _, maps = model.get_layer("Transformer")(
        np.ones((2, 1, model.architecture.hidden_size), "float32"),
        return_attention_scores=True)
    np.testing.assert_array_equal(maps[0], np.ones((2, 4, 1, 1)))


def test_mixed_bfloat16_within_bfloat16_rounding():
    """Under mixed_bfloat16 the model stays within bfloat16 rounding of
    the float32 model with the same weights, in training and inference
    calls, with float32 logits."""
    ref_model = tiny(dropout_rate=0.0)
    _randomise(ref_model)
    with dtype_policy("bfloat16"):
        mixed = tiny(dropout_rate=0.0)
    mixed.set_weights(ref_model.get_weights())
    x = images(3)
    want = keras.ops.convert_to_numpy(ref_model(x))
    for training in (False, True):
        got = mixed(x, training=training)
        assert keras.backend.standardize_dtype(got.dtype) == "float32"
        got = keras.ops.convert_to_numpy(got)
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 0.02, (training, err)


@pytest.mark.parametrize("policy, tolerance", [("bfloat16", 0.02),
                                               ("float16", 0.003)])
def test_a_whole_16_bit_policy_within_its_rounding(policy, tolerance):
    """Under Keras's float16 or bfloat16 policy (weights in 16 bits too,
    not mixed) the model runs, within that type's rounding of the float32
    model with the same weights (its LayerNorm multiplied float32
    statistics by 16-bit weights, which TensorFlow refuses)."""
    ref_model = tiny(dropout_rate=0.0)
    _randomise(ref_model)
    with policy_scope(policy):
        half = tiny(dropout_rate=0.0)
    assert policy in {keras.backend.standardize_dtype(w.dtype)
                      for w in half.weights}
    half.set_weights(ref_model.get_weights())
    x = images(3)
    want = keras.ops.convert_to_numpy(ref_model(x))
    got = keras.ops.convert_to_numpy(keras.ops.cast(half(x), "float32"))
    assert np.abs(got - want).max() / np.abs(want).max() < tolerance


def test_attention_first_token_only_is_the_first_row():
    """`first_token_only` gives the first query's row of the full output
    (keys and values from every token), and `flat` the same rows as a
    (batch * queries, width) matrix."""
    layer = vit_attention.MultiHeadSelfAttention(num_heads=2)
    layer.build((None, 5, 8))
    rng = np.random.default_rng(4)
    for w in layer.weights:
        w.assign(rng.normal(size=w.shape).astype("float32") * 0.5)
    x = rng.normal(size=(3, 5, 8)).astype("float32")
    full = keras.ops.convert_to_numpy(layer(x))
    first = keras.ops.convert_to_numpy(layer(x, first_token_only=True))
    assert first.shape == (3, 1, 8)
    np.testing.assert_allclose(first, full[:, :1], rtol=1e-6, atol=1e-6)
    flat = keras.ops.convert_to_numpy(layer(x, flat=True))
    np.testing.assert_array_equal(flat, full.reshape(15, 8))


def test_numerics_follow_the_official_implementation():
    model = tiny()
    block = model.get_layer("Transformer").blocks[0]
    assert block.norm1.epsilon == 1e-6
    assert model.get_layer("Transformer").encoder_norm.epsilon == 1e-6
    # tanh-approximate GELU: compare one MLP against NumPy.
    x = np.random.default_rng(1).normal(size=(1, 5, 32)).astype("float32")
    h = block.mlp1(x).numpy()
    gelu_tanh = 0.5 * h * (
        1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3))
    )
    y = block.mlp2(keras.ops.gelu(block.mlp1(x), approximate=True)).numpy()
    np.testing.assert_allclose(y, block.mlp2(gelu_tanh).numpy(), atol=1e-6)


def test_numerics_for_pytorch_trained_weights():
    """`Numerics` sets every block's GELU and every LayerNorm's epsilon
    (Hugging Face: exact GELU, 1e-12); parameters do not change."""
    model = tiny(numerics=Numerics(approximate_gelu=False,
                                   layer_norm_epsilon=1e-12))
    assert model.count_params() == tiny().count_params()
    encoder = model.get_layer("Transformer")
    assert encoder.encoder_norm.epsilon == 1e-12
    for block in encoder.blocks:
        assert block.norm1.epsilon == block.norm2.epsilon == 1e-12
        assert not block.approximate_gelu
    x = np.random.default_rng(1).normal(size=(4, 32)).astype("float32")
    h = keras.ops.convert_to_numpy(block.mlp1.kernel)
    h = x @ h + keras.ops.convert_to_numpy(block.mlp1.bias)
    exact = 0.5 * h * (1 + scipy.special.erf(h / np.sqrt(2)))
    np.testing.assert_allclose(block.mlp1(x), exact, rtol=1e-5, atol=1e-5)


def _norm_pair(shape, axis=-1):
    """(keras_vit LayerNorm, Keras LayerNormalization) with equal weights."""
    ours = vit_layers.LayerNorm(axis=axis, epsilon=1e-6)
    ref = keras.layers.LayerNormalization(axis=axis, epsilon=1e-6)
    ours.build(shape)
    ref.build(shape)
    rng = np.random.default_rng(3)
    weights = [rng.normal(size=w.shape).astype("float32")
               for w in ref.weights]
    ours.set_weights(weights)
    ref.set_weights(weights)
    assert [w.name for w in ours.weights] == [w.name for w in ref.weights]
    return ours, ref, weights


def test_layer_norm_matches_keras_and_float64():
    shape = (2, 7, 48)
    ours, ref, (gamma, beta) = _norm_pair(shape)
    rng = np.random.default_rng(4)
    # A large common offset: a one-pass E[x^2] - E[x]^2 would lose it.
    x = (rng.normal(size=shape) * 3 + 200).astype("float32")
    x64 = x.astype("float64")
    mean = x64.mean(-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(-1, keepdims=True)
    expected = (x64 - mean) / np.sqrt(var + 1e-6) * gamma + beta
    np.testing.assert_allclose(ours(x), expected, rtol=0, atol=2e-4)
    np.testing.assert_allclose(ours(x), ref(x), rtol=0, atol=2e-4)
    # Gradients with respect to the input, gamma and beta agree with Keras's.
    xt = keras.ops.convert_to_tensor(x - 200)
    upstream = rng.normal(size=shape).astype("float32")
    grads = [_input_and_weight_grads(layer, xt, upstream)
             for layer in (ours, ref)]
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # Another axis falls back to Keras's own computation.
    ours1, ref1, _ = _norm_pair(shape, axis=1)
    np.testing.assert_array_equal(ours1(x), ref1(x))


def test_layer_norm_saves_and_loads(tmp_path):
    ours, _, _ = _norm_pair((2, 5, 8))
    inputs = keras.Input((5, 8))
    model = keras.Model(inputs, ours(inputs))
    path = str(tmp_path / "norm.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.layers[-1], vit_layers.LayerNorm)
    assert loaded.layers[-1].get_config() == ours.get_config()
    x = np.random.default_rng(6).normal(size=(2, 5, 8)).astype("float32")
    np.testing.assert_array_equal(loaded(x), model(x))


def _input_and_weight_grads(layer, x, upstream):
    import tensorflow as tf

    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = keras.ops.sum(y * upstream)
    return [g.numpy() for g in tape.gradient(loss, [x] + layer.weights)]


def test_layer_norm_statistics_in_float32_under_mixed_precision():
    shape = (2, 5, 32)
    x = np.random.default_rng(5).normal(size=shape).astype("float32") + 50
    ours = vit_layers.LayerNorm(epsilon=1e-6, dtype="mixed_bfloat16")
    ref = keras.layers.LayerNormalization(
        epsilon=1e-6, dtype="mixed_bfloat16"
    )
    xb = keras.ops.cast(x, "bfloat16")
    y, y_ref = ours(xb), ref(xb)
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
    assert ours.gamma.dtype == "float32"
    np.testing.assert_array_equal(
        keras.ops.cast(y, "float32"), keras.ops.cast(y_ref, "float32")
    )


def test_layer_norm_equals_keras_under_a_bfloat16_policy():
    """Weights in bfloat16 (not mixed): Keras's layer's result."""
    x = np.random.default_rng(6).normal(size=(2, 5, 32)).astype("float32")
    ours = vit_layers.LayerNorm(epsilon=1e-6, dtype="bfloat16")
    ref = keras.layers.LayerNormalization(epsilon=1e-6, dtype="bfloat16")
    ours.build(x.shape)
    ref.build(x.shape)
    rng = np.random.default_rng(7)
    for a, b in zip(ours.weights, ref.weights):
        value = rng.normal(size=a.shape).astype("float32")
        a.assign(value)
        b.assign(value)
    xb = keras.ops.cast(x, "bfloat16")
    np.testing.assert_array_equal(
        keras.ops.cast(ours(xb), "float32"), keras.ops.cast(ref(xb),
                                                            "float32"))


def test_dropout_active_only_in_training():
    model = tiny(dropout_rate=0.5, attention_dropout_rate=0.5)
    x = images()
    np.testing.assert_array_equal(model(x), model(x))
    assert not np.allclose(model(x, training=True), model(x))


LAYERS = [
    (vit_embedding.PatchEmbedding(4, 8), (2, 8, 8, 3)),
    (vit_embedding.ClassToken(), (2, 5, 8)),
    (vit_embedding.PositionEmbedding(0.1), (2, 5, 8)),
    (vit_attention.MultiHeadSelfAttention(2, 0.1), (2, 5, 8)),
    (vit_layers.EncoderBlock(2, 16, 0.1, 0.1), (2, 5, 8)),
    (vit_layers.Encoder(2, 2, 16, 0.1, 0.0), (2, 5, 8)),
    (vit_layers.Encoder(2, 2, 16, class_token_only=True), (2, 5, 8)),
    (vit_layers.TokenPooling("gap"), (2, 5, 8)),
]


@pytest.mark.parametrize(
    "layer,shape", LAYERS, ids=[type(la).__name__ for la, _ in LAYERS]
)
def test_layer_config_round_trip(layer, shape, tmp_path):
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    # get_config holds exactly the constructor arguments (+ base fields).
    base = keras.layers.Layer().get_config().keys()
    own = set(config) - set(base)
    import inspect

    params = set(inspect.signature(type(layer).__init__).parameters)
    assert own <= params - {"self", "kwargs"}
    # Serialised through a .keras file inside a model: identical outputs.
    inputs = keras.Input(shape[1:])
    model = keras.Model(inputs, layer(inputs))
    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    path = str(tmp_path / "layer.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(loaded(x), model(x))
    json.dumps(config)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(),
        dict(pooling="gap"),
        dict(representation_size=16),
        dict(image_size=(16, 24)),
        dict(num_classes=0),
    ],
    ids=["token", "gap", "pre_logits", "non_square", "features"],
)
def test_keras_save_load_is_bit_identical(kwargs, tmp_path):
    model = tiny(**kwargs)
    size = kwargs.get("image_size", 16)
    h, w = (size, size) if isinstance(size, int) else size
    x = images(h=h, w=w)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(loaded(x), model(x))
    assert loaded.count_params() == model.count_params()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(image_size=18), "not divisible by patch size 4.*e.g. 16 or "
         "20"),
        (dict(image_size=(16, 30)), "width 30 is not divisible"),
        (dict(image_size=3), "not divisible by patch size 4.*e.g. 4[.]"),
        (dict(num_heads=5), "does not divide `hidden_size`"),
        (dict(dropout_rate=-0.1), "dropout_rate must be in"),
        (dict(attention_dropout_rate=1.0), "attention_dropout_rate"),
        (dict(pooling="max"), "pooling must be"),
        (dict(num_classes=-1), "`num_classes` must be >= 0"),
        (dict(representation_size=0), "`representation_size` must be a "
         "positive width"),
        (dict(image_size=(16, 0)), "`image_size` must be positive"),
        (dict(num_layers=0), r"`num_layers` \(config.model.num_layers\) "
         "must be positive"),
        # Recorded and unread on a plain ViT otherwise.
        (dict(resnet_width=2), "resnet_width=2 is a hybrid's ResNet width"),
        (dict(numerics=dict(approximate_gelu=False)), "must be a keras_vit"),
        # Every logit NaN; a name Keras failed on deep inside the build.
        (dict(head_bias_init=float("nan")), "head_bias_init must be a "
         "finite number, got nan"),
        (dict(head_bias_init=float("inf")), "finite number, got inf"),
    ],
)
def test_construction_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny(**kwargs)


def test_an_architecture_names_an_unknown_pre_logits_activation():
    """(It failed inside Keras's build: "Could not interpret activation
    function identifier".)"""
    with pytest.raises(ValueError, match="pre_logits_activation 'nope' is "
                       "no Keras activation: give one's name"):
        keras_vit.Architecture(**TINY, image_size=16, representation_size=8,
                               pre_logits_activation="nope")


def test_unknown_variant_lists_known_ones():
    with pytest.raises(ValueError, match="Unknown variant 'B/15'.*Ti/16"):
        keras_vit.create_model("B/15", num_classes=10)
    # Another case, or a released model's name of a size: the variant it
    # means named (and the model source, for a released name); the
    # hybrid hint names a variant that builds.
    for name, means in (("b/16", "B/16"), ("ViT-B_16", "B/16"),
                        ("R50+ViT-B_16", "R50+B/16")):
        with pytest.raises(ValueError) as error:
            keras_vit.create_model(name, num_classes=10)
        assert f"Did you mean {means}?" in str(error.value), error.value
        assert ("--model=" in str(error.value)) == ("ViT" in name)
    with pytest.raises(ValueError, match=r"\(e.g. variant R50\+B/16\)"):
        tiny(resnet_width=2)
    assert keras_vit.create_model("R50+B/16", num_classes=10, image_size=32,
                                  num_layers=1).count_params() > 0


def test_missing_explicit_sizes():
    with pytest.raises(ValueError, match="missing: mlp_dim"):
        keras_vit.create_model(
            None, num_classes=3, patch_size=4, hidden_size=8, num_layers=1,
            num_heads=2,
        )


def test_overrides_replace_variant_sizes():
    model = keras_vit.create_model(
        "B/16", num_classes=10, image_size=32, num_layers=1, hidden_size=48,
        num_heads=4, mlp_dim=96,
    )
    assert model.get_layer("embedding").patch_size == 16
    assert model.get_layer("Transformer").num_layers == 1
    assert model.count_params() == analytic_count(
        48, 1, 96, 16, image=32, classes=10
    )


def test_jax_backend_matches_tensorflow(tmp_path):
    """The same .keras file gives the same logits on the JAX backend."""
    pytest.importorskip("jax")
    model = tiny(pooling="gap", representation_size=8)
    x = images()
    path = str(tmp_path / "m.keras")
    model.save(path)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", model(x).numpy())
    script = textwrap.dedent(
        f"""
        import numpy as np, keras, keras_vit
        assert keras.backend.backend() == "jax"
        x = np.load({str(tmp_path / "x.npy")!r})
        y = np.load({str(tmp_path / "y.npy")!r})
        m = keras.models.load_model({path!r})
        np.testing.assert_allclose(np.asarray(m(x)), y, rtol=1e-5, atol=1e-5)
        # A fresh model builds, trains one step and attends on JAX too.
        t = keras_vit.create_model(None, num_classes=3, image_size=16,
                                   patch_size=4, hidden_size=16, num_layers=1,
                                   num_heads=2, mlp_dim=32,
                                   attention_dropout_rate=0.1)
        t.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(True))
        t.fit(x, np.array([0, 1]), epochs=1, verbose=0)
        out, att = keras_vit.attention_model(t)(x)
        assert att[0].shape == (2, 2, 17, 17)
        print("JAX_OK", t.count_params())
        """
    )
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True,
        text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "JAX_OK" in result.stdout


@pytest.mark.parametrize(
    "kwargs",
    [dict(), dict(resnet_layers=(1, 1), patch_size=1, image_size=32)],
    ids=["vit", "hybrid"],
)
def test_tensorflow_checkpoint_of_the_model_holds_every_weight(
    kwargs, tmp_path
):
    import tensorflow as tf

    model = tiny(**kwargs)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    saved = [n for n, _ in tf.train.list_variables(path)
             if n.endswith("VARIABLE_VALUE")]
    assert len(saved) == len(model.weights)
    # And it restores them into a fresh model.
    other = tiny(**kwargs)
    tf.train.Checkpoint(model=other).read(path).assert_consumed()
    for a, b in zip(model.weights, other.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())

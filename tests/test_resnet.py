"""The hybrid ResNet (BiT) stem: numerics, padding, serialisation, sizes.

Numbers are checked against tests/numpy_reference.py, an independent NumPy
implementation of weight-standardised convolution, GroupNorm, TF-style SAME
padding and the bottleneck units; on the TensorFlow backend here and on JAX
in a subprocess.
"""

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from keras_vit import create_model, embedding, resnet
from keras_vit import layers as vit_layers
from keras_vit.checkpoint import weights as checkpoint
from tests import numpy_reference as ref

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Parameter counts of the official implementation (vit_jax/models_test.py,
# MODEL_SIZES: 224 x 224 input, token pooling, 1000 classes, no pre-logits).
# The official table has every hybrid, so none is derived here.
HYBRID_PARAMS = {
    "R50+B/16": 98_659_112,  # 'R50+ViT-B_16'
    "R26+S/32": 36_431_912,  # 'R26+ViT-S_32'
    "R50+L/32": 328_994_856,  # 'R50+ViT-L_32'
    "R+Ti/16": 6_337_704,  # 'R+ViT-Ti_16' (AugReg; root only, 8x8 patches)
}


def test_every_hybrid_variant_has_a_golden_count():
    from keras_vit.model import HYBRID_RESNETS

    assert set(HYBRID_RESNETS) == set(HYBRID_PARAMS)


@pytest.mark.parametrize("variant", sorted(HYBRID_PARAMS))
def test_hybrid_parameter_count_matches_official(variant):
    model = create_model(variant, num_classes=1000)
    assert model.count_params() == HYBRID_PARAMS[variant]
    # The ResNet's stride (R+Ti/16: the root alone, 8x8 patches after it).
    stride = 4 if variant == "R+Ti/16" else (
        16 if variant.endswith("/16") else 32)
    assert model.get_layer("resnet").stride == stride
    assert tuple(model.get_layer("embedding").input.shape[1:3]) == (
        224 // stride,
        224 // stride,
    )
    keras.backend.clear_session()


def _random_params(layer, rng):
    """Non-zero random values for every weight of a built layer."""
    for weight in layer.weights:
        value = rng.normal(size=weight.shape) * 0.5
        if weight.path.endswith("gamma"):
            value += 1.0
        weight.assign(value.astype("float32"))


@pytest.mark.parametrize(
    "size,kernel,stride", [((13, 11), 7, 2), ((12, 10), 3, 2), ((9, 9), 1, 2)]
)
def test_std_conv_matches_numpy_incl_asymmetric_same_padding(
    size, kernel, stride
):
    rng = np.random.default_rng(0)
    layer = resnet.StdConv(8, kernel, stride)
    x = rng.normal(size=(2, *size, 3)).astype("float32")
    layer.build(x.shape)
    _random_params(layer, rng)
    got = keras.ops.convert_to_numpy(layer(x))
    w = keras.ops.convert_to_numpy(layer.kernel)
    want = ref.conv2d(x, ref.standardize(w), stride, "SAME")
    assert got.shape == want.shape == (
        2, -(-size[0] // stride), -(-size[1] // stride), 8
    )
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def test_weight_standardisation_is_biased_std_plus_eps():
    w = np.arange(2 * 2 * 3 * 4, dtype="float32").reshape(2, 2, 3, 4) ** 1.5
    layer = resnet.StdConv(4, 2)
    layer.build((None, 5, 5, 3))
    layer.kernel.assign(w)
    got = keras.ops.convert_to_numpy(layer.standardized_kernel())
    flat = w.reshape(-1, 4).astype("float64")
    want = (flat - flat.mean(0)) / (flat.std(0) + 1e-5)
    np.testing.assert_allclose(got.reshape(-1, 4), want, atol=1e-5)


@pytest.mark.parametrize("size", [(32, 32), (30, 22)])
def test_stem_matches_numpy_reference(size):
    rng = np.random.default_rng(1)
    stem = resnet.ResNetStem((1, 2), name="resnet")
    x = rng.uniform(-1, 1, size=(2, *size, 3)).astype("float32")
    stem.build(x.shape)
    _random_params(stem, rng)
    got = keras.ops.convert_to_numpy(stem(x))
    arrays = checkpoint.model_arrays(_wrap(stem, size))
    want = ref.resnet_forward(
        {k: v.astype("float64") for k, v in arrays.items()},
        x.astype("float64"),
    )
    assert got.shape == want.shape
    assert got.shape[1:] == stem.compute_output_shape((2, *size, 3))[1:]
    np.testing.assert_allclose(got, want, atol=2e-4 * np.abs(want).max())


def _wrap(stem, size):
    """A hybrid model around an existing stem, for its official arrays."""
    images = keras.Input((*size, 3))
    x = stem(images)
    x = embedding.PatchEmbedding(1, 32, name="embedding")(x)
    x = embedding.PositionEmbedding(name="posembed_input")(x)
    x = vit_layers.Encoder(1, 2, 16, name="Transformer")(x)
    return keras.Model(images, x)


def test_stem_structure_and_shapes():
    stem = resnet.ResNetStem((2, 3, 2), width_factor=2)
    assert stem.stride == 16
    stem.build((None, 64, 64, 3))
    units = stem.stage_units()
    assert [len(s) for s in units] == [2, 3, 2]
    assert [u.name for u in units[1]][:2] == ["block2_unit1", "block2_unit2"]
    # Projection exactly on the first unit of each stage.
    assert [u.needs_projection for s in units for u in s] == [
        u == 0 for n in (2, 3, 2) for u in range(n)
    ]
    assert [s[0].strides for s in units] == [1, 2, 2]
    assert stem.conv_root.kernel.shape == (7, 7, 3, 128)
    assert units[2][0].conv3.kernel.shape == (1, 1, 512, 2048)
    assert stem.compute_output_shape((None, 64, 64, 3)) == (None, 4, 4, 2048)


def test_stem_config_round_trip_and_errors():
    stem = resnet.ResNetStem((2, 2), width_factor=1, name="resnet")
    config = stem.get_config()
    assert config["layers"] == (2, 2) and config["width_factor"] == 1
    clone = resnet.ResNetStem.from_config(config)
    assert clone.get_config() == config
    # () is the root block alone (AugReg's R+Ti/16); a stage needs units.
    root = resnet.ResNetStem(())
    assert root.stride == 4
    assert root.compute_output_shape((None, 64, 64, 3)) == (None, 16, 16, 64)
    with pytest.raises(ValueError, match="positive unit counts"):
        resnet.ResNetStem((2, 0))
    with pytest.raises(ValueError, match="width_factor"):
        resnet.ResNetStem((1,), width_factor=0)


def _tiny_hybrid(**kw):
    sizes = dict(num_classes=3, image_size=32, patch_size=1, hidden_size=32,
                 num_layers=1, num_heads=2, mlp_dim=64, resnet_layers=(1,))
    return create_model(None, **{**sizes, **kw})


def test_tiny_hybrid_keras_file_round_trip(tmp_path):
    rng = np.random.default_rng(2)
    model = _tiny_hybrid()
    _random_params(model, rng)
    x = rng.uniform(-1, 1, size=(2, 32, 32, 3)).astype("float32")
    path = str(tmp_path / "hybrid.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(model(x)),
        keras.ops.convert_to_numpy(loaded(x)),
    )
    assert loaded.get_layer("resnet").get_config() == (
        model.get_layer("resnet").get_config()
    )


_JAX_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import keras
    assert keras.backend.backend() == "jax", keras.backend.backend()
    from keras_vit import create_model
    from keras_vit.checkpoint import weights as checkpoint
    from tests import numpy_reference as ref

    rng = np.random.default_rng(3)
    model = create_model(
        None, num_classes=3, image_size=(32, 24), patch_size=1,
        hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
        resnet_layers=(1,),
    )
    arrays = {
        k: (rng.normal(size=v.shape) * 0.3
            + (1.0 if k.endswith("scale") else 0.0)).astype("float32")
        for k, v in checkpoint.model_arrays(model).items()
    }
    checkpoint.load_arrays(model, arrays)
    x = rng.uniform(-1, 1, size=(2, 32, 24, 3)).astype("float32")
    got = model.predict(x, verbose=0)  # one compiled graph: fast on JAX
    want = ref.forward(arrays, x)
    err = np.abs(got - want).max() / np.abs(want).max()
    print("relative error", err)
    sys.exit(0 if err < 1e-5 else 1)
    """
)


@pytest.mark.slow
def test_tiny_hybrid_on_jax_backend_matches_numpy():
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", _JAX_SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "relative error" in result.stdout


def test_a_hybrid_keras_file_at_a_large_size_loads(tmp_path):
    """The size check of a .keras file counts a hybrid's position table
    in tokens of its total stride (patch 1 on a stride-4 ResNet: 256 x
    256 tokens at 1,024), not of its patch alone (16 times as many,
    which refused the file as crafted)."""
    from keras_vit.checkpoint.formats import keras_file

    model = _tiny_hybrid(image_size=1024, hidden_size=16, mlp_dim=16)
    path = str(tmp_path / "hybrid_1024.keras")
    model.save(path)
    loaded = keras_file.read_keras_model(path)
    assert loaded.input_shape[1:3] == (1024, 1024)

"""The model describes itself: `VisionTransformer` carries its
`Architecture` through get_config / from_config and `.keras` files; the
geometry is computed from it; `.keras` files written before the class
(tests/fixtures/legacy_keras, scripts/make_legacy_keras_fixtures.py) still
load and predict what they predicted when they were written."""

import json
import os
import re
import zipfile

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import build, derived
from keras_vit import config as config_lib
from keras_vit.architecture import (
    CONFIG_FIELDS,
    Architecture,
    Numerics,
    total_stride,
)
from keras_vit.errors import UsageError
from keras_vit.model import (
    VisionTransformer,
    architecture_of,
    as_vision_transformer,
    create_model,
)
from keras_vit.training.train_lib import num_classes_of
from tests.legacy_models import LEGACY_MODELS, TINY

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEGACY = os.path.join(ROOT, "tests", "fixtures", "legacy_keras")
# Architectures that exercise every field kind.
CASES = {
    "token_pre_logits": dict(TINY, num_classes=3, image_size=16,
                             representation_size=8, head_bias_init=-2.0),
    "gap_rectangular": dict(TINY, num_classes=4, image_size=(16, 24),
                            pooling="gap", dropout_rate=0.1),
    "hybrid": dict(TINY, num_classes=2, image_size=16, patch_size=2,
                   resnet_layers=(), all_tokens=True),
    "sincos_dynamic": dict(TINY, num_classes=0, image_size=16,
                           posemb="sincos2d", dynamic_image_size=True),
    "learn_dynamic_numerics": dict(
        TINY, num_classes=3, image_size=16, dynamic_image_size=True,
        numerics=Numerics(approximate_gelu=False, layer_norm_epsilon=1e-12),
        stochastic_depth_rate=0.1),
}


def images(h=16, w=16, n=2, seed=0):
    return np.random.default_rng(seed).uniform(
        -1, 1, (n, h, w, 3)).astype("float32")


def build_case(name):
    keras.utils.set_random_seed(1)
    return create_model(None, **CASES[name])


def test_create_model_returns_the_class_carrying_its_arguments():
    model = create_model(None, num_classes=3, image_size=(16, 24),
                         representation_size=8, **TINY)
    assert isinstance(model, VisionTransformer)
    arch = model.architecture
    assert (arch.patch_size, arch.hidden_size, arch.num_layers,
            arch.num_heads, arch.mlp_dim) == (4, 16, 2, 2, 32)
    assert arch.image_size == (16, 24) and arch.num_classes == 3
    assert arch.representation_size == 8 and arch.variant is None
    parts = model.parts
    assert isinstance(parts.encoder, keras_vit.Encoder)
    assert parts.pre_logits.units == 8 and parts.head.units == 3
    assert parts.resnet is None and parts.class_token is not None
    assert model.output_shape == (None, 3)


def test_a_named_variant_is_recorded_only_with_its_own_sizes():
    assert Architecture.create("B/16").variant == "B/16"
    assert Architecture.create("R50+B/16").resnet_layers == (3, 4, 9)
    changed = Architecture.create("B/16", num_layers=2)
    assert changed.variant is None and changed.hidden_size == 768


def test_a_variant_label_always_names_the_sizes():
    """An Architecture changed with `replace` is named by its new sizes
    (None for none), as is one read from a dict (a saved model's); one
    made directly with a variant its sizes are not is refused. Before,
    the stale label named the model (vit_B_16 for a 5,683-parameter
    one)."""
    arch = Architecture.create("Ti/16", num_classes=3, image_size=32)
    assert arch.replace(hidden_size=96, num_heads=3).variant is None
    assert arch.replace(num_classes=5).variant == "Ti/16"
    assert arch.replace(patch_size=32, hidden_size=384, mlp_dim=1536,
                        num_heads=6).variant == "S/32"
    sizes = dict(patch_size=8, hidden_size=16, num_layers=1, num_heads=2,
                 mlp_dim=32, image_size=(32, 32))
    with pytest.raises(UsageError, match=r"names sizes this architecture "
                       r"does not have \(hidden_size 16, not 768;.*give "
                       "variant=None with its sizes"):
        Architecture(variant="B/16", **sizes)
    # A saved one (from_dict: a .keras file's) is named by its sizes; a
    # list of stages is the tuple of a variant's.
    assert Architecture.from_dict(dict(
        Architecture(**sizes).to_dict(), variant="L/16")).variant is None
    b16 = Architecture.create("B/16")
    assert Architecture.from_dict(b16.to_dict()).variant == "B/16"
    assert Architecture.from_dict(dict(b16.to_dict(), num_layers=6)
                                  ).variant is None
    r50 = Architecture.create("R50+B/16")
    assert r50.replace(resnet_layers=[3, 4, 9]).variant == "R50+B/16"


@pytest.mark.parametrize("name", sorted(CASES))
def test_get_config_from_config_round_trip(name):
    model = build_case(name)
    config = json.loads(json.dumps(model.get_config()))  # JSON-safe
    again = VisionTransformer.from_config(config)
    assert isinstance(again, VisionTransformer)
    assert again.architecture == model.architecture
    assert again.count_params() == model.count_params()
    again.set_weights(model.get_weights())
    x = images(16, 24) if name == "gap_rectangular" else images()
    np.testing.assert_array_equal(np.asarray(again(x)), np.asarray(model(x)))


def test_keras_file_names_its_architecture_and_loads_as_the_class(tmp_path):
    model = build_case("token_pre_logits")
    path = str(tmp_path / "m.keras")
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        saved = json.loads(archive.read("config.json"))
    assert saved["class_name"] == "VisionTransformer"
    assert saved["registered_name"] == "keras_vit>VisionTransformer"
    assert saved["config"]["architecture"] == dict(
        model.architecture.to_dict())
    assert saved["config"]["architecture"]["representation_size"] == 8
    loaded = keras.saving.load_model(path)
    assert type(loaded) is VisionTransformer
    assert loaded.architecture == model.architecture
    np.testing.assert_array_equal(np.asarray(loaded(images())),
                                  np.asarray(model(images())))


def test_keras_file_keeps_the_mixed_precision_policy(tmp_path):
    with build.dtype_policy("bfloat16"):
        model = create_model(None, num_classes=3, image_size=16, **TINY)
    path = str(tmp_path / "bf16.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)  # under the float32 policy
    assert loaded.parts.encoder.dtype_policy.name == "mixed_bfloat16"
    assert loaded.parts.head.dtype_policy.name == "float32"
    assert keras.config.dtype_policy().name == "float32"


def test_from_dict_names_an_unknown_field():
    values = dict(Architecture.create("Ti/16").to_dict(), depth=3)
    with pytest.raises(UsageError, match=r"Unknown architecture fields "
                       r"\['depth'\]"):
        Architecture.from_dict(values)


# ---------------------------------------------------------------- geometry
def test_stride_grid_and_tokens_come_from_the_architecture():
    hybrid = Architecture.create("R50+B/16", image_size=384)
    assert hybrid.stride == 16 == total_stride(1, (3, 4, 9))
    assert hybrid.grid() == (24, 24) and hybrid.num_tokens() == 577
    r_ti = Architecture.create("R+Ti/16")
    assert r_ti.stride == 32 and r_ti.grid() == (7, 7)
    gap = Architecture.create("B/32", image_size=(224, 320), pooling="gap")
    assert gap.grid() == (7, 10) and gap.num_tokens() == 70
    assert gap.grid((64, 96)) == (2, 3)
    with pytest.raises(UsageError, match="width 100 is not divisible by "
                       "patch size 32"):
        gap.grid((64, 100))


def test_config_stride_and_model_stride_are_the_architecture_stride():
    config = config_lib.base_config()
    with config.unlocked():
        config.model.variant = "R26+S/32"
    assert build.config_stride(config.model) == 32
    model = create_model(None, num_classes=0, image_size=16, patch_size=2,
                         resnet_layers=(), hidden_size=16, num_layers=1,
                         num_heads=2, mlp_dim=16)
    assert derived.model_stride(model) == 8 == model.architecture.stride


# ------------------------------------------------------------------ config
def test_config_model_holds_the_architecture_fields_and_defaults():
    model_section = config_lib.base_config().model
    assert set(model_section) == set(CONFIG_FIELDS) | {"image_size",
                                                       "num_classes"}
    defaults = Architecture(patch_size=16, hidden_size=768, num_layers=12,
                            num_heads=12, mlp_dim=3072)
    for field in CONFIG_FIELDS:
        value = model_section[field]
        if value is not None and field != "variant":
            assert value == getattr(defaults, field), field


def test_build_model_builds_the_config_architecture():
    config = config_lib.complete(dict(
        image_size=16, model=dict(variant=None, pooling="gap",
                                  representation_size=8, **TINY)))
    model = build.build_run(config, num_classes=5)[0]
    assert isinstance(model, VisionTransformer)
    assert model.architecture == build.config_architecture(config.model, 5)
    assert model.architecture.pooling == "gap"
    assert model.output_shape == (None, 5)


def test_num_classes_none_is_from_the_data_and_zero_no_head():
    assert config_lib.base_config().model.num_classes is None
    # A config.json of an older version said 0 for "from the data".
    assert config_lib.complete({"num_classes": 0}).model.num_classes is None
    assert config_lib.complete({"num_classes": 7}).model.num_classes == 7
    features = create_model(None, num_classes=0, image_size=16, **TINY)
    assert features.parts.head is None and features.output_shape == (None, 16)


def test_a_run_refuses_a_class_count_below_one():
    config = config_lib.base_config()
    config.model.num_classes = 0
    with pytest.raises(UsageError, match="leave it None to read it from "
                       "the data"):
        num_classes_of(config.model, config.input)


# ------------------------------------------- files written before the class
@pytest.mark.parametrize("name", sorted(LEGACY_MODELS))
def test_legacy_keras_file_loads_and_predicts_as_written(name):
    expected = np.load(os.path.join(LEGACY, "outputs.npz"))
    path = os.path.join(LEGACY, f"{name}.keras")
    old = keras.saving.load_model(path)
    assert not isinstance(old, VisionTransformer)  # an anonymous model
    inferred = architecture_of(old)
    assert inferred == Architecture.create(None, **LEGACY_MODELS[name])
    model = as_vision_transformer(old)
    assert model.architecture == inferred
    assert model.count_params() == old.count_params()
    x = expected[f"{name}_images"]
    np.testing.assert_allclose(np.asarray(model.predict(x, verbose=0)),
                               expected[f"{name}_outputs"], rtol=0, atol=1e-6)
    # Derived models read the same description.
    assert derived.model_stride(old) == inferred.stride
    feats = derived.features_model(old)
    np.testing.assert_allclose(
        np.asarray(feats(x)),
        np.asarray(derived.features_model(model)(x)), atol=1e-6)


def test_legacy_keras_file_through_load_model_is_the_class(tmp_path):
    expected = np.load(os.path.join(LEGACY, "outputs.npz"))
    model = keras_vit.load_model(os.path.join(LEGACY, "tiny_hybrid.keras"))
    assert isinstance(model, VisionTransformer)
    assert model.architecture.resnet_layers == ()
    np.testing.assert_allclose(
        np.asarray(model(expected["tiny_hybrid_images"])),
        expected["tiny_hybrid_outputs"], atol=1e-6)
    # Saved again, it is a file that names its architecture.
    path = str(tmp_path / "again.keras")
    model.save(path)
    assert type(keras.saving.load_model(path)) is VisionTransformer


def test_a_model_that_is_no_vit_is_refused_in_one_line():
    inputs = keras.Input((4,))
    other = keras.Model(inputs, keras.layers.Dense(2)(inputs), name="mlp")
    with pytest.raises(UsageError, match="'mlp' is not a Vision Transformer"):
        as_vision_transformer(other)


# ----------------------------------------------------------------- hygiene
def test_layers_are_found_by_name_only_in_the_npz_mapping():
    allowed = {os.path.join("checkpoint", "formats", "npz_mapping.py"),
               os.path.join("checkpoint", "weights.py")}
    found = []
    package = os.path.join(ROOT, "keras_vit")
    for folder, _, files in os.walk(package):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or (
                    os.path.relpath(path, package) in allowed):
                continue
            with open(path, encoding="utf-8") as f:
                if re.search(r"\.get_layer\(", f.read()):
                    found.append(os.path.relpath(path, package))
    assert found == []

"""No hub model loads silently wrong: every field of transformers'
`ViTConfig` and every argument of timm's `VisionTransformer` is honoured or
refused by name, each case on folders that transformers 5.24 / timm 1.0.31
wrote (tests/fixtures/hub, scripts/make_hub_fixtures.py), edited here only
the way a user edits a config.json by hand."""

import json
import os
import re
import shutil

import keras
import numpy as np
import PIL.Image
import pytest
import safetensors.numpy

import keras_vit
from keras_vit import layers
from keras_vit.checkpoint import loader, weights
from keras_vit.checkpoint.hub import config as hub_config
from keras_vit.checkpoint.hub import reader as hub
from keras_vit.checkpoint.hub import timm as hub_timm
from keras_vit.checkpoint.hub import timm_registry
from keras_vit.commands import predict
from keras_vit.errors import UsageError

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "hub")
with open(os.path.join(FIXTURES, "library_fields.json")) as _f:
    LIBRARY = json.load(_f)


def _copy(tmp_path, name, edit=None):
    """A copy of fixture `name`, its config.json changed by `edit`."""
    folder = tmp_path / name
    if not folder.exists():
        shutil.copytree(os.path.join(FIXTURES, name), folder)
    if edit is not None:
        config = json.loads((folder / "config.json").read_text())
        edit(config)
        (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def _load(folder):
    return loader.load_model(loader.HubSource(folder))


def _outputs(model, folder):
    reference = np.load(os.path.join(folder, "reference.npz"))
    x = reference["pixels"].astype(np.float32) / 127.5 - 1.0
    got = keras.ops.convert_to_numpy(model(x, training=False))
    want = reference["logits" if "logits" in reference else "pooler_output"]
    return got, want


def _assert_reference(model, folder):
    got, want = _outputs(model, folder)
    np.testing.assert_allclose(got, want, atol=2e-5 * np.abs(want).max())


def _set(field, value, args=False):
    def edit(config):
        target = config.setdefault("model_args", {}) if args else config
        target[field] = value
        if args and field == "global_pool":  # timm writes both copies
            config[field] = value
    return edit


# --- the audit: both libraries' lists, walked field by field -------------

def test_every_library_field_is_listed():
    assert sorted(hub_config.HF_VIT_FIELDS) == LIBRARY[
        "transformers.ViTConfig"]
    assert list(hub_timm.TIMM_VIT_ARGS) == LIBRARY["timm.VisionTransformer"]


# A value each SHAPE / CHECKED field is refused with (for the fixture).
HF_REFUSED = {
    "hidden_size": 64, "num_hidden_layers": 3, "intermediate_size": 128,
    "patch_size": 16, "pooler_output_size": 8, "hidden_act": "relu",
    "pooler_act": "quick_gelu", "num_channels": 1,
}
HF_NO_EFFECT = {
    "hidden_dropout_prob": 0.3, "attention_probs_dropout_prob": 0.2,
    "initializer_range": 1.0, "encoder_stride": 4,
}


@pytest.mark.parametrize("field", LIBRARY["transformers.ViTConfig"])
def test_each_vit_config_field_is_honoured_or_refused(tmp_path, field):
    how = hub_config.HF_VIT_FIELDS[field]
    # The ViTModel fixture has a pooler, so pooler_* fields apply.
    name = "hf_vit_model_relu"
    if how in (hub_config.SHAPE, hub_config.CHECKED):
        folder = _copy(tmp_path, name, _set(field, HF_REFUSED[field]))
        with pytest.raises(UsageError, match=f"config.json {field}="):
            _load(folder)
    elif how == hub_config.NO_EFFECT:
        folder = _copy(tmp_path, name, _set(field, HF_NO_EFFECT[field]))
        _assert_reference(_load(folder), folder)
    else:
        assert how == hub_config.READ
        _check_hf_read(tmp_path, name, field)


def _read_anew(source):
    """The folder of `source` described as it is now: a source reads its
    folder once (one command), so the edited folder is a new source."""
    return loader.describe_source(loader.HubSource(source.path))


def _check_hf_read(tmp_path, name, field):
    source = loader.HubSource(_copy(tmp_path, name))
    if field == "num_attention_heads":
        assert _read_anew(source).num_heads == 2
        _copy(tmp_path, name, _set(field, 4))
        assert _read_anew(source).num_heads == 4
    elif field == "image_size":
        # transformers' patch convolution drops the pixels past the last
        # whole patch: 35 x 39 reads the 32 x 32 of the stored 4 x 4 grid.
        _copy(tmp_path, name, _set(field, [35, 39]))
        assert _read_anew(source).image_size == (32, 32)
        # A grid the table does not hold: transformers refuses it too.
        _copy(tmp_path, name, _set(field, [40, 48]))
        with pytest.raises(UsageError, match="5 x 6 patch grid.*size mism"):
            _read_anew(source)
    elif field == "layer_norm_eps":
        _copy(tmp_path, name, _set(field, 1e-3))
        numerics = _read_anew(source).numerics
        assert numerics.layer_norm_epsilon == 1e-3
    else:  # qkv_bias False: a file without q/k/v biases, zero biases
        assert field == "qkv_bias"
        path = os.path.join(source.path, "model.safetensors")
        arrays = safetensors.numpy.load_file(path)
        for key in [k for k in arrays if "_proj.bias" in k or
                    "attention.attention." in k and k.endswith(".bias")]:
            del arrays[key]
        safetensors.numpy.save_file(arrays, path)
        _copy(tmp_path, name, _set(field, False))
        _assert_zero_qkv_bias(loader.load_model(loader.HubSource(source.path)))


def _assert_zero_qkv_bias(model):
    biases = [keras.ops.convert_to_numpy(w) for w in
              model.get_layer("Transformer").weights
              if w.path.endswith("qkv/bias")]
    assert biases and not any(b.any() for b in biases)


TIMM_REFUSED = {
    "patch_size": 4, "in_chans": 1, "num_classes": 7, "global_pool": "map",
    "embed_dim": 48, "depth": 5, "mlp_ratio": 4.0, "qk_norm": True,
    "scale_attn_norm": True, "scale_mlp_norm": True, "proj_bias": False,
    "init_values": 1e-5, "class_token": False, "pos_embed": "none",
    "no_embed_class": True, "reg_tokens": 4, "pre_norm": True,
    "final_norm": False, "fc_norm": False, "pool_include_prefix": True,
    "embed_layer": "HybridEmbed", "embed_norm_layer": "rmsnorm",
    "norm_layer": "rmsnorm", "act_layer": "quick_gelu",
    "block_fn": "ParallelScalingBlock", "mlp_layer": "SwiGLU",
    "attn_layer": "diff",
}
# fc_norm=False with token pooling is timm's default: refused only where
# it is not, as fc_norm=True would be wrong nowhere. It is tested below.
TIMM_REFUSED.pop("fc_norm")
TIMM_NO_EFFECT = {
    "dynamic_img_size": True, "drop_rate": 0.1,
    "pos_drop_rate": 0.1, "patch_drop_rate": 0.5, "proj_drop_rate": 0.1,
    "attn_drop_rate": 0.1, "drop_path_rate": 0.2, "weight_init": "jax",
    "fix_init": True, "device": "cpu", "dtype": "float32",
}


@pytest.mark.parametrize("field", LIBRARY["timm.VisionTransformer"])
def test_each_vision_transformer_argument_is_honoured_or_refused(
        tmp_path, field):
    how = hub_timm.TIMM_VIT_ARGS[field]
    if field == "fc_norm":
        _check_fc_norm(tmp_path)
    elif field == "dynamic_img_pad":
        _check_dynamic_img_pad(tmp_path)
    elif how in (hub_config.SHAPE, hub_config.CHECKED):
        folder = _copy(tmp_path, "timm_vit",
                       _set(field, TIMM_REFUSED[field], args=True))
        with pytest.raises(UsageError, match=f"{field}="):
            _load(folder)
    elif how == hub_config.NO_EFFECT:
        folder = _copy(tmp_path, "timm_vit",
                       _set(field, TIMM_NO_EFFECT[field], args=True))
        _assert_reference(_load(folder), folder)
    else:
        assert how == hub_config.READ
        _check_timm_read(tmp_path, field)


def _check_timm_read(tmp_path, field):
    source = loader.HubSource(_copy(tmp_path, "timm_vit"))
    if field == "num_heads":
        assert _read_anew(source).num_heads == 4
        _copy(tmp_path, "timm_vit", _set(field, 2, args=True))
        assert _read_anew(source).num_heads == 2
    elif field == "img_size":
        def edit(config):
            del config["pretrained_cfg"]["input_size"]
            config["model_args"]["img_size"] = [32, 40]
        _copy(tmp_path, "timm_vit", edit)
        assert _read_anew(source).image_size == (32, 40)
    else:  # qkv_bias=False: timm writes no qkv bias; zeros are read
        assert field == "qkv_bias"
        path = os.path.join(source.path, "model.safetensors")
        arrays = safetensors.numpy.load_file(path)
        for key in [k for k in arrays if k.endswith("attn.qkv.bias")]:
            del arrays[key]
        safetensors.numpy.save_file(arrays, path)
        _copy(tmp_path, "timm_vit", _set(field, False, args=True))
        _assert_zero_qkv_bias(loader.load_model(loader.HubSource(source.path)))


def _check_dynamic_img_pad(tmp_path):
    # Nothing to pad at whole patches: timm's outputs.
    folder = _copy(tmp_path, "timm_vit", _set("dynamic_img_pad", True,
                                              args=True))
    _assert_reference(_load(folder), folder)
    # 35 pixels of 8-pixel patches: timm pads to 40 with zeros, which this
    # ViT does not compute (without the padding it reads 32, as timm does).
    folder = _copy(tmp_path, "timm_vit_size_remainder", _set(
        "dynamic_img_pad", True, args=True))
    with pytest.raises(UsageError, match=r"model_args.dynamic_img_pad=True:"
                       r" an image of 35 x 35 pixels padded to whole 8-pixel"
                       r" patches"):
        _load(folder)


def _check_fc_norm(tmp_path):
    # token pooling + fc_norm=True: the pooled token's LayerNorm, exact.
    folder = os.path.join(FIXTURES, "timm_vit_token_fc_norm")
    _assert_reference(_load(folder), folder)
    # avg pooling + fc_norm: mean then norm, refused.
    with pytest.raises(UsageError, match=r"fc_norm=None: average pooling "
                       r"followed by a LayerNorm"):
        _load(os.path.join(FIXTURES, "timm_vit_avg_fc_norm"))


def test_accepted_non_default_arguments_compute_the_same(tmp_path):
    # act_layer "gelu_tanh" is the tanh GELU; "layernorm" is timm's own
    # LayerNorm; no_embed_class / pool_include_prefix change nothing
    # without a class token.
    source = loader.HubSource(_copy(tmp_path, "timm_vit", _set(
        "act_layer", "gelu_tanh", args=True)))
    assert loader.describe_source(source).numerics.approximate_gelu
    for field in ("no_embed_class", "pool_include_prefix"):
        folder = _copy(tmp_path, "timm_vit_gap", _set(field, True, args=True))
        _assert_reference(_load(folder), folder)
    folder = _copy(tmp_path, "timm_vit_gap", _set("norm_layer", "layernorm",
                                                  args=True))
    _assert_reference(_load(folder), folder)


@pytest.mark.parametrize("field, value", [
    # timm's Block builds LayerScale only `if init_values`.
    ("init_values", 0.0), ("init_values", 0), ("init_values", None),
    # get_norm_layer: none or "" is VisionTransformer's LayerNorm; a name
    # is read lower case without underscores.
    ("norm_layer", ""), ("norm_layer", "LayerNorm"),
    ("norm_layer", "layer_norm"), ("norm_layer", None),
    # get_act_layer: none or "" is nn.GELU; a name is read lower case.
    ("act_layer", ""), ("act_layer", "GELU"), ("act_layer", None),
])
def test_names_timm_reads_as_its_defaults_compute_the_same(
        tmp_path, field, value):
    folder = _copy(tmp_path, "timm_vit", _set(field, value, args=True))
    assert not loader.describe_source(
        loader.HubSource(folder)).numerics.approximate_gelu
    _assert_reference(_load(folder), folder)


def test_timm_tanh_gelu_is_computed_and_other_names_refused(tmp_path):
    # GELUTanh (F.gelu(approximate='tanh')), named in any case, is the
    # formula of transformers' gelu_new, whose values activations.npz
    # holds: keras_vit's tanh GELU computes them.
    source = loader.HubSource(_copy(tmp_path, "timm_vit", _set(
        "act_layer", "GELU_TANH", args=True)))
    assert loader.describe_source(source).numerics.approximate_gelu
    values = np.load(os.path.join(FIXTURES, "activations.npz"))
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(layers.gelu_tanh(values["x"])),
        values["gelu_new"], atol=1e-6)
    for field, value in (("norm_layer", "rmsnorm"),
                         ("norm_layer", "layernorm2d"),
                         ("act_layer", "gelutanh"),
                         ("act_layer", "quick_gelu"),
                         ("init_values", 1e-6)):
        folder = _copy(tmp_path / field / str(value), "timm_vit",
                       _set(field, value, args=True))
        with pytest.raises(UsageError, match=f"{field}="):
            _load(folder)


def test_gelu_accurate_is_the_tanh_gelu(tmp_path):
    # transformers' AccurateGELUActivation: 0.5 x (1 + tanh(sqrt(2 / pi)
    # (x + 0.044715 x^3))), gelu_new's values (activations.npz).
    values = np.load(os.path.join(FIXTURES, "activations.npz"))
    x = values["x"].astype(np.float64)
    accurate = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (
        x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(accurate, values["gelu_new"], atol=1e-6)
    assert hub_config.HF_GELU["gelu_accurate"]
    models = {}
    for act in ("gelu_accurate", "gelu_new"):
        folder = _copy(tmp_path / act, "hf_vit_classifier",
                       _set("hidden_act", act))
        info = loader.describe_source(loader.HubSource(folder))
        assert info.numerics.approximate_gelu
        models[act] = _outputs(_load(folder), folder)[0]
    np.testing.assert_array_equal(models["gelu_accurate"],
                                  models["gelu_new"])


# --- part 2: pooler_act, global_pool -------------------------------------

def test_a_classifier_uses_no_pooler_act(tmp_path):
    # ViTForImageClassification builds no pooler: transformers never reads
    # pooler_act there, so a string it has no activation for is no error.
    folder = _copy(tmp_path, "hf_vit_classifier",
                   _set("pooler_act", "quick_gelu"))
    _assert_reference(_load(folder), folder)
    # Also where config.json names no class and the arrays hold a
    # classifier beside a pooler (AutoModelForImageClassification's).
    def edit(config):
        config.pop("architectures")
        config["pooler_act"] = "quick_gelu"
    folder = _copy(tmp_path, "hf_vit_classifier_stray_pooler", edit)
    _assert_reference(_load(folder), folder)
    # A null is refused: transformers' ViTConfig takes only a string.
    folder = _copy(tmp_path, "hf_vit_classifier", _set("pooler_act", None))
    with pytest.raises(UsageError, match="sets pooler_act to null"):
        _load(folder)

def test_pooler_activations_equal_transformers():
    values = np.load(os.path.join(FIXTURES, "activations.npz"))
    for name, keras_name in hub_config.HF_POOLER_ACTIVATIONS.items():
        got = keras.ops.convert_to_numpy(
            keras.activations.get(keras_name)(values["x"]))
        np.testing.assert_allclose(got, values[name], atol=1e-6, err_msg=name)
    # The ones refused have no such equal.
    for name in ("quick_gelu", "gelu_new", "leaky_relu"):
        assert name not in hub_config.HF_POOLER_ACTIVATIONS


def test_relu_pooler_is_computed_and_kept_by_save(tmp_path):
    folder = os.path.join(FIXTURES, "hf_vit_model_relu")
    model = _load(folder)
    _assert_reference(model, folder)
    model.save(tmp_path / "relu.keras")
    again = keras.models.load_model(tmp_path / "relu.keras")
    _assert_reference(again, folder)
    with pytest.raises(UsageError, match="pooler_act='quick_gelu'"):
        _load(os.path.join(FIXTURES, "hf_vit_model_quick_gelu"))


def test_relu_pooler_is_not_fine_tuned_as_tanh(tmp_path):
    """A config-built model computes tanh in its pre-logits layer: keeping a
    relu pooler there is refused; the paper's transfer (pre-logits
    dropped) and the backbone file without it work."""
    folder = os.path.join(FIXTURES, "hf_vit_model_relu")
    info = loader.describe_source(loader.HubSource(folder))
    fields = {k: getattr(info, k) for k in (
        "patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")}
    model = keras_vit.create_model(
        None, num_classes=3, image_size=info.image_size,
        representation_size=info.representation_size, **fields)
    with pytest.raises(UsageError, match="pre-logits layer uses 'relu'"):
        loader.initialise(model, folder, keep_pre_logits=True)
    with pytest.raises(UsageError, match="keep_pre_logits=False"):
        loader.write_backbone(folder, str(tmp_path / "b.npz"),
                              keep_pre_logits=True)
    plain = keras_vit.create_model(
        None, num_classes=3, image_size=info.image_size, **fields)
    loader.initialise(plain, folder)
    np.testing.assert_array_equal(
        weights.model_arrays(plain)["Transformer/encoder_norm/scale"],
        loader.source_arrays(folder, False)["Transformer/encoder_norm/scale"])
    backbone = loader.write_backbone(folder, str(tmp_path / "b.npz"))
    assert not any(k.startswith("pre_logits/")
                   for k in np.load(backbone.path).files)


def test_gap_model_loads_exactly_with_or_without_global_pool(tmp_path):
    folder = os.path.join(FIXTURES, "timm_vit_gap")
    model = _load(folder)
    assert loader.describe_source(loader.HubSource(folder)).pooling == "gap"
    _assert_reference(model, folder)

    def no_pool(config):  # as a user writes model_args by hand
        del config["global_pool"], config["model_args"]["global_pool"]
    # vit_base_patch16_gap_224 registers global_pool="avg", fc_norm=False.
    assert timm_registry.ARCHITECTURES["vit_base_patch16_gap_224"][1][
        "global_pool"] == "avg"
    folder = _copy(tmp_path, "timm_vit_gap", no_pool)
    _assert_reference(_load(folder), folder)


def test_an_unregistered_architecture_is_refused_not_guessed(tmp_path):
    # timm's create_model raises "Unknown model" for a name it does not
    # register, whatever model_args give: refused by name, with the
    # registry's timm version and the fix, not built from a guess (the
    # family word's head count, the config's pooling).
    def unknown(config):
        config["architecture"] = "my_vit"
        del config["global_pool"], config["model_args"]["global_pool"]

    def explicit(config):
        config["architecture"] = "vit_base_patch4_newthing_16"
        config["global_pool"] = "avg"
        config["model_args"].update(class_token=False, fc_norm=False)

    def heads_from_name(config):
        config["architecture"] = "vit_large_patch16_newthing_224"
        del config["model_args"]["num_heads"]
    for edit in (unknown, explicit, heads_from_name):
        with pytest.raises(UsageError, match=(
                "not one of the 179 vision_transformer / deit "
                "architectures of timm 1.0.31 .*'Unknown model'.*set "
                "architecture to a registered name")):
            _load(_copy(tmp_path / edit.__name__, "timm_vit_gap", edit))
    # A pretrained tag is no part of the name timm looks up.
    def tagged(config):
        config["architecture"] = "vit_base_patch16_gap_224.my_tag"
    folder = _copy(tmp_path / "tagged", "timm_vit_gap", tagged)
    _assert_reference(_load(folder), folder)

    # A name timm deprecated is the architecture it stands for (a folder
    # saved with timm 0.6: vit_tiny_patch16_224_in21k).
    def deprecated(config):
        config["architecture"] = "vit_tiny_patch16_224_in21k"
    folder = _copy(tmp_path / "deprecated", "timm_vit", deprecated)
    _assert_reference(_load(folder), folder)

    def disagree(config):
        config["global_pool"] = "token"
    with pytest.raises(UsageError, match="global_pool 'token' disagrees"):
        _load(_copy(tmp_path / "fresh", "timm_vit_gap", disagree))


def test_avg_trained_weights_behind_a_token_name_are_refused(tmp_path):
    # The case: weights trained with global_pool="avg" (fc_norm
    # on by default) under a name registered with class-token pooling,
    # global_pool left out of the config: refused, not read as 'token'.
    def no_pool(config):
        del config["global_pool"], config["model_args"]["global_pool"]
    folder = _copy(tmp_path, "timm_vit_avg_class_token_fc_norm", no_pool)
    with pytest.raises(UsageError, match="has fc_norm.weight, but "
                       "config.json gives global_pool 'token'"):
        _load(folder)


@pytest.mark.parametrize("name, message", [
    ("timm_vit_avg_fc_norm", r"fc_norm=None: average pooling followed"),
    ("timm_vit_avg_class_token", r"global_pool='avg': an average of the "
     r"patch tokens beside a class token"),
    ("timm_vit_avg_class_token_fc_norm", r"global_pool='avg'"),
])
def test_average_pooling_this_vit_does_not_compute(name, message):
    with pytest.raises(UsageError, match=message):
        _load(os.path.join(FIXTURES, name))


# --- part 3: clear refusals, no crashes ----------------------------------

def test_label_names_dict_in_id_order(tmp_path):
    source = loader.HubSource(os.path.join(FIXTURES, "timm_vit_label_dict"))
    names = loader.class_names(source)
    assert names == ["red", "green", "blue"]
    model = loader.load_model(source)
    _assert_reference(model, source.path)
    # What keras-vit-predict does with them (a KeyError before).
    tops = predict.top_k(np.asarray([[0.1, 0.7, 0.2]]), names, 2)
    assert tops == [[(1, "green", 0.7), (2, "blue", 0.2)]]
    # Ids out of order and with a gap: by id, the gap keeps its number.
    assert hub_config.class_names({"2": "c", "0": "a"}) == ["a", "1", "c"]
    with pytest.raises(UsageError, match="label ids must be integers"):
        hub_config.class_names({"x": "a"})


@pytest.mark.parametrize("name, shape", [
    ("timm_deit_distilled", "(1, 1, 16)"),        # model_args with heads
    ("timm_deit_distilled_named", "(1, 1, 24)"),  # the named model's
])
def test_distilled_deit_names_dist_token(name, shape):
    with pytest.raises(UsageError) as error:
        _load(os.path.join(FIXTURES, name))
    message = str(error.value)
    assert "distilled DeiT" in message and "\n" not in message
    assert f"first dist_token {shape}" in message


def test_transformers5_state_dict_loads_as_plain_vit():
    folder = os.path.join(FIXTURES, "hf_vit_v5_state_dict")
    tensors = hub.read_tensors(os.path.join(folder, "pytorch_model.bin"))
    assert "vit.layers.0.attention.q_proj.weight" in tensors
    model, report = loader.load_report(loader.HubSource(folder))
    assert report.ok and report.layout == hub.HUGGINGFACE
    _assert_reference(model, folder)


def test_pre_norm_and_no_embed_class_name_the_real_reason(tmp_path):
    with pytest.raises(UsageError, match=r"has norm_pre.weight: norm_pre, a "
                       r"LayerNorm before the first block \(timm pre_norm"):
        _load(os.path.join(FIXTURES, "timm_vit_pre_norm"))
    with pytest.raises(UsageError, match="no_embed_class=True: position "
                       "embeddings without the class token"):
        _load(os.path.join(FIXTURES, "timm_vit_no_embed_class"))

    # A config that does not say so: the arrays show it.
    def drop(field):
        return lambda config: config["model_args"].pop(field)
    with pytest.raises(UsageError, match="position embeddings without the "
                       r"class token \(timm no_embed_class=True\)"):
        _load(_copy(tmp_path, "timm_vit_no_embed_class",
                    drop("no_embed_class")))


def test_class_token_must_match_the_config(tmp_path):
    # A GAP folder whose config says class-token pooling.
    def token(config):
        config["global_pool"] = config["model_args"]["global_pool"] = "token"
        config["model_args"]["class_token"] = True
    with pytest.raises(UsageError, match="lack a cls_token"):
        _load(_copy(tmp_path, "timm_vit_gap", token))


# --- round 3: configs read as the library reads them ---------------------

def test_left_out_fields_take_vit_config_defaults(tmp_path):
    # hidden_size left out: ViTConfig's 768, which the 32-wide arrays
    # contradict (transformers refuses the size mismatch).
    def no_width(config):
        del config["hidden_size"]
    with pytest.raises(UsageError, match=r"hidden_size \(left out: "
                       r"transformers' ViTConfig default\)=768 disagrees"):
        _load(_copy(tmp_path, "hf_vit_classifier", no_width))
    # id2label of 5 names over a 5-row classifier loads; of 2, refused.
    def two_labels(config):
        config["id2label"] = {"0": "a", "1": "b"}
    with pytest.raises(UsageError, match=r"num_labels \(from id2label\)=2 "
                       r"disagrees with the weights \(5\)"):
        _load(_copy(tmp_path / "labels", "hf_vit_classifier", two_labels))


def test_timm_qkv_bias_follows_its_strict_load(tmp_path):
    # Biases stored, qkv_bias=False: timm's strict load refuses them.
    with pytest.raises(UsageError, match="timm builds no query/key/value "
                       "bias, and its strict load refuses weights with "
                       r"blocks.0.attn.qkv.bias"):
        _load(_copy(tmp_path, "timm_vit", _set("qkv_bias", False,
                                                args=True)))
    # No biases stored, qkv_bias left at timm's True: refused too.
    folder = _copy(tmp_path / "none", "timm_vit")
    path = os.path.join(folder, "model.safetensors")
    arrays = safetensors.numpy.load_file(path)
    safetensors.numpy.save_file(
        {k: v for k, v in arrays.items() if not k.endswith("qkv.bias")},
        path)
    with pytest.raises(UsageError, match="timm builds a query/key/value "
                       "bias, and its strict load refuses weights without"):
        _load(folder)


@pytest.mark.parametrize("field", ["layer_norm_eps", "num_attention_heads",
                                   "image_size", "patch_size"])
def test_hugging_face_null_sizes_are_refused_by_name(tmp_path, field):
    """A size or epsilon set to null, from which transformers builds no
    model: one line naming the field and transformers' default."""
    with pytest.raises(UsageError, match=f"config.json sets {field} to "
                       "null, from which transformers builds no model"):
        _load(_copy(tmp_path, "hf_vit_classifier", _set(field, None)))


def test_an_image_size_of_too_many_tokens_is_refused_before_it_builds(
        tmp_path):
    """A timm config.json edited to 8,192 x 8,192 (its table would be
    resized to a million tokens): one line, not an out-of-memory."""
    def edit(config):
        config["model_args"]["img_size"] = [8192, 8192]
        config["pretrained_cfg"]["input_size"] = [3, 8192, 8192]

    with pytest.raises(UsageError, match=r"config.json image size \[8192, "
                       r"8192\] at patch \d+ makes [\d,]+ tokens, more than "
                       "the 16,384"):
        _load(_copy(tmp_path, "timm_vit", edit))


def test_a_classifier_of_no_labels_is_the_class_token_features(tmp_path):
    """ViTForImageClassification with num_labels 0 builds an identity
    classifier in transformers: no classifier arrays, the class token's
    features; read as a features model, the same features as the
    classifier's folder gives without its head. Without num_labels 0, a
    missing classifier is still refused."""
    def edit(config):  # as save_pretrained writes num_labels 0
        config.pop("num_labels", None)
        config["id2label"], config["label2id"] = {}, {}

    folder = _copy(tmp_path, "hf_vit_classifier")
    path = os.path.join(folder, "model.safetensors")
    arrays = safetensors.numpy.load_file(path)
    safetensors.numpy.save_file(
        {k: v for k, v in arrays.items() if not k.startswith("classifier.")},
        path)
    with pytest.raises(UsageError, match="hold no classifier.weight"):
        _load(folder)
    features = _load(_copy(tmp_path, "hf_vit_classifier", edit))
    reference = loader.load_model(loader.HubSource(os.path.join(
        FIXTURES, "hf_vit_classifier")), num_classes=0)
    x = np.random.default_rng(0).uniform(
        -1, 1, (2, *features.input_shape[1:])).astype(np.float32)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(features(x)),
        keras.ops.convert_to_numpy(reference(x)), atol=1e-5)


def _predicted(tmp_path, folder, *flags):
    """keras-vit-predict's probabilities (class order) of the fixture's
    first reference image, on `folder`."""
    reference = np.load(os.path.join(FIXTURES, "hf_vit_classifier",
                                     "reference.npz"))
    photo = tmp_path / "photo.png"
    PIL.Image.fromarray(reference["pixels"][0].astype(np.uint8)).save(photo)
    out = tmp_path / "answer.json"
    assert predict.main(["keras-vit-predict", f"--model={folder}",
                         str(photo), f"--output={out}", "--overwrite",
                         "--top_k=100", *flags]) == 0
    top = json.loads(out.read_text())["predictions"][0]["top_k"]
    return np.array([t["probability"]
                     for t in sorted(top, key=lambda t: t["class"])])


def test_a_multi_label_model_is_scored_with_a_sigmoid(tmp_path, capsys):
    """problem_type multi_label_classification: transformers scores each
    label with a sigmoid, and so does keras-vit-predict (--scores=auto):
    the log-odds of its answer are the logits whose softmax --scores=softmax
    gives."""
    folder = _copy(tmp_path, "hf_vit_classifier", _set(
        "problem_type", "multi_label_classification"))
    assert loader.HubSource(folder).scores() == "sigmoid"
    assert loader.HubSource(os.path.join(
        FIXTURES, "hf_vit_classifier")).scores() is None
    alone = _predicted(tmp_path, folder)
    among = _predicted(tmp_path, folder, "--scores=softmax")
    assert not np.isclose(alone.sum(), 1.0, atol=1e-2)
    log_odds = np.log(alone / (1 - alone))
    np.testing.assert_allclose(
        np.exp(log_odds) / np.exp(log_odds).sum(), among, atol=2e-3)


def test_a_problem_type_transformers_refuses_is_refused(tmp_path):
    """PretrainedConfig takes three problem types (or null): another is
    refused by name, not read as a classifier."""
    with pytest.raises(UsageError, match=r"problem_type='ranking': "
                       "transformers builds no model from it"):
        _load(_copy(tmp_path, "hf_vit_classifier",
                    _set("problem_type", "ranking")))


def test_a_one_label_classifier_is_scored_with_a_sigmoid(tmp_path, caplog,
                                                      capsys):
    """One label: transformers' pipeline scores the logit with a sigmoid,
    as keras-vit-predict does (a softmax over one class is 1.0 for every
    image); the model computes the file's logit. With problem_type
    regression, where transformers reads the logit as a value, the log
    says so."""
    def edit(config):
        config["id2label"], config["label2id"] = {"0": "cat"}, {"cat": 0}
        config.pop("num_labels", None)

    folder = _copy(tmp_path, "hf_vit_classifier", edit)
    path = os.path.join(folder, "model.safetensors")
    arrays = safetensors.numpy.load_file(path)
    for name in ("classifier.weight", "classifier.bias"):
        arrays[name] = arrays[name][:1].copy()
    safetensors.numpy.save_file(arrays, path)
    caplog.set_level("WARNING", logger="absl")
    model = _load(folder)
    assert "config.json gives one label" not in caplog.text
    got, want = _outputs(model, folder)
    np.testing.assert_allclose(got, want[:, :1],
                               atol=2e-5 * np.abs(want).max())
    probability = _predicted(tmp_path, folder)
    assert probability.shape == (1,) and 0 < probability[0] < 0.999
    _load(_copy(tmp_path, "hf_vit_classifier",
                _set("problem_type", "regression")))
    assert "config.json gives one label and problem_type regression" in \
        caplog.text


def _processor(tmp_path, **fields):
    """hf_vit_rescale (its own processor file) with `fields` set."""
    folder = _copy(tmp_path, "hf_vit_rescale")
    path = os.path.join(folder, "preprocessor_config.json")
    with open(path) as f:
        proc = json.load(f)
    proc.update(fields)
    with open(path, "w") as f:
        json.dump(proc, f)
    return folder


@pytest.mark.parametrize("fields, named", [
    # EfficientNet's x * factor - 1, with the mean and std its file keeps
    (dict(image_processor_type="EfficientNetImageProcessor",
          rescale_offset=True, include_top=False), "rescale_offset=true"),
    (dict(image_processor_type="MobileViTImageProcessor",
          do_flip_channel_order=True), "do_flip_channel_order=true"),
    # transformers 5 pads for every class where do_pad is set
    (dict(do_pad=True, pad_size={"height": 48, "width": 48}),
     "do_pad=true"),
])
def test_a_processor_step_not_applied_is_refused_by_name(tmp_path, fields,
                                                         named):
    with pytest.raises(UsageError, match=re.escape(named) + r" \(\w+\): a "
                       "step of transformers' preprocessing that keras-vit "
                       "does not apply"):
        _load(_processor(tmp_path, **fields))


def test_processor_fields_left_unset_load(tmp_path):
    """The fields transformers 5's fast classes write unset (null or
    false), and another class's steps turned off, change no pixel."""
    folder = _processor(
        tmp_path, do_pad=None, pad_size=None, device=None,
        disable_grouping=None, data_format="channels_first",
        do_flip_channel_order=False, do_reduce_labels=False)
    _assert_reference(_load(folder), folder)


def test_a_folder_without_a_processor_says_what_it_assumes(tmp_path,
                                                           caplog):
    """No preprocessor_config.json: the log names the normalisation
    assumed (ViTImageProcessor's); a folder with one says nothing."""
    caplog.set_level("WARNING", logger="absl")
    _load(_copy(tmp_path, "hf_vit_classifier"))
    assert "has no preprocessor_config.json" in caplog.text
    assert "to [-1, 1] (mean 0.5, std 0.5)" in caplog.text
    caplog.clear()
    _load(_processor(tmp_path))
    assert "preprocessor_config.json" not in caplog.text


def test_hugging_face_id2label_with_a_gap_is_refused_by_name(tmp_path):
    """id2label of 5 ids, one of them 9: transformers counts 5 labels,
    and class 4 has no name; refused naming the ids, not a count error
    later."""
    def edit(config):
        config["id2label"] = {"0": "cat", "1": "dog", "2": "bird",
                              "3": "fish", "9": "frog"}
        config["label2id"] = {v: int(k) for k, v in
                              config["id2label"].items()}

    with pytest.raises(UsageError, match=r"config.json id2label has ids up "
                       r"to 9 but lacks \[4, 5, 6, 7, 8\]: its 5 ids must be "
                       "0 to 4"):
        _load(_copy(tmp_path, "hf_vit_classifier", edit))


def test_hugging_face_qkv_bias_missing_from_the_file_is_refused(tmp_path):
    """qkv_bias true (transformers' default) but the file lacks a query
    bias: refused by name, as any missing array, not loaded as zeros."""
    folder = _copy(tmp_path, "hf_vit_classifier")
    path = os.path.join(folder, "model.safetensors")
    arrays = safetensors.numpy.load_file(path)
    gone = [k for k in arrays if k.endswith("attention.query.bias")]
    assert gone
    safetensors.numpy.save_file(
        {k: v for k, v in arrays.items() if k not in gone}, path)
    with pytest.raises(UsageError, match=r"lacks .*attention\.query\.bias"):
        _load(folder)


@pytest.mark.parametrize("field, value, message", [
    ("std", [0.2, 0.0, 0.2], "std=.* has a zero: timm would divide"),
    ("mean", [0.5, 0.5], "mean=\[0.5, 0.5\]: three numbers is expected"),
    ("mean", [float("inf")] * 3, "three numbers is expected"),
])
def test_timm_normalisation_constants(tmp_path, field, value, message):
    def edit(config):
        config["pretrained_cfg"][field] = value
    folder = _copy(tmp_path, "timm_vit", edit)
    with pytest.raises(UsageError, match=message):
        _load(folder)


# --- round 4: PretrainedConfig's labels, timm's pretrained_cfg defaults --

def _labels(num_labels=None, id2label=None):
    def edit(config):
        config.pop("id2label"), config.pop("label2id")
        if num_labels is not None:
            config["num_labels"] = num_labels
        if id2label is not None:
            config["id2label"] = id2label
    return edit


def test_num_labels_without_id2label_is_honoured(tmp_path):
    # transformers' PretrainedConfig: no id2label, num_labels=5 builds
    # LABEL_0 .. LABEL_4 and a 5-wide classifier: the same model.
    folder = _copy(tmp_path, "hf_vit_classifier", _labels(5))
    _assert_reference(_load(folder), folder)
    assert loader.class_names(loader.HubSource(folder)) is None
    # num_labels of another width than the classifier, or beside an
    # id2label of another length (transformers warns; its versions keep
    # one or the other).
    with pytest.raises(UsageError, match=r"config.json num_labels=3 "
                       r"disagrees with the weights \(5\)"):
        _load(_copy(tmp_path / "three", "hf_vit_classifier", _labels(3)))
    names = {str(i): f"c{i}" for i in range(5)}
    with pytest.raises(UsageError, match=r"num_labels=4 disagrees with its "
                       r"id2label \(5 names\): transformers warns, and "
                       "its versions keep one or the other"):
        _load(_copy(tmp_path / "both", "hf_vit_classifier",
                    _labels(4, names)))
    folder = _copy(tmp_path / "agree", "hf_vit_classifier", _labels(5, names))
    _assert_reference(_load(folder), folder)
    # Neither: PretrainedConfig's 2.
    with pytest.raises(UsageError, match=r"num_labels \(no id2label: "
                       r"transformers' default\)=2 disagrees"):
        _load(_copy(tmp_path / "none", "hf_vit_classifier", _labels()))


def _timm_edit(args=None, top=None, pretrained=None, drop_args=()):
    def edit(config):
        for key in drop_args:
            config["model_args"].pop(key)
        config["model_args"].update(args or {})
        for key, value in (top or {}).items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        for key, value in (pretrained or {}).items():
            if value is None:
                config["pretrained_cfg"].pop(key, None)
            else:
                config["pretrained_cfg"][key] = value
    return edit


def test_timm_in_chans_from_pretrained_input_size(tmp_path):
    # Without model_args.in_chans timm builds input_size[0] channels
    # (_update_default_model_kwargs), here 1: refused like in_chans=1.
    edit = _timm_edit(drop_args=["in_chans"],
                      pretrained={"input_size": [1, 32, 32]})
    with pytest.raises(UsageError, match=r"config.json pretrained_cfg."
                       r"input_size=\[1, 32, 32\]: timm builds in_chans=1"):
        _load(_copy(tmp_path, "timm_vit", edit))
    # model_args' in_chans=3 comes first: timm loads the RGB kernel.
    edit = _timm_edit(pretrained={"input_size": [1, 32, 32]})
    folder = _copy(tmp_path / "rgb", "timm_vit", edit)
    _assert_reference(_load(folder), folder)
    with pytest.raises(UsageError, match=r"config.json in_chans=1: images "
                       r"that are not RGB"):
        _load(_copy(tmp_path / "one", "timm_vit",
                    _timm_edit(args={"in_chans": 1})))


@pytest.mark.parametrize("edit, message", [
    # The top-level num_classes, copied over pretrained_cfg's by timm's
    # hub config parsing, builds a 5-wide head: its strict load refuses 3.
    (_timm_edit(drop_args=["num_classes"], top={"num_classes": 5}),
     r"config.json num_classes=5 disagrees with the weights \(3\)"),
    (_timm_edit(drop_args=["num_classes"], top={"num_classes": None},
                pretrained={"num_classes": 5}),
     r"config.json pretrained_cfg.num_classes=5 disagrees with the weights"),
    (_timm_edit(drop_args=["num_classes"], top={"num_classes": None},
                pretrained={"num_classes": None}),
     r"num_classes \(left out: timm's PretrainedCfg default\)=1000 "
     r"disagrees with the weights \(3\)"),
    # model_args builds 3, pretrained_cfg says 5 (or 0): timm's loader
    # drops the stored head and starts it at random.
    (_timm_edit(top={"num_classes": 5}),
     r"config.json num_classes=5 is not the 3 classes timm builds "
     r"\(model_args.num_classes\): its loader then drops the stored head"),
    (_timm_edit(top={"num_classes": 0}), r"num_classes=0 is not the 3"),
    # label_offset: timm cuts the stored head's first rows before loading.
    (_timm_edit(pretrained={"label_offset": 1}),
     r"config.json pretrained_cfg.label_offset=1: timm's loader drops the "
     r"stored head's first 1 row"),
])
def test_timm_num_classes_as_its_factory_builds_them(tmp_path, edit,
                                                     message):
    with pytest.raises(UsageError, match=message):
        _load(_copy(tmp_path, "timm_vit", edit))


def test_timm_num_classes_from_the_top_level_loads(tmp_path):
    folder = _copy(tmp_path, "timm_vit", _timm_edit(
        drop_args=["num_classes"], pretrained={"num_classes": 7}))
    _assert_reference(_load(folder), folder)  # the top-level 3 wins


def test_a_backbone_of_other_numerics_says_it_loses_them(tmp_path, caplog):
    # The official layout holds no numerics: a backbone written from
    # Hugging Face weights (exact GELU, epsilon 1e-12) builds models of the
    # official ones (VTAB fine-tunes from it); the log says so.
    folder = os.path.join(FIXTURES, "hf_vit_classifier")
    caplog.set_level("WARNING")
    backbone = loader.write_backbone(folder, str(tmp_path / "b.npz"))
    assert "computes its blocks otherwise (GELU exact (erf), LayerNorm " \
           "epsilon 1e-12) than the official ViT" in caplog.text
    assert loader.describe_source(backbone).numerics == keras_vit.Numerics()
    caplog.clear()
    official = str(tmp_path / "official.npz")
    weights.save_npz(keras_vit.create_model(
        None, num_classes=3, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=32), official)
    loader.write_backbone(official, str(tmp_path / "b2.npz"))
    assert "computes its blocks otherwise" not in caplog.text


def test_hugging_face_id2label_is_read_as_transformers_keys_it(tmp_path):
    """transformers turns id2label's keys into ints, so "0" and "00" are
    one class (a one-logit head, which a 5-row classifier contradicts),
    and refuses a list ("should be a dictionary")."""
    def same_id(config):
        config["id2label"] = {"0": "cat", "00": "dog"}
        config.pop("num_labels", None)

    assert hub_config.num_labels({"0": "cat", "00": "dog"}, None) == 1
    assert hub_config.class_names({"0": "cat", "00": "dog"}, hf=True) == [
        "dog"]
    with pytest.raises(UsageError, match=r"num_labels \(from id2label\)=1 "
                       r"disagrees with the weights \(5\)"):
        _load(_copy(tmp_path / "same", "hf_vit_classifier", same_id))
    with pytest.raises(UsageError, match=r"num_labels=2 disagrees with its "
                       r"id2label \(1 names\)"):
        hub_config.num_labels({"0": "cat", "00": "dog"}, 2)

    def listed(config):
        config["id2label"] = ["cat", "dog", "bird", "fish", "frog"]

    with pytest.raises(UsageError, match=r"id2label.*an \{id: name\} "
                       "object, as transformers takes it"):
        _load(_copy(tmp_path / "list", "hf_vit_classifier", listed))

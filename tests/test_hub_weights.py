"""Hugging Face and timm ViT weights through the one loader, checked against
the outputs of the implementations that wrote them (transformers and timm,
run by scripts/make_hub_fixtures.py; see tests/fixtures/hub/versions.json).
No PyTorch is needed here."""

import io
import json
import os
import pickle
import re
import shutil
import struct
import zipfile

import keras
import numpy as np
import pytest
import safetensors.numpy

from keras_vit.checkpoint import loader
from keras_vit.checkpoint.formats import torch_pickle
from keras_vit.checkpoint.hub import reader as hub
from keras_vit.checkpoint.hub import timm as hub_timm
from keras_vit.errors import UsageError
from tests import console
from tests.hub_fixtures import FIXTURES, assert_close, hub_source, run_model


@pytest.mark.parametrize("name, output, naming", [
    ("hf_vit_classifier", "logits", hub.HUGGINGFACE),        # safetensors
    ("hf_vit_model_bin", "pooler_output", hub.HUGGINGFACE),  # .bin, pooler
    ("timm_vit", "logits", hub.TIMM),              # ImageNet mean / std
    ("hf_vit_model_relu", "pooler_output", hub.HUGGINGFACE),  # pooler_act
    ("hf_vit_v5_state_dict", "logits", hub.HUGGINGFACE),  # q_proj naming
    ("timm_vit_gap", "logits", hub.TIMM),          # global_pool "avg"
    ("timm_vit_token_fc_norm", "logits", hub.TIMM),  # fc_norm on the token
    ("timm_vit_label_dict", "logits", hub.TIMM),
])
def test_outputs_equal_the_reference_implementation(name, output, naming):
    reference = np.load(os.path.join(FIXTURES, name, "reference.npz"))
    model, report = loader.load_report(hub_source(name))
    assert report.layout == naming and report.ok
    assert_close(run_model(model, reference["pixels"]), reference[output])


def test_architecture_and_class_names_from_config():
    info = loader.describe_source(hub_source("hf_vit_classifier"))
    assert (info.hidden_size, info.num_layers, info.num_heads,
            info.mlp_dim, info.patch_size) == (32, 2, 4, 64, 8)
    assert info.image_size == (32, 32) and not info.numerics.approximate_gelu
    assert info.numerics.layer_norm_epsilon == 1e-12
    assert loader.class_names(hub_source("hf_vit_classifier")) == [
        "cat", "dog", "bird", "fish", "frog"]
    assert loader.class_names(hub_source("timm_vit")) == [
        "red", "green", "blue"]
    # ViTModel: the pooler is the pre-logits layer, and there is no head.
    model = loader.load_model(hub_source("hf_vit_model_bin"))
    assert model.layers[-1].name == "pre_logits"


def test_weights_file_path_and_keras_round_trip(tmp_path):
    path = os.path.join(FIXTURES, "timm_vit", "model.safetensors")
    model = loader.load_model(loader.HubSource(path))
    pixels = np.load(os.path.join(FIXTURES, "timm_vit", "reference.npz"))[
        "pixels"]
    model.save(tmp_path / "timm.keras")
    again = keras.models.load_model(tmp_path / "timm.keras")
    np.testing.assert_array_equal(run_model(model, pixels),
                                  run_model(again, pixels))


def test_new_resolution_resizes_the_position_embedding():
    model, report = loader.load_report(hub_source("hf_vit_classifier"), 48)
    assert model.input_shape == (None, 48, 48, 3)
    assert report.posemb_resized == ((4, 4), (6, 6))


def test_distillation_token_is_named():
    with pytest.raises(ValueError, match=r"first dist_token \(1, 1, 16\)"):
        loader.load_model(hub_source("timm_deit_distilled"))


def test_first_unsupported_key_is_named(tmp_path):
    folder = tmp_path / "layer_scale"
    shutil.copytree(os.path.join(FIXTURES, "timm_vit"), folder)
    arrays = safetensors.numpy.load_file(str(folder / "model.safetensors"))
    arrays["blocks.0.ls1.gamma"] = np.ones(32, np.float32)
    safetensors.numpy.save_file(arrays, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match=r"first blocks\.0\.ls1\.gamma"):
        loader.load_model(loader.HubSource(str(folder)))


def test_missing_config_and_other_model_types(tmp_path):
    folder = tmp_path / "no_config"
    shutil.copytree(os.path.join(FIXTURES, "hf_vit_classifier"), folder)
    os.remove(folder / "config.json")
    with pytest.raises(FileNotFoundError, match="config.json is missing"):
        loader.load_model(loader.HubSource(str(folder)))
    with pytest.raises(FileNotFoundError, match="holds none of"):
        loader.load_model(loader.HubSource(str(tmp_path)))
    folder = tmp_path / "deit"
    shutil.copytree(os.path.join(FIXTURES, "hf_vit_classifier"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "deit"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="model_type 'deit'"):
        loader.load_model(loader.HubSource(str(folder)))


def test_state_dict_reader_refuses_code(tmp_path):
    path = tmp_path / "pytorch_model.bin"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl",
                         pickle.dumps({"w": io.BytesIO(b"x")}, protocol=2))
    with pytest.raises(ValueError, match=r"holds a _io\.BytesIO object"):
        torch_pickle.read_state_dict(str(path))
    (tmp_path / "old.bin").write_bytes(pickle.dumps({"w": 1}))
    with pytest.raises(ValueError, match="not a zip-format PyTorch file"):
        torch_pickle.read_state_dict(str(tmp_path / "old.bin"))


def test_a_weights_file_cut_short_is_told_to_be_fetched_again(tmp_path):
    """A download cut short: a model.safetensors whose header runs past
    its end, a pytorch_model.bin whose zip index is missing. Each is one
    line that says to download the file again (the .bin's was told to be
    converted, as an old PyTorch file is)."""
    cases = (("hf_vit_classifier", "model.safetensors", 40_000,
              "as safetensors: "),
             ("hf_vit_model_bin", "pytorch_model.bin", 30_000,
              "is a zip-format PyTorch file cut short (its index at the end "
              "is missing): "))
    for fixture, weights, size, says in cases:
        folder = tmp_path / fixture
        shutil.copytree(os.path.join(FIXTURES, fixture), folder)
        with open(folder / weights, "r+b") as f:
            f.truncate(size)
        result = console.run("convert", [f"--model={folder}",
                                         f"--output={tmp_path}/m.keras"])
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 1 and len(lines) == 1, result.stderr
        assert lines[0].startswith("keras-vit-convert: error: "), lines
        assert says in lines[0] and lines[0].endswith(
            "damaged or partly downloaded file: download or copy it "
            "again."), lines
        assert not (tmp_path / "m.keras").exists()


def test_normalisation_fold_is_exact():
    # (x - mean) / std of x = p / 255 through a linear patch embedding
    # equals the folded embedding of y = p / 127.5 - 1.
    rng = np.random.default_rng(0)
    kernel = rng.normal(size=(2, 2, 3, 4)).astype(np.float32)
    bias = rng.normal(size=4).astype(np.float32)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    arrays = {"embedding/kernel": kernel, "embedding/bias": bias}
    hub.fold_normalisation(arrays, mean, std)
    pixels = rng.integers(0, 256, (2, 2, 3)).astype(np.float64)
    x = (pixels / 255 - np.asarray(mean)) / np.asarray(std)
    y = pixels / 127.5 - 1
    want = np.einsum("hwc,hwcd->d", x, kernel) + bias
    got = np.einsum("hwc,hwcd->d", y, arrays["embedding/kernel"]) + arrays[
        "embedding/bias"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_timm_hub_config_without_model_args():
    # The config.json timm writes for a named pretrained model (e.g.
    # timm/vit_base_patch16_224.augreg_in21k_ft_in1k) has no model_args.
    settings = hub_timm.settings({
        "architecture": "vit_base_patch16_224", "num_classes": 1000,
        "global_pool": "token",
        "pretrained_cfg": {"input_size": [3, 224, 224],
                           "mean": [0.5] * 3, "std": [0.5] * 3},
    })
    assert settings["num_heads"] == 12
    assert settings["image_size"] == (224, 224)
    assert not settings["approximate_gelu"]
    assert settings["pooling"] == "token"
    # The top-level global_pool must agree with what the name registers.
    with pytest.raises(ValueError, match="global_pool 'avg' disagrees"):
        hub_timm.settings({"architecture": "vit_base_patch16_224",
                           "global_pool": "avg", "pretrained_cfg": {}})
    # In timm's older single-dict config (no pretrained_cfg) every other
    # top-level key becomes a PretrainedCfg field, which has no
    # global_pool: timm raises TypeError.
    with pytest.raises(ValueError, match="has 'global_pool', not a field "
                       "of timm 1.0.31's PretrainedCfg"):
        hub_timm.settings({"architecture": "vit_base_patch16_224",
                           "global_pool": "avg"})


def test_sharded_safetensors(tmp_path):
    folder = tmp_path / "sharded"
    shutil.copytree(os.path.join(FIXTURES, "timm_vit"), folder)
    arrays = safetensors.numpy.load_file(str(folder / "model.safetensors"))
    os.remove(folder / "model.safetensors")
    keys = sorted(arrays)
    shards = {"model-00001-of-00002.safetensors": keys[::2],
              "model-00002-of-00002.safetensors": keys[1::2]}
    for name, part in shards.items():
        safetensors.numpy.save_file({k: arrays[k] for k in part},
                                    str(folder / name))
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {k: n for n, part in shards.items() for k in part}}))
    reference = np.load(folder / "reference.npz")
    model = loader.load_model(loader.HubSource(str(folder)))
    np.testing.assert_allclose(run_model(model, reference["pixels"]),
                               reference["logits"], atol=1e-4)


@pytest.mark.parametrize("shards, weight_map, says", [
    # A key in two shards: refused, not the later one taken.
    ({"a.safetensors": ["w", "x"], "b.safetensors": ["x"]},
     {"w": "a.safetensors", "x": "b.safetensors"},
     "'x' is in both shards 'a.safetensors' and 'b.safetensors'"),
    # A key in a shard whose weight_map has no entry for it.
    ({"a.safetensors": ["w", "extra"]}, {"w": "a.safetensors"},
     "'extra' is in shard 'a.safetensors', but its weight_map names None"),
    # A key in another shard than the weight_map names for it.
    ({"a.safetensors": ["w"], "b.safetensors": ["x", "y"]},
     {"w": "a.safetensors", "x": "b.safetensors", "y": "a.safetensors"},
     "'y' is in shard 'b.safetensors', but its weight_map names "
     "'a.safetensors'"),
    # A weight_map key its shard does not hold.
    ({"a.safetensors": ["w"]}, {"w": "a.safetensors", "y": "a.safetensors"},
     "puts array 'y' in shard 'a.safetensors', which does not hold it"),
])
def test_sharded_index_reads_each_key_from_its_named_shard(
        tmp_path, shards, weight_map, says):
    """A sharded safetensors index is read as transformers reads it: each
    array from the shard its weight_map names; an array in two shards, in
    a shard the weight_map does not name for it, or missing from its
    shard is refused (one line naming it and the shards)."""
    from keras_vit.checkpoint.hub import tensors

    for name, keys in shards.items():
        safetensors.numpy.save_file(
            {k: np.ones((2,), np.float32) for k in keys},
            str(tmp_path / name))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(UsageError, match=re.escape(says)) as info:
        tensors.read_tensors(str(index))
    assert "\n" not in str(info.value)
    # The same shards under a weight_map that names each array's shard:
    # every array read from it.
    exact = {k: n for n, keys in shards.items() for k in keys}
    if len(exact) == sum(map(len, shards.values())):
        index.write_text(json.dumps({"weight_map": exact}))
        read = tensors.read_tensors(str(index))
        assert sorted(read) == sorted(exact)
        np.testing.assert_array_equal(read["w"], np.ones(2))


def _edited_arrays(tmp_path, name, edit):
    """A copy of fixture `name` whose model.safetensors `edit` changed."""
    folder = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), folder)
    path = str(folder / "model.safetensors")
    arrays = safetensors.numpy.load_file(path)
    edit(arrays)
    safetensors.numpy.save_file(arrays, path)
    return str(folder)


_Q_BIAS = "vit.encoder.layer.0.attention.attention.query.bias"


@pytest.mark.parametrize("name, key, cut, message", [
    # A query bias of 16 for a 32-wide model cannot be split into heads.
    ("hf_vit_classifier", _Q_BIAS, slice(16), r"\(16,\), where a model 32 "
     r"wide \(its patch embedding's width\) needs \(32,\)"),
    ("hf_vit_classifier", "vit.encoder.layer.1.attention.output.dense."
     "weight", (slice(None), slice(24)), r"\(32, 24\), .* needs \(32, 32\)"),
    # timm's fused qkv: 95 or 48 rows do not split in three 32-row parts.
    ("timm_vit", "blocks.0.attn.qkv.weight", slice(95),
     r"\(95, 32\), .* needs \(96, 32\)"),
    ("timm_vit", "blocks.0.attn.qkv.bias", slice(48),
     r"\(48,\), .* needs \(96,\)"),
    # A head bias of 4 beside 5 classes, a classifier 16 wide.
    ("hf_vit_classifier", "classifier.bias", slice(4),
     r"\(4,\), .* needs \(5,\)"),
    ("hf_vit_classifier", "classifier.weight", (slice(None), slice(16)),
     r"\(5, 16\), .* needs \(5, 32\)"),
    # The class token and the position table of another rank (the same
    # numbers, as a header that lies about the shape gives them): named
    # with the shape they need, not read as a table of 32 rows.
    ("hf_vit_classifier", "vit.embeddings.position_embeddings", (0,),
     r"\(17, 32\), .* needs \(1, tokens, 32\)"),
    ("timm_vit", "pos_embed", (Ellipsis, None),
     r"\(1, 17, 32, 1\), .* needs \(1, tokens, 32\)"),
    ("timm_vit", "pos_embed", (slice(None), slice(None), slice(16)),
     r"\(1, 17, 16\), .* needs \(1, tokens, 32\)"),
    ("hf_vit_classifier", "vit.embeddings.cls_token", (0, 0),
     r"\(32,\), .* needs \(1, 1, 32\)"),
])
def test_mis_shaped_arrays_are_refused_by_name(tmp_path, name, key, cut,
                                               message):
    text = _refusal(tmp_path, name, key, lambda array: array[cut])
    assert re.search(re.escape(key) + " has shape " + message, text), text


def _refusal(tmp_path, name, key, change):
    """The one-line UsageError, starting with the folder, of fixture
    `name` with array `key` replaced by `change` of it."""
    def edit(arrays):
        arrays[key] = np.ascontiguousarray(change(arrays[key]))
    folder = _edited_arrays(tmp_path, name, edit)
    with pytest.raises(ValueError) as error:
        loader.load_model(loader.HubSource(folder))
    assert type(error.value).__name__ == "UsageError"
    text = str(error.value)
    assert "\n" not in text and text.startswith(folder)
    return text


_HF_KERNEL = "vit.embeddings.patch_embeddings.projection.weight"


def _four_channels(kernel):
    return np.concatenate([kernel, kernel[:, :1]], axis=1)


@pytest.mark.parametrize("name, key, change, shape", [
    # 4 input channels: transformers' / timm's Conv2d over RGB refuses it.
    ("hf_vit_classifier", _HF_KERNEL, _four_channels, (32, 4, 8, 8)),
    ("timm_vit", "patch_embed.proj.weight", _four_channels, (32, 4, 8, 8)),
    # transformers' Conv2d has no 2-D form (timm's filter reshapes one).
    ("hf_vit_classifier", _HF_KERNEL, lambda k: k.reshape(32, -1),
     (32, 192)),
])
def test_a_patch_kernel_not_over_rgb_pixels_is_refused(tmp_path, name, key,
                                                       change, shape):
    text = _refusal(tmp_path, name, key, change)
    assert f"{key} has shape {shape}, where a Conv2d patch kernel (out, " \
        "3, P, P) over RGB images is expected" in text, text


def _write_bf16_safetensors(path, arrays):
    """A safetensors file of BF16 arrays, written from the format's
    specification (8-byte header length, JSON header, raw data): each
    float32 rounded to bfloat16, nearest even. Returns the float32 each
    stored 16 bits stand for."""
    header, chunks, held, offset = {}, [], {}, 0
    for key, value in sorted(arrays.items()):
        bits = np.ascontiguousarray(value, np.float32).view(np.uint32)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        data = rounded.astype("<u2").tobytes()
        header[key] = {"dtype": "BF16", "shape": list(value.shape),
                       "data_offsets": [offset, offset + len(data)]}
        held[key] = (rounded.astype(np.uint32) << 16).view(np.float32)
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    return held


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_safetensors_hold_the_same_numbers(tmp_path, dtype):
    # A bfloat16 or float16 array is held as the float32 of the same
    # number: the model equals one read from those float32 values.
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")  # what safetensors reads BF16 as
    source = os.path.join(FIXTURES, "hf_vit_classifier")
    arrays = safetensors.numpy.load_file(
        os.path.join(source, "model.safetensors"))
    half, wide = tmp_path / "half", tmp_path / "float32"
    for folder in (half, wide):
        folder.mkdir()
        shutil.copy(os.path.join(source, "config.json"), folder)
    if dtype == "bfloat16":
        held = _write_bf16_safetensors(str(half / "model.safetensors"),
                                       arrays)
    else:
        stored = {k: v.astype(np.float16) for k, v in arrays.items()}
        safetensors.numpy.save_file(stored, str(half / "model.safetensors"))
        held = {k: v.astype(np.float32) for k, v in stored.items()}
    safetensors.numpy.save_file(held, str(wide / "model.safetensors"))
    got, want = hub.read_hub(str(half)), hub.read_hub(str(wide))
    assert sorted(got.arrays) == sorted(want.arrays)
    for key, value in want.arrays.items():
        assert got.arrays[key].dtype == np.float32
        np.testing.assert_array_equal(got.arrays[key], value)
    # And the rounding is the only change: transformers' logits within
    # the half type's precision.
    reference = np.load(os.path.join(source, "reference.npz"))
    model = loader.load_model(loader.HubSource(str(half)))
    logits = run_model(model, reference["pixels"])
    np.testing.assert_allclose(logits, reference["logits"],
                               atol=0.05 * np.abs(reference["logits"]).max())


def test_a_float8_safetensors_array_is_refused_by_its_type(tmp_path):
    """An array stored as float8 (a type NumPy lacks): the command says
    which array and type, and the types to save the model in."""
    source = os.path.join(FIXTURES, "hf_vit_classifier")
    folder = tmp_path / "fp8"
    folder.mkdir()
    shutil.copy(os.path.join(source, "config.json"), folder)
    arrays = safetensors.numpy.load_file(
        os.path.join(source, "model.safetensors"))
    key = "vit.encoder.layer.0.output.dense.weight"
    header, chunks, offset = {}, [], 0
    for name, value in sorted(arrays.items()):
        if name == key:  # one byte an element, as F8_E4M3 declares
            data, dtype = np.zeros(value.size, np.uint8).tobytes(), "F8_E4M3"
        else:
            data, dtype = value.astype("<f4").tobytes(), "F32"
        header[name] = {"dtype": dtype, "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (folder / "model.safetensors").write_bytes(
        struct.pack("<Q", len(text)) + text + b"".join(chunks))
    result = console.run("convert", [f"--model={folder}",
                                     f"--output={tmp_path / 'out.keras'}"])
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"keras-vit-convert: error: {key} of {folder}/model.safetensors is "
        "stored as float8 (F8_E4M3), which is not read: save the model in "
        "float32, bfloat16 or float16."), result.stderr
    assert not (tmp_path / "out.keras").exists()

"""Hub folders read as their own library reads them (issue: never a model
read differently from its library). Each reference was computed by the
library's own loader from the same folder (transformers' from_pretrained
and image processor, timm's create_model("local-dir:...") and data config;
scripts/make_hub_fixtures.py), so a folder keras_vit reads another way
shows here as other numbers."""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import safetensors.numpy

from keras_vit import VisionTransformer, create_model
from keras_vit.checkpoint import loader, posemb
from keras_vit.checkpoint.hub import reader as hub
from keras_vit.checkpoint.hub import timm_defaults, timm_registry
from keras_vit.errors import UsageError
from tests.hub_fixtures import FIXTURES, assert_close, hub_source, run_model


@pytest.mark.parametrize("name, output", [
    # vit.pooler.* beside the classifier: transformers' class leaves it out.
    ("hf_vit_classifier_stray_pooler", "logits"),
    # classifier.* beside a ViTModel: its pooler output, no head.
    ("hf_vit_model_stray_classifier", "pooler_output"),
    # preprocessor_config.json: do_normalize false, rescale_factor 1/100
    # with its own mean / std, do_rescale false with pixel-unit mean / std.
    ("hf_vit_no_normalize", "logits"),
    ("hf_vit_rescale", "logits"),
    ("hf_vit_no_rescale", "logits"),
    # model_args img_size 16 x 64 beside input_size 32 x 32: a 2 x 8 grid.
    ("timm_vit_img_size_args", "logits"),
    # No mean / std in pretrained_cfg: timm's ImageNet defaults.
    ("timm_vit_no_mean_std", "logits"),
    # mlp_ratio 2.3 of width 16: an MLP int(36.8) = 36 wide.
    ("timm_vit_mlp_ratio", "logits"),
    # qkv_bias false beside stored q/k/v biases: transformers ignores them.
    ("hf_vit_qkv_bias_false_stray", "logits"),
    # No num_attention_heads: ViTConfig's default, 12.
    ("hf_vit_default_heads", "logits"),
    # dynamic_img_pad at whole patches: nothing to pad.
    ("timm_vit_dynamic_pad", "logits"),
    # A 2-D patch kernel, reshaped by timm's checkpoint filter.
    ("timm_vit_kernel_2d", "logits"),
    # A training checkpoint: timm takes state_dict_ema (module. keys).
    ("timm_vit_ema_checkpoint", "logits"),
])
def test_outputs_equal_the_library_reading_the_same_folder(name, output):
    reference = np.load(os.path.join(FIXTURES, name, "reference.npz"))
    model = loader.load_model(hub_source(name))
    assert model.input_shape[1:3] == reference["pixels"].shape[1:3]
    assert_close(run_model(model, reference["pixels"]), reference[output])


def test_stray_arrays_leave_the_model_as_the_class_builds_it():
    classifier = loader.load_model(hub_source("hf_vit_classifier_stray_pooler"))
    names = [layer.name for layer in classifier.layers]
    assert "pre_logits" not in names and names[-1] == "head"
    features = loader.load_model(hub_source("hf_vit_model_stray_classifier"))
    assert features.layers[-1].name == "pre_logits"
    assert features.output_shape == (None, 32)


def test_timm_image_size_precedence_and_defaults():
    info = loader.describe_source(hub_source("timm_vit_img_size_args"))
    assert info.image_size == (16, 64)
    checkpoint = hub.read_hub(os.path.join(FIXTURES, "timm_vit_no_mean_std"))
    assert checkpoint.mean == (0.485, 0.456, 0.406)
    assert checkpoint.std == (0.229, 0.224, 0.225)


@pytest.mark.parametrize("name", ["hf_vit_size_remainder",
                                  "timm_vit_size_remainder"])
def test_size_not_divisible_by_the_patch_reads_the_whole_patches(name):
    # Image size 35, patch 8: the libraries' convolution (stride 8, VALID)
    # reads the top-left 32 x 32 pixels; the model is built at that size.
    reference = np.load(os.path.join(FIXTURES, name, "reference.npz"))
    pixels = reference["pixels"]
    assert pixels.shape[1:3] == (35, 35)
    model = loader.load_model(hub_source(name))
    assert model.input_shape == (None, 32, 32, 3)
    assert_close(run_model(model, pixels[:, :32, :32]), reference["logits"])


@pytest.mark.parametrize("name", ["hf_vit_patch_8x4", "timm_vit_patch_8x4"])
def test_non_square_patches_are_refused_for_the_real_reason(name):
    with pytest.raises(UsageError, match=r"non-square patches \(8 x 4"):
        loader.load_model(hub_source(name))


def _copy(tmp_path, name, tag=""):
    folder = tmp_path / (name + tag)
    shutil.copytree(os.path.join(FIXTURES, name), folder)
    return folder


def _edit(path, **fields):
    data = json.loads(path.read_text())
    data.update(fields)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("fields, message", [
    (dict(image_std=[0.5, 0.0, 0.5]), "image_std=.* has a zero"),
    (dict(rescale_factor=0), "rescale_factor=0: a positive number"),
    (dict(image_mean=[0.5, 0.5]), "image_mean=.*a list of 3 numbers"),
    (dict(image_mean="imagenet"), "image_mean='imagenet'"),
])
def test_processor_values_that_define_no_input_are_refused(
        tmp_path, fields, message):
    folder = _copy(tmp_path, "hf_vit_rescale")
    _edit(folder / "preprocessor_config.json", **fields)
    with pytest.raises(UsageError, match="preprocessor_config.json " +
                       message):
        loader.load_model(loader.HubSource(str(folder)))


@pytest.mark.parametrize("field", ["do_normalize", "do_rescale",
                                   "rescale_factor"])
def test_a_null_processor_field_takes_the_class_default(tmp_path, field):
    # transformers' image processors give a null field the class default
    # (_set_attributes): rescale by 1/255 and normalise, as the folder
    # without the null does (transformers' outputs in reference.npz).
    folder = _copy(tmp_path, "hf_vit_model_bin")
    _edit(folder / "preprocessor_config.json", **{field: None})
    reference = np.load(os.path.join(folder, "reference.npz"))
    model = loader.load_model(loader.HubSource(str(folder)))
    assert_close(run_model(model, reference["pixels"]),
                 reference["pooler_output"])
    checkpoint = hub.read_hub(str(folder))
    plain = hub.read_hub(os.path.join(FIXTURES, "hf_vit_model_bin"))
    np.testing.assert_allclose(checkpoint.mean, plain.mean)
    np.testing.assert_allclose(checkpoint.std, plain.std)


def test_scalar_processor_mean_is_broadcast_as_transformers_does(tmp_path):
    folder = _copy(tmp_path, "hf_vit_rescale")
    _edit(folder / "preprocessor_config.json", image_mean=0.4,
          image_std=0.25)
    checkpoint = hub.read_hub(str(folder))
    # (p * 0.01 - 0.4) / 0.25 == (p / 255 - 0.4 / 2.55) / (0.25 / 2.55)
    np.testing.assert_allclose(checkpoint.mean, [0.4 / 2.55] * 3)
    np.testing.assert_allclose(checkpoint.std, [0.25 / 2.55] * 3)


def test_architectures_choose_the_arrays(tmp_path):
    folder = _copy(tmp_path, "hf_vit_classifier_stray_pooler")
    _edit(folder / "config.json", architectures=["ViTForMaskedImageModeling"])
    with pytest.raises(UsageError, match="architectures=.*other than one"):
        loader.load_model(loader.HubSource(str(folder)))
    # A classifier's config whose file has no classifier: transformers
    # would start the head at random.
    folder = _copy(tmp_path, "hf_vit_model_stray_classifier")
    _edit(folder / "config.json", architectures=["ViTForImageClassification"])
    arrays = safetensors.numpy.load_file(str(folder / "model.safetensors"))
    safetensors.numpy.save_file(
        {k: v for k, v in arrays.items() if not k.startswith("classifier")},
        str(folder / "model.safetensors"))
    with pytest.raises(UsageError, match="no classifier.weight"):
        loader.load_model(loader.HubSource(str(folder)))
    # Without architectures, a file with a classifier is what
    # AutoModelForImageClassification reads: a ViTForImageClassification,
    # num_labels from id2label, else 2 (this ViTModel config has none
    # beside its 4-class stray head: transformers refuses the sizes).
    folder = _copy(tmp_path, "hf_vit_model_stray_classifier", "_b")
    config = json.loads((folder / "config.json").read_text())
    del config["architectures"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UsageError, match=r"num_labels \(no id2label: "
                       r"transformers' default\)=2 disagrees with the "
                       r"weights \(4\)"):
        loader.load_model(loader.HubSource(str(folder)))


def test_bicubic_equals_torch_interpolate():
    data = np.load(os.path.join(FIXTURES, "bicubic.npz"))
    keys = [k[len("in_"):] for k in data if k.startswith("in_")]
    assert len(keys) == 6
    for key in keys:
        grid = data[f"in_{key}"]  # (1, D, rows, cols), float64
        old, new = ((int(a), int(b)) for a, b in
                    (part.split("x") for part in key.split("_")))
        table = grid[0].reshape(grid.shape[1], -1).T[None]  # (1, N, D)
        for library, tag in (("huggingface", "plain"), ("timm", "aa")):
            want = data[f"out_{key}_{tag}"][0]
            got = posemb.resize_like_library(table, new, old, 0, library)
            got = got[0].T.reshape(want.shape)
            np.testing.assert_allclose(got, want, atol=1e-12)


@pytest.mark.parametrize("name", ["hf_vit_classifier", "timm_vit"])
@pytest.mark.parametrize("size", [(48, 48), (16, 16), (24, 40)])
def test_other_resolution_equals_the_library_model_there(name, size):
    reference = np.load(os.path.join(FIXTURES, "resized", name + ".npz"))
    key = "{}x{}".format(*size)
    model, report = loader.load_report(hub_source(name), size)
    assert report.posemb_resized == ((4, 4), (size[0] // 8, size[1] // 8))
    want = reference[f"logits_{key}"]
    got = run_model(model, reference[f"pixels_{key}"])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-4)


@pytest.mark.parametrize("name", ["hf_vit_classifier", "timm_vit"])
def test_fine_tuning_start_at_another_size_is_the_library_model(name):
    # initialise() (fine-tuning from hub weights) resizes the table as
    # load_model does: the library's own model at that size.
    reference = np.load(os.path.join(FIXTURES, "resized", name + ".npz"))
    size = (24, 40) if name == "timm_vit" else (48, 48)
    key = "{}x{}".format(*size)
    loaded = loader.load_model(hub_source(name), size)
    target = VisionTransformer(loaded.architecture)
    report = loader.initialise(target, hub_source(name))
    assert report.posemb_resized == ((4, 4), (size[0] // 8, size[1] // 8))
    got = run_model(target, reference[f"pixels_{key}"])
    np.testing.assert_allclose(got, reference[f"logits_{key}"], atol=1e-4)


def test_timm_input_size_without_fixed_input_size_is_not_the_model_size(
        tmp_path):
    # timm takes pretrained_cfg's input_size as img_size only when the
    # config says fixed_input_size; otherwise it builds VisionTransformer's
    # 224 and its checkpoint filter resamples the 4 x 4 table to 28 x 28
    # (timm 1.0.31 builds (224, 224) with a 785-row pos_embed here).
    folder = _copy(tmp_path, "timm_vit")
    config = json.loads((folder / "config.json").read_text())
    del config["model_args"]["img_size"]
    config["pretrained_cfg"]["fixed_input_size"] = False
    (folder / "config.json").write_text(json.dumps(config))
    model, report = loader.load_report(loader.HubSource(str(folder)))
    assert model.input_shape == (None, 224, 224, 3)
    assert report.posemb_resized == ((4, 4), (28, 28))
    stored = hub.read_hub(str(folder)).arrays[
        "Transformer/posembed_input/pos_embedding"]
    table = model.get_layer("posembed_input").get_weights()[0]
    np.testing.assert_allclose(
        table, posemb.resize_like_library(stored, 28, 4, 1, "timm"),
        atol=1e-6)


def _convert(*args):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root, CUDA_VISIBLE_DEVICES="",
               TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(
        [sys.executable, "-m", "keras_vit.commands.convert", *args],
        capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_console_script_converts_at_the_library_size_or_names_the_reason(
        tmp_path):
    out = tmp_path / "timm_24x40.keras"
    result = _convert(f"--model={FIXTURES}/timm_vit", "--image_size=24x40",
                      f"--output={out}")
    assert result.returncode == 0, result.stderr
    reference = np.load(os.path.join(FIXTURES, "resized", "timm_vit.npz"))
    model = keras.models.load_model(out)
    got = run_model(model, reference["pixels_24x40"])
    np.testing.assert_allclose(got, reference["logits_24x40"], atol=1e-4)
    result = _convert(f"--model={FIXTURES}/hf_vit_patch_8x4",
                      f"--output={tmp_path}/p.keras")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("keras-vit-convert: error: ")
    assert "non-square patches (8 x 4 pixels)" in last
    assert not os.path.exists(tmp_path / "p.keras")


def test_fine_tuning_start_reads_the_stored_grid(tmp_path):
    # A timm config whose built size (224) is not its table's grid (4 x 4):
    # initialise() resizes from the grid the table holds.
    folder = _copy(tmp_path, "timm_vit")
    config = json.loads((folder / "config.json").read_text())
    del config["model_args"]["img_size"]
    config["pretrained_cfg"]["fixed_input_size"] = False
    (folder / "config.json").write_text(json.dumps(config))
    target = keras_vit_model(48)
    report = loader.initialise(target, loader.HubSource(str(folder)))
    assert report.posemb_resized == ((4, 4), (6, 6))


def keras_vit_model(size):
    return create_model(None, num_classes=3, image_size=size, patch_size=8,
                        hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)


# transformers.image_utils' constants, as its image processors default to.
_HALF = ((0.5,) * 3, (0.5,) * 3)
_IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
_CLIP = ((0.48145466, 0.4578275, 0.40821073),
         (0.26862954, 0.26130258, 0.27577711))


def _with_processor(tmp_path, tag, **fields):
    folder = _copy(tmp_path, "hf_vit_classifier", tag)
    (folder / "preprocessor_config.json").write_text(json.dumps(fields))
    return str(folder)


@pytest.mark.parametrize("fields, normalisation", [
    (dict(image_processor_type="ViTImageProcessor"), _HALF),
    (dict(image_processor_type="CLIPImageProcessor"), _CLIP),
    (dict(image_processor_type="CLIPImageProcessorFast"), _CLIP),
    (dict(image_processor_type="BitImageProcessor"), _CLIP),
    # DeiT's and ConvNeXT's processors default to IMAGENET_STANDARD (0.5)
    # in transformers 4 and 5 alike; DeiT's checkpoints give ImageNet's
    # mean / std in their files.
    (dict(image_processor_type="DeiTImageProcessor"), _HALF),
    (dict(image_processor_type="ConvNextImageProcessor"), _HALF),
    (dict(image_processor_type="DeiTImageProcessor",
          image_mean=list(_IMAGENET[0]), image_std=list(_IMAGENET[1])),
     _IMAGENET),
    (dict(image_processor_type="BeitImageProcessor"), _HALF),
    # The older feature extractors: AutoImageProcessor reads
    # feature_extractor_type's ...FeatureExtractor as ...ImageProcessor,
    # below an image_processor_type.
    (dict(feature_extractor_type="DeiTFeatureExtractor"), _HALF),
    (dict(feature_extractor_type="CLIPFeatureExtractor",
          image_processor_type="ViTImageProcessor"), _HALF),
    # A field the file gives wins over its class's default.
    (dict(image_processor_type="CLIPImageProcessor", image_mean=[0.5] * 3),
     ((0.5,) * 3, _CLIP[1])),
])
def test_processor_class_defaults_are_the_ones_transformers_uses(
        tmp_path, fields, normalisation):
    folder = _with_processor(tmp_path, "", **fields)
    checkpoint = hub.read_hub(folder)
    np.testing.assert_allclose(checkpoint.mean, normalisation[0])
    np.testing.assert_allclose(checkpoint.std, normalisation[1])
    # The model on pixels whose (p / 255 - mean) / std equals the
    # reference pixels' (p / 255 - 0.5) / 0.5 gives transformers' logits.
    reference = np.load(os.path.join(folder, "reference.npz"))
    unit = reference["pixels"].astype(np.float64) / 255
    mean, std = (np.asarray(v) for v in normalisation)
    moved = mean + std * (unit - 0.5) / 0.5
    model = loader.load_model(loader.HubSource(folder))
    got = keras.ops.convert_to_numpy(model(
        (2 * moved - 1).astype(np.float32), training=False))
    assert_close(got, reference["logits"])


def test_unknown_processor_class_without_mean_and_std_is_refused(tmp_path):
    folder = _with_processor(tmp_path, "", image_processor_type="Foo"
                             "ImageProcessor", image_std=[0.5] * 3)
    with pytest.raises(UsageError, match=r"preprocessor_config.json names "
                       r"image processor 'FooImageProcessor', whose default"
                       r" image_mean is not known here"):
        loader.load_model(loader.HubSource(folder))
    # Given both, its defaults do not matter.
    folder = _with_processor(tmp_path, "_given", image_processor_type="Foo"
                             "ImageProcessor", image_mean=[0.5] * 3,
                             image_std=[0.5] * 3)
    reference = np.load(os.path.join(folder, "reference.npz"))
    model = loader.load_model(loader.HubSource(folder))
    assert_close(run_model(model, reference["pixels"]), reference["logits"])


def _timm_config(tmp_path, tag, architecture, fixed, **args):
    folder = _copy(tmp_path, "timm_vit", tag)
    config = json.loads((folder / "config.json").read_text())
    config["architecture"] = architecture
    del config["model_args"]["img_size"]
    config["model_args"].update(args)
    config["pretrained_cfg"]["fixed_input_size"] = fixed
    (folder / "config.json").write_text(json.dumps(config))
    return loader.HubSource(str(folder))


def test_timm_image_size_follows_its_factory(tmp_path):
    # timm 1.0.31's vit_tiny_patch16_384 entrypoint passes no img_size: a
    # config without model_args.img_size is built at pretrained_cfg's
    # input_size (32 x 32) with fixed_input_size, else at 224.
    source = _timm_config(tmp_path, "fixed", "vit_tiny_patch16_384", True)
    reference = np.load(os.path.join(FIXTURES, "timm_vit", "reference.npz"))
    model = loader.load_model(source)
    assert model.input_shape == (None, 32, 32, 3)
    assert_close(run_model(model, reference["pixels"]), reference["logits"])
    source = _timm_config(tmp_path, "free", "vit_tiny_patch16_384", False)
    assert loader.describe_source(source).image_size == (224, 224)
    # dynamic_img_size in model_args turns fixed_input_size off (timm's
    # hub config parsing): 224 again, the stored 4 x 4 table resampled.
    source = _timm_config(tmp_path, "dynamic", "vit_tiny_patch16_224", True,
                          dynamic_img_size=True)
    model, report = loader.load_report(source)
    assert model.input_shape == (None, 224, 224, 3)
    assert report.posemb_resized == ((4, 4), (28, 28))


def test_timm_registered_img_size_comes_before_input_size():
    # The entrypoints of timm 1.0.31 that pass img_size themselves.
    sized = {name: args["img_size"] for name, (_, args)
             in timm_registry.ARCHITECTURES.items() if "img_size" in args}
    assert sized == {
        "beit3_giant_patch14_336": 336, "vit_base_patch16_radio_v3": 512,
        "vit_large_patch16_radio_v3": 512, "vit_huge_patch16_radio_v3": 512,
        "vit_giant_patch16_radio_v3": 512, "vit_huge_patch16_radio_v4": 512,
        "vit_so400m_patch16_radio_v4": 512}
    known = timm_registry.ARCHITECTURES["beit3_giant_patch14_336"]
    fixed = {"input_size": [3, 224, 224], "fixed_input_size": True}
    assert timm_defaults.image_size({}, fixed, known) == 336
    assert timm_defaults.image_size({"img_size": 448}, fixed, known) == 448
    plain = timm_registry.ARCHITECTURES["vit_base_patch16_384"]
    assert timm_defaults.image_size({}, fixed, plain) == [224, 224]
    assert timm_defaults.image_size({}, {}, plain) == 224

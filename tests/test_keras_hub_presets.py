"""keras-hub ViT presets as a model source: folders that keras-hub 0.32's
`save_to_preset` wrote (tests/fixtures/keras_hub,
scripts/make_keras_hub_fixtures.py) compute what keras-hub computed on
them; every file and field keras-hub reads is read with its precedence,
and what the ViT does not compute is refused by name. Edits here are the
ones a user makes by hand."""

import json
import os
import re
import shutil
import subprocess

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.checkpoint import loader
from keras_vit.checkpoint.formats.npz import POSEMB
from keras_vit.checkpoint.hub import keras_preset
from keras_vit.checkpoint.hub import keras_preset_arrays as preset_arrays
from keras_vit.checkpoint.posemb import resize_position_embedding
from keras_vit.checkpoint.resolve import resolve
from keras_vit.commands import resize as cli
from keras_vit.data import preprocessing
from keras_vit.errors import UsageError
from tests.console import script
from tests.photo_folder import write_photo_folder
from tests.reliability_cases import check_error, covers

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "keras_hub")
OUTPUTS = {"vit_classifier": "logits", "vit_gap_pre_logits": "logits",
           "vit_backbone": "features"}


def _copy(tmp_path, name="vit_classifier"):
    folder = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), folder)
    return folder


def _edit(folder, file, edit):
    path = folder / file
    fields = json.loads(path.read_text())
    edit(fields)
    path.write_text(json.dumps(fields))


def _task_backbone(fields):
    return fields["config"]["backbone"]["config"]


def _outputs(model, folder):
    reference = np.load(os.path.join(folder, "reference.npz"))
    x = reference["pixels"].astype(np.float32) / 127.5 - 1.0
    return (keras.ops.convert_to_numpy(model(x, training=False)),
            reference[OUTPUTS[os.path.basename(str(folder))]])


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_a_preset_computes_what_keras_hub_computed(name):
    folder = os.path.join(FIXTURES, name)
    source = resolve(folder)
    assert source.kind == "hub"
    model, report = loader.load_report(source)
    assert report.ok and not report.dropped
    got, want = _outputs(model, folder)
    np.testing.assert_allclose(got, want, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("name, head", [
    ("vit_backbone", 0), ("vit_classifier", 16 * 5 + 5),
    # Attention without biases gets zero ones: 2 blocks x 4 x 16 more.
    ("vit_gap_pre_logits", (16 * 12 + 12) + (12 * 3 + 3) + 2 * 4 * 16),
])
def test_parameters_are_keras_hub_s_count(name, head):
    with open(os.path.join(FIXTURES, name, "metadata.json")) as f:
        backbone = json.load(f)["parameter_count"]
    model = loader.load_model(os.path.join(FIXTURES, name))
    assert model.count_params() == backbone + head


def test_a_b16_preset_config_builds_keras_hub_s_b16():
    # keras-hub's vit_base_patch16_224_imagenet21k: 85,798,656 parameters
    # (its preset table), the paper's ViT-B/16 without a head.
    sizes = keras_preset.backbone_sizes(dict(
        image_shape=[224, 224, 3], patch_size=[16, 16], num_layers=12,
        num_heads=12, hidden_dim=768, mlp_dim=3072), "config.json")
    model = keras_vit.create_model(
        None, num_classes=0, image_size=sizes["image_size"],
        patch_size=sizes["patch"], hidden_size=sizes["hidden_dim"],
        num_layers=sizes["num_layers"], num_heads=sizes["num_heads"],
        mlp_dim=sizes["mlp_dim"])
    assert model.count_params() == 85_798_656


def test_task_json_decides_over_config_json_and_the_converter_files(
        tmp_path):
    folder = _copy(tmp_path)
    # keras-hub deserialises task.json whole: config.json and the other
    # converter files are not read for the classifier.
    _edit(folder, "config.json",
          lambda f: f["config"].update(layer_norm_epsilon=0.5))

    def scale(fields):
        inner = fields if "image_converter" not in fields.get(
            "config", {}) else fields["config"]["image_converter"]
        inner["config"]["scale"] = 1.0
    _edit(folder, "image_converter.json", scale)
    _edit(folder, "preprocessor.json", scale)
    model = loader.load_model(str(folder))
    got, want = _outputs(model, folder)
    np.testing.assert_allclose(got, want, atol=2e-5 * np.abs(want).max())


def test_without_task_json_the_backbone_and_preprocessor_json_are_read(
        tmp_path, caplog):
    folder = _copy(tmp_path)
    os.remove(folder / "task.json")
    checkpoint = keras_preset.read_preset(str(folder))
    assert "head/kernel" not in checkpoint.arrays
    np.testing.assert_allclose(checkpoint.std, [0.5] * 3)
    # preprocessor.json's converter before image_converter.json's.
    _edit(folder, "preprocessor.json", lambda f: f["config"][
        "image_converter"]["config"].update(scale=2 / 255, offset=0.0))
    checkpoint = keras_preset.read_preset(str(folder))
    np.testing.assert_allclose(checkpoint.std, [0.5] * 3)
    np.testing.assert_allclose(checkpoint.mean, [0.0] * 3)
    os.remove(folder / "preprocessor.json")
    checkpoint = keras_preset.read_preset(str(folder))
    np.testing.assert_allclose(checkpoint.mean, [0.5] * 3)
    # A task.json without its weights is the backbone alone.
    os.remove(folder / "task.weights.h5")
    shutil.copy(os.path.join(FIXTURES, "vit_classifier", "task.json"),
                folder)
    caplog.set_level("WARNING", logger="absl")
    assert loader.describe_source(str(folder)).num_classes == 0
    assert loader.load_model(str(folder)).parts.head is None
    said = f"{folder} holds a classifier's task.json but no task.weights.h5:"
    assert caplog.text.count(said + " its backbone alone is read") == 1


def _set(file, edit):
    return lambda folder: _edit(folder, file, edit)


@pytest.mark.parametrize("change, said", [
    (_set("task.json", lambda f: _task_backbone(f).update(
        use_class_token=False)), "pooling 'token' without a class token"),
    (_set("task.json", lambda f: f["config"].update(activation="softmax")),
     "the head's activation 'softmax'"),
    (_set("task.json", lambda f: _task_backbone(f).update(rope=True)),
     "'rope' is no ViTBackbone argument"),
    (_set("task.json", lambda f: _task_backbone(f).update(
        patch_size=[8, 4])), "only square patches are read"),
    (_set("task.json", lambda f: _task_backbone(f).update(hidden_dim=32)),
     "where the config gives (8, 8, 3, 32)"),
    (_set("task.json", lambda f: _task_backbone(f).update(num_layers=3)),
     "has no array layers/vi_t_encoder/encoder_layers/vi_t_encoder_block_2"),
    (_set("task.json", lambda f: _task_backbone(f).update(num_layers=1)),
     "array(s) this ViT has no place for"),
    (_set("task.json", lambda f: f["config"]["backbone"].update(
        class_name="DeiTBackbone")), "is a keras-hub 'DeiTBackbone', not a "
     "ViTBackbone"),
    (_set("task.json", lambda f: f["config"]["preprocessor"]["config"][
        "image_converter"]["config"].update(scale=[1.0, 0.0, 1.0])),
     "has a zero"),
    (_set("task.json", lambda f: f["config"]["preprocessor"]["config"][
        "image_converter"]["config"].update(image_size=[48, 48])),
     "the image converter resizes to [48, 48], the backbone takes [32, 32]"),
])
def test_what_the_vit_does_not_compute_is_refused_by_name(
        tmp_path, change, said):
    folder = _copy(tmp_path)
    change(folder)
    with pytest.raises(UsageError) as error:
        loader.load_model(str(folder))
    assert said in str(error.value)
    assert str(folder) in str(error.value)


def _refused_as(tmp_path, edit, case_id):
    """A copy of the classifier, its task.json changed by `edit`, refused
    as reliability case `case_id` says."""
    folder = _copy(tmp_path)
    _edit(folder, "task.json", edit)
    with pytest.raises(UsageError) as error:
        loader.load_model(str(folder))
    check_error(case_id, error.value)


@covers("keras_hub_gap_over_class_token")
def test_gap_over_a_class_token_is_refused(tmp_path):
    _refused_as(tmp_path, lambda f: f["config"].update(pooling="gap"),
                "keras_hub_gap_over_class_token")


@covers("keras_hub_quantized")
def test_a_quantized_preset_is_refused(tmp_path):
    _refused_as(tmp_path, lambda f: _task_backbone(f).update(
        dtype={"class_name": "DTypePolicyMap", "config": {}}),
        "keras_hub_quantized")


@covers("keras_hub_h5_link")
def test_links_in_a_weights_file_are_refused(tmp_path):
    folder = _copy(tmp_path)
    weights = folder / "model.weights.h5"
    for link in (h5py.ExternalLink("/etc/passwd", "/x"),
                 h5py.SoftLink("/layers/vi_t_encoder/layer_norm/vars/0")):
        with h5py.File(weights, "a") as f:
            if "layers/extra" in f:
                del f["layers/extra"]
            f["layers/extra"] = link
        with pytest.raises(UsageError) as error:
            loader.load_model(str(folder))
        check_error("keras_hub_h5_link", error.value)


def test_hostile_or_partial_weights_files_are_refused(tmp_path):
    folder = _copy(tmp_path)
    weights = folder / "model.weights.h5"
    with h5py.File(weights, "a") as f:
        f["layers/extra/vars/0"] = np.zeros(3, np.float32)
    with pytest.raises(UsageError, match="no place for, first "
                       "layers/extra/vars/0"):
        loader.load_model(str(folder))
    weights.write_bytes(b"not hdf5")
    with pytest.raises(UsageError, match="not a readable HDF5"):
        loader.load_model(str(folder))
    # Beside a single weights file, a sharded index is not read (keras-hub
    # too reads model.weights.h5 first).
    (folder / "model.weights.json").write_text("{}")
    shutil.copy(os.path.join(FIXTURES, "vit_classifier", "model.weights.h5"),
                weights)
    assert loader.describe_source(str(folder)).num_classes > 0
    os.remove(weights)
    os.remove(folder / "model.weights.json")
    with pytest.raises(UsageError, match="without model.weights.h5"):
        resolve(str(folder)).build()
    (folder / "model.weights.json").write_text("{}")
    with pytest.raises(UsageError, match="sharded weights"):
        resolve(str(folder)).build()


def test_a_backbone_without_its_converter_is_refused(tmp_path):
    folder = _copy(tmp_path, "vit_backbone")
    os.remove(folder / "image_converter.json")
    with pytest.raises(UsageError, match="pixel scale its weights expect"):
        loader.load_model(str(folder))


def test_at_another_size_the_table_is_resized_as_an_official_one():
    folder = os.path.join(FIXTURES, "vit_classifier")
    model, report = loader.load_report(folder, image_size=48)
    assert report.posemb_resized == ((4, 4), (6, 6))
    stored = keras_preset.read_preset(folder).arrays[POSEMB]
    want = resize_position_embedding(stored, (6, 6), (4, 4), 1)
    got = [w for w in model.weights if "pos" in w.path][0]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(got), want,
                               atol=1e-6)


def test_a_resize_keras_vit_does_not_do_is_said_once(tmp_path, caplog):
    folder = _copy(tmp_path)
    _edit(folder, "task.json", lambda f: f["config"]["preprocessor"][
        "config"]["image_converter"]["config"].update(
            interpolation="bicubic", antialias=True))
    caplog.set_level("WARNING", logger="absl")
    source = resolve(str(folder))
    assert source.library_resize() == (None, (32, 32), True, None)
    said = [r.getMessage() for r in caplog.records
            if "bicubic filter, antialiasing" in r.getMessage()]
    assert len(said) == 1 and "--resize_size" in said[0]


@pytest.mark.parametrize("shape", [(40, 57), (57, 40), (33, 33), (7, 90)])
def test_a_preset_s_photo_is_resized_as_keras_hub_resizes_it(shape):
    # keras-hub's converter: the central crop of the model's aspect
    # (keras.layers.Resizing's box), bilinear, no antialiasing.
    source = resolve(os.path.join(FIXTURES, "vit_classifier"))
    image = np.random.default_rng(0).integers(
        0, 256, shape + (3,)).astype(np.uint8)
    resize = cli.source_resize(source)
    keep = cli.source_keep_aspect(source)
    got = preprocessing.preprocess_eval(tf.constant(image), (32, 32),
                                        resize, keep).numpy()
    want = keras.layers.Resizing(
        32, 32, interpolation="bilinear", crop_to_aspect_ratio=True,
        antialias=False)(image.astype(np.float32))
    want = keras.ops.convert_to_numpy(want) / 127.5 - 1.0
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_predict_answers_from_a_preset_folder_of_photos(tmp_path):
    folder = _copy(tmp_path)
    photos = tmp_path / "photos"
    write_photo_folder(photos, per_class=1)
    out = tmp_path / "answers.json"
    result = subprocess.run(
        script("predict") + [f"--model={folder}", str(photos),
                             f"--output={out}"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    answers = json.loads(out.read_text())["predictions"]
    assert len(answers) == 2
    for answer in answers:
        probabilities = [t["probability"] for t in answer["top_k"]]
        assert len(probabilities) == 5
        assert sum(probabilities) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("text, says", [
    ("{bad", "is not valid JSON (Expecting property name"),
    ("[]", "is not a JSON object")])
def test_a_preset_with_a_damaged_config_json_is_named(tmp_path, text, says):
    """keras-vit-predict on a keras-hub preset whose config.json is
    damaged: the file and its fault named, with the fix. Before, the
    folder was said to hold no model weights beside its two weights
    files."""
    folder = _copy(tmp_path)
    (folder / "config.json").write_text(text)
    result = subprocess.run(
        script("predict") + [f"--model={folder}", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"{folder / 'config.json'} {says}" in result.stderr, result.stderr
    assert "copy the model folder again (or fix the file)" in result.stderr
    assert "Traceback" not in result.stderr


def _converter_of(fields):
    return fields["config"]["preprocessor"]["config"]["image_converter"]


def test_a_converter_as_the_task_s_preprocessor_is_read(tmp_path):
    # keras-hub takes any layer as a task's preprocessor: a converter
    # saved in its place is applied as it is.
    folder = _copy(tmp_path)
    _edit(folder, "task.json", lambda f: f["config"].update(
        preprocessor=_converter_of(f)))
    model = loader.load_model(str(folder))
    got, want = _outputs(model, folder)
    np.testing.assert_allclose(got, want, atol=2e-5 * np.abs(want).max())
    _edit(folder, "task.json", lambda f: f["config"]["preprocessor"].update(
        class_name="CLIPPreprocessor"))
    with pytest.raises(UsageError, match="preprocessor is "
                       "'CLIPPreprocessor'"):
        loader.load_model(str(folder))


def test_the_legacy_mean_and_variance_are_read_as_keras_hub_reads_them(
        tmp_path):
    # ImageConverter(scale=1/255, mean=m, variance=s**2) is the scale
    # 1 / (255 s) and offset -m / s the fixture was saved with.
    folder = _copy(tmp_path, "vit_gap_pre_logits")
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]

    def legacy(fields):
        config = _converter_of(fields)["config"]
        del config["offset"]
        config.update(scale=1 / 255, mean=mean,
                      variance=[s * s for s in std])
    _edit(folder, "task.json", legacy)
    model = loader.load_model(str(folder))
    got, want = _outputs(model, folder)
    np.testing.assert_allclose(got, want, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("fields, said", [
    ({"mean": [0.5] * 3}, "gives mean without variance"),
    ({"height": 32}, "gives height without width"),
    ({"mean": [0.5] * 3, "variance": [0.25] * 3, "scale": [1.0] * 3},
     "need a single number as its scale"),
    ({"pad_to_aspect_ratio": True}, "both crops and pads"),
    ({"mean": [0.5] * 3, "variance": [0.0] * 3, "scale": 1.0},
     "variance [0.0, 0.0, 0.0] is not positive"),
])
def test_a_converter_keras_hub_refuses_is_refused(tmp_path, fields, said):
    folder = _copy(tmp_path)
    _edit(folder, "task.json",
          lambda f: _converter_of(f)["config"].update(fields))
    with pytest.raises(UsageError, match=re.escape(said)):
        loader.load_model(str(folder))


def test_a_damaged_weights_file_is_one_usage_error(tmp_path):
    # Bytes changed at random: each damaged file is read or refused as
    # a UsageError naming it, never an h5py or C library error.
    original = open(os.path.join(FIXTURES, "vit_classifier",
                                 "task.weights.h5"), "rb").read()
    path = tmp_path / "task.weights.h5"
    rng = np.random.default_rng(0)
    plan = preset_arrays.head_plan((5, None), 16)
    refused = 0
    for _ in range(150):
        damaged = bytearray(original)
        for at in rng.integers(0, len(damaged), 4):
            damaged[at] = int(rng.integers(0, 256))
        path.write_bytes(bytes(damaged))
        try:
            preset_arrays.read_planned(str(path), plan)
        except UsageError as error:
            assert str(path) in str(error)
            refused += 1
    assert refused > 0


def test_a_preset_in_a_bucket_is_refused_by_name():
    # TensorFlow's in-memory file system stands in for gs://.
    folder = "ram://keras_hub_bucket/vit_preset"
    tf.io.gfile.makedirs(folder)
    for name in ("config.json", "model.weights.h5"):
        tf.io.gfile.copy(os.path.join(FIXTURES, "vit_classifier", name),
                         f"{folder}/{name}", overwrite=True)
    with pytest.raises(UsageError, match="is a keras-hub preset, which is "
                       "read from a local folder"):
        resolve(folder)


def test_convert_says_only_what_a_keras_file_does_not_keep(tmp_path):
    # keras-hub resizes no position table (keras_vit's own resize is
    # kept); the crop to the aspect ratio is named, with its flag.
    out = tmp_path / "preset.keras"
    preset = os.path.join(FIXTURES, "vit_classifier")
    result = subprocess.run(
        script("convert") + [f"--model={preset}", f"--output={out}"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert out.exists()
    assert "--resize_size" not in result.stderr
    assert ("its crop to the input's aspect ratio before the resize (pass "
            "--keep_aspect)") in result.stderr
    assert "position table" not in result.stderr

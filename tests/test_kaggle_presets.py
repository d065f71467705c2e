"""keras-hub's presets on Kaggle: `kaggle://` handles and keras-hub's
preset names, downloaded by kagglehub's own downloader from a loopback
stand-in for Kaggle's API (tests/fake_kaggle.py), or read from
kagglehub's cache as kagglehub and keras-hub leave it."""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoint import loader
from keras_vit.checkpoint.zoo import kaggle
from keras_vit.errors import UsageError
from tests import fake_kaggle
from tests.console import script
from tests.photo_folder import write_photo_folder

pytest.importorskip("kagglehub")  # the test extra installs it

PRESET = os.path.join(os.path.dirname(__file__), "fixtures", "keras_hub",
                      "vit_classifier")
HANDLE = "kaggle://keras/vit/keras/tiny_vit/1"


@pytest.fixture
def kaggle_env(tmp_path, monkeypatch):
    """An empty kagglehub cache, kagglehub pointed at the loopback API,
    no Kaggle credentials, online."""
    monkeypatch.setenv(kaggle.CACHE_ENV, str(tmp_path / "kagglehub"))
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path / "no_config"))
    for name, value in fake_kaggle.ENV.items():
        monkeypatch.setenv(name, value)
    for name in ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN",
                 "KERAS_VIT_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "kagglehub"


def _assert_reference(model):
    reference = np.load(os.path.join(PRESET, "reference.npz"))
    x = reference["pixels"].astype(np.float32) / 127.5 - 1.0
    got = keras.ops.convert_to_numpy(model(x, training=False))
    np.testing.assert_allclose(got, reference["logits"], atol=2e-5 * np.abs(
        reference["logits"]).max())


def test_a_handle_is_downloaded_by_kagglehub_then_read_from_its_cache(
        kaggle_env):
    with fake_kaggle.serve(PRESET) as requests:
        model = keras_vit.load_model(HANDLE)
    _assert_reference(model)
    downloads = [body["path"] for path, body in requests
                 if path.endswith("DownloadModelInstanceVersion")]
    assert sorted(downloads) == sorted(
        n for n in os.listdir(PRESET) if n != "reference.npz")
    folder = kaggle_env / "models" / "keras" / "vit" / "keras" / "tiny_vit"
    assert (folder / "1" / "model.weights.h5").exists()
    # Cached whole: read with no server there.
    with fake_kaggle.no_server():
        _assert_reference(keras_vit.load_model(HANDLE))


def test_an_unversioned_handle_asks_for_the_current_version(kaggle_env):
    with fake_kaggle.serve(PRESET) as requests:
        keras_vit.load_model(HANDLE[:-2])
    assert requests[0][0].endswith("GetModelInstance")


def _keras_hub_cache(cache, handle):
    """The folder as keras-hub leaves it in kagglehub's cache: each file
    downloaded alone, each marked complete."""
    base = os.path.join(str(cache), "models", *handle.split("/")[:4])
    version = handle.split("/")[4]
    shutil.copytree(PRESET, os.path.join(base, version))
    for name in os.listdir(PRESET):
        marker = os.path.join(base, ".complete", version, f"{name}.complete")
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        open(marker, "w").close()


def test_a_preset_name_reads_keras_hub_s_cache_offline(
        kaggle_env, monkeypatch):
    name = "vit_base_patch16_224_imagenet"
    _keras_hub_cache(kaggle_env, kaggle.PRESETS[name])
    monkeypatch.setenv("KERAS_VIT_OFFLINE", "1")
    monkeypatch.setitem(sys.modules, "kagglehub", None)  # never imported
    _assert_reference(keras_vit.load_model(name))
    assert loader.describe_source(
        f"kaggle://{kaggle.PRESETS[name]}").num_classes == 5


def test_offline_without_the_preset_says_how_to_get_it(
        kaggle_env, monkeypatch):
    monkeypatch.setenv("KERAS_VIT_OFFLINE", "1")
    for text in (HANDLE, HANDLE[:-2], "vit_large_patch16_384_imagenet"):
        with pytest.raises(UsageError) as error:
            keras_vit.load_model(text)
        for part in ("is not in kagglehub's cache", str(kaggle_env),
                     "KERAS_VIT_OFFLINE is set"):
            assert part in str(error.value), (text, part)


def test_without_kagglehub_the_extra_is_named(kaggle_env, monkeypatch):
    monkeypatch.setitem(sys.modules, "kagglehub", None)
    with pytest.raises(UsageError, match=r'pip install -e "\.\[kaggle\]"'):
        keras_vit.load_model(HANDLE)


@pytest.mark.parametrize("text, said", [
    ("kaggle://keras/vit/keras/tiny_vit/latest", "is not a model version"),
    ("kaggle://keras/vit/keras/tiny_vit/0", "is not a model version"),
    ("kaggle://keras/vit/keras/tiny_vit/\u00b2", "is not a model version"),
    ("kaggle://keras/vit/tiny_vit", "is not a Kaggle model handle"),
    ("kaggle://keras/../keras/tiny_vit/1", "is not a Kaggle model handle"),
])
def test_a_malformed_handle_is_one_line(kaggle_env, text, said):
    with pytest.raises(UsageError, match=said):
        keras_vit.load_model(text)


def test_a_failed_download_or_another_model_is_one_line(
        kaggle_env, tmp_path):
    # No server: the connection is refused.
    with fake_kaggle.no_server(), pytest.raises(
            UsageError, match="kagglehub could not download "
            "keras/vit/keras/tiny_vit/1"):
        keras_vit.load_model(HANDLE)
    other = tmp_path / "other"
    os.makedirs(other)
    (other / "config.json").write_text(json.dumps({"model_type": "vit"}))
    (other / "model.weights.h5").write_bytes(b"")
    with fake_kaggle.serve(other):
        with pytest.raises(UsageError, match="is not a keras-hub preset"):
            keras_vit.load_model(HANDLE)


# keras-hub 0.32's ViT presets (vit_presets.py): the version of each
# name's Kaggle handle and its backbone's parameter count.
KERAS_HUB_TABLE = {
    "vit_base_patch16_224_imagenet": (4, 85_798_656),
    "vit_base_patch16_384_imagenet": (4, 86_090_496),
    "vit_large_patch16_224_imagenet": (4, 303_301_632),
    "vit_large_patch16_384_imagenet": (4, 303_690_752),
    "vit_base_patch32_384_imagenet": (3, 87_528_192),
    "vit_large_patch32_384_imagenet": (3, 305_607_680),
    "vit_base_patch16_224_imagenet21k": (3, 85_798_656),
    "vit_base_patch32_224_imagenet21k": (3, 87_455_232),
    "vit_huge_patch14_224_imagenet21k": (3, 630_764_800),
    "vit_large_patch16_224_imagenet21k": (3, 303_301_632),
    "vit_large_patch32_224_imagenet21k": (3, 305_510_400),
}


def test_the_preset_names_are_keras_hub_s_handles():
    assert kaggle.PRESETS == {
        name: f"keras/vit/keras/{name}/{version}"
        for name, (version, _) in KERAS_HUB_TABLE.items()}


@pytest.mark.parametrize("name", [
    "vit_base_patch16_224_imagenet", "vit_base_patch16_384_imagenet",
    "vit_base_patch32_384_imagenet", "vit_base_patch32_224_imagenet21k",
    "vit_large_patch16_224_imagenet"])
def test_each_preset_name_is_keras_hub_s_model(name):
    _, size, patch, res, _ = name.split("_")
    model = keras_vit.create_model(
        {"base": "B", "large": "L"}[size] + "/" + patch[len("patch"):],
        num_classes=0, image_size=int(res))
    assert model.count_params() == KERAS_HUB_TABLE[name][1]


def _offline_refused(text):
    with pytest.raises(UsageError, match="is not in kagglehub's cache"):
        keras_vit.load_model(text)


def test_a_part_of_keras_hub_s_cache_is_not_read_as_the_whole(
        kaggle_env, monkeypatch):
    name = "vit_base_patch16_224_imagenet"
    handle = kaggle.PRESETS[name]
    folder = os.path.join(str(kaggle_env), "models", *handle.split("/"))
    markers = os.path.join(os.path.dirname(folder), ".complete", "4")
    _keras_hub_cache(kaggle_env, handle)
    monkeypatch.setenv("KERAS_VIT_OFFLINE", "1")
    # A file written with no completion marker (a download cut short).
    os.remove(os.path.join(markers, "task.weights.h5.complete"))
    _offline_refused(name)
    # A classifier's task.json whose weights keras-hub never fetched.
    os.remove(os.path.join(folder, "task.weights.h5"))
    _offline_refused(name)
    # A backbone fetched alone: nothing says how its pixels are scaled.
    for file in ("task.json", "preprocessor.json", "image_converter.json"):
        os.remove(os.path.join(folder, file))
    _offline_refused(name)
    # Online, a cache that is not whole is downloaded whole.
    monkeypatch.delenv("KERAS_VIT_OFFLINE")
    with fake_kaggle.serve(PRESET) as requests:
        _assert_reference(keras_vit.load_model(name))
    assert any(p.endswith("DownloadModelInstanceVersion")
               for p, _ in requests)


def test_a_local_folder_wins_over_a_preset_name(
        kaggle_env, tmp_path, monkeypatch):
    name = "vit_base_patch16_224_imagenet"
    shutil.copytree(PRESET, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    with fake_kaggle.no_server():  # nothing downloaded
        _assert_reference(keras_vit.load_model(name))
    # The scheme in any case, as keras-hub reads it.
    with fake_kaggle.serve(PRESET):
        _assert_reference(keras_vit.load_model(
            "Kaggle://keras/vit/keras/tiny_vit/1"))


def test_predict_from_a_kaggle_handle(kaggle_env, tmp_path):
    photos = tmp_path / "photos"
    write_photo_folder(photos, per_class=1)
    out = tmp_path / "answers.json"
    env = dict(os.environ)
    with fake_kaggle.serve(PRESET):
        result = subprocess.run(
            script("predict") + [f"--model={HANDLE}", str(photos),
                                 f"--output={out}"],
            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    answers = json.loads(out.read_text())["predictions"]
    assert len(answers) == 2
    assert all(len(a["top_k"]) == 5 for a in answers)
    # kagglehub's INFO lines stay off stdout, where answers go.
    assert "Downloading to" not in result.stdout + result.stderr


def test_a_preset_name_through_the_command_and_a_misspelt_one(
        kaggle_env, tmp_path):
    name = "vit_base_patch16_224_imagenet"
    _keras_hub_cache(kaggle_env, kaggle.PRESETS[name])
    photos = tmp_path / "photos"
    write_photo_folder(photos, per_class=1)
    env = dict(os.environ, KERAS_VIT_OFFLINE="1")
    out = tmp_path / "answers.json"
    result = subprocess.run(
        script("predict") + [f"--model={name}", str(photos),
                             f"--output={out}"],
        capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(json.loads(out.read_text())["predictions"]) == 2
    result = subprocess.run(
        script("predict") + [f"--model={name}1k", str(photos)],
        capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 1
    assert f"Did you mean {name}" in result.stderr
    assert "Traceback" not in result.stderr

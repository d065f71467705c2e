"""LiteRT export: the .tflite files run with the LiteRT interpreter
(ai-edge-litert) and answer as the Keras model does."""

import os

import keras
import numpy as np
import pytest

from keras_vit import create_model
from keras_vit.commands import export as cli
from keras_vit.export import litert

SIZE = 32
NAMES = ["a", "b", "c", "d"]


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(3)
    return create_model(
        None, num_classes=len(NAMES), image_size=SIZE, patch_size=8,
        hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
        head_zero_init=False,
    )


@pytest.fixture(scope="module")
def pixels():
    return np.random.default_rng(5).uniform(
        0, 255, (4, SIZE, SIZE, 3)).astype(np.float32)


def _keras_probabilities(model, pixels):
    logits = keras.ops.convert_to_numpy(model(pixels / 127.5 - 1.0))
    logits = logits - logits.max(-1, keepdims=True)
    return np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)


@pytest.fixture(scope="module")
def float32_file(model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("litert")
    return litert.export_litert(model, str(folder / "vit.tflite"),
                                class_names=NAMES)


def test_float32_equals_keras(model, pixels, float32_file):
    path = float32_file
    interpreter = litert.interpreter_class()(model_path=path)
    details = interpreter.get_signature_list()["serving_default"]
    assert details == {"inputs": ["images"], "outputs": ["probabilities"]}
    got = litert.run_litert(path, pixels)
    want = _keras_probabilities(model, pixels)
    np.testing.assert_allclose(got, want, atol=1e-5)
    with open(litert.labels_path(path)) as f:
        assert f.read().split() == NAMES
    folder = os.path.dirname(path)
    assert not [n for n in os.listdir(folder) if ".tmp-" in n]


def test_float16_weights_half_the_size(model, pixels, float32_file,
                                       tmp_path):
    full = float32_file
    half = litert.export_litert(model, str(tmp_path / "f16.tflite"),
                                quantization="float16")
    assert os.path.getsize(half) < 0.7 * os.path.getsize(full)
    np.testing.assert_allclose(litert.run_litert(half, pixels),
                               _keras_probabilities(model, pixels),
                               atol=5e-3)


def test_int8_from_the_command_line(model, pixels, tmp_path):
    model.save(tmp_path / "vit.keras")
    status = cli.main([
        "keras-vit-export", "--export_dir", str(tmp_path / "out"),
        "--model_name", "tiny",
        "--model", str(tmp_path / "vit.keras"), "--format", "litert",
        "--quantization", "int8", "--class_names", ",".join(NAMES),
    ])
    assert status == 0
    path = tmp_path / "out" / "tiny.tflite"
    got = litert.run_litert(str(path), pixels)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-4)
    # Dynamic-range int8 keeps the answers close on this random model.
    np.testing.assert_allclose(got, _keras_probabilities(model, pixels),
                               atol=0.05)
    assert (tmp_path / "out" / "tiny.labels.txt").read_text().split() == NAMES
    # A float32 export under the same name keeps the int8 file unless
    # --overwrite, which replaces it.
    again = ["keras-vit-export", "--export_dir", str(tmp_path / "out"),
             "--model_name", "tiny", "--model", str(tmp_path / "vit.keras"),
             "--format", "litert"]
    int8 = path.read_bytes()
    assert cli.main(again) == 1
    assert path.read_bytes() == int8
    assert cli.main(again + ["--overwrite"]) == 0
    assert path.read_bytes() != int8
    # This model names no classes: the int8 file's names are not left
    # beside it as if they were its own.
    assert not (tmp_path / "out" / "tiny.labels.txt").exists()
    np.testing.assert_allclose(litert.run_litert(str(path), pixels),
                               _keras_probabilities(model, pixels),
                               atol=1e-4)


def test_bad_arguments(model, tmp_path, capsys):
    with pytest.raises(ValueError, match="use one of float32, float16, int8"):
        litert.export_litert(model, str(tmp_path / "x.tflite"),
                             quantization="int4")
    with pytest.raises(ValueError, match="ends in .tflite"):
        litert.export_litert(model, str(tmp_path / "x.lite"))
    dynamic = create_model(None, num_classes=2, image_size=16, patch_size=8,
                           hidden_size=16, num_layers=1, num_heads=2,
                           mlp_dim=16, dynamic_image_size=True)
    with pytest.raises(ValueError, match="rebuild_at_resolution"):
        litert.export_litert(dynamic, str(tmp_path / "x.tflite"))
    model.save(tmp_path / "vit.keras")
    status = cli.main(["keras-vit-export", "--export_dir", str(tmp_path),
                       "--model", str(tmp_path / "vit.keras"),
                       "--quantization", "int8"])
    assert status == 1
    assert "--quantization goes with --format=litert" in capsys.readouterr().err

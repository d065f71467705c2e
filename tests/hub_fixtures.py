"""The hub fixtures (tests/fixtures/hub, written by
scripts/make_hub_fixtures.py) as the hub tests read them: a folder as a
`HubSource`, a model run on the fixtures' uint8 pixels in the project's
input convention, the tolerance their references are compared with, and
keras-vit-predict's answer checked against the library's evaluation
resize."""

import json
import os

import keras
import numpy as np
import tensorflow as tf

from keras_vit.checkpoint import loader
from keras_vit.commands import predict
from keras_vit.data import preprocessing

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "hub")


def hub_source(name: str) -> loader.HubSource:
    """The fixture folder `name` as a HubSource."""
    return loader.HubSource(os.path.join(FIXTURES, name))


def run_model(model, pixels: np.ndarray) -> np.ndarray:
    """`model`'s output on uint8 `pixels` scaled to [-1, 1] (the project's
    input convention)."""
    x = pixels.astype(np.float32) / 127.5 - 1.0
    return keras.ops.convert_to_numpy(model(x, training=False))


def assert_close(got: np.ndarray, want: np.ndarray, tol: float = 2e-5):
    """Same shape, and equal within `tol` of `want`'s largest magnitude
    (float32 against the reference library's float32)."""
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=tol * np.abs(want).max())


def check_predicts_with_resize(folder: str, image, resize: int,
                               top_k: int) -> None:
    """keras-vit-predict of the photo `image` (a path) with the hub model
    `folder` answers what the model says on its evaluation preprocessing:
    resized to `resize` (the library's; its shorter side, the aspect ratio
    kept, where the folder's library_resize says the library keeps it),
    then the central crop; with --resize_size=40 given, resized to 40 the
    same way instead; and the resize shows (a direct resize answers
    otherwise; where the library keeps the aspect ratio, so does a resize
    of both sides, `image` not being square). `top_k`: the model's
    classes."""
    source = loader.resolve(folder)
    library = source.library_resize()
    assert library is not None and library[0] == resize, library
    keep = bool(library[2])
    model = loader.load_model(source)
    size = tuple(model.input_shape[1:3])

    def expected(resize_size, keep_aspect=keep):
        pixels = preprocessing.preprocess_eval(
            preprocessing.decode_image(tf.constant(image.read_bytes())),
            size, resize_size, keep_aspect=keep_aspect)
        return keras.ops.convert_to_numpy(
            keras.ops.softmax(model(pixels[None])))[0]

    def answered(*extra):
        out = image.parent / "answer.json"
        assert predict.main(["keras-vit-predict", str(image), "--model",
                             folder, "--top_k", str(top_k), "--output",
                             str(out), "--overwrite", *extra]) == 0
        top = json.loads(out.read_text())["predictions"][0]["top_k"]
        return np.array([t["probability"] for t in sorted(
            top, key=lambda t: t["class"])])

    np.testing.assert_allclose(answered(), expected(resize), atol=1e-5)
    np.testing.assert_allclose(answered("--resize_size=40"), expected(40),
                               atol=1e-5)
    assert not np.allclose(expected(resize), expected(None), atol=1e-3)
    if keep:
        assert not np.allclose(expected(resize), expected(resize, False),
                               atol=1e-3)

"""The hub fixtures (tests/fixtures/hub, written by
scripts/make_hub_fixtures.py) as the hub tests read them: a folder as a
`HubSource`, a model run on the fixtures' uint8 pixels in the project's
input convention, and the tolerance their references are compared with."""

import os

import keras
import numpy as np

from keras_vit.checkpoint import loader

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

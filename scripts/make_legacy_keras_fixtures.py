"""Writes tests/fixtures/legacy_keras: `.keras` files saved by the
releases before the `VisionTransformer` class, whose models were anonymous
functional `keras.Model`s (their config names no architecture), and each
model's outputs on fixed images.

Written once, by commit 19857ed; the files test that such models still
load and predict the same (tests/test_vit_class.py). Each model is
`create_model(None, **LEGACY_MODELS[name])`, its arguments in
tests/legacy_models.py (which the test reads too).

    python scripts/make_legacy_keras_fixtures.py
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Importable as a script (python scripts/make_legacy_keras_fixtures.py).
sys.path.insert(0, ROOT)

# First: keras_vit holds TensorFlow's start-up notices back while it
# loads Keras (keras_vit.quiet_start).
import keras_vit  # noqa: E402, F401

# isort: split
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_vit.model import create_model  # noqa: E402
from tests.legacy_models import LEGACY_MODELS  # noqa: E402

OUT = os.path.join(ROOT, "tests", "fixtures", "legacy_keras")


def main(argv=None):
    argparse.ArgumentParser(
        description="Writes (replaces) the .keras files and outputs of "
        f"{os.path.relpath(OUT, ROOT)}.").parse_args(argv)
    os.makedirs(OUT, exist_ok=True)
    keras.utils.set_random_seed(0)
    outputs = {}
    for name, kwargs in LEGACY_MODELS.items():
        model = create_model(None, **kwargs)
        height, width = model.input_shape[1:3]
        images = np.random.default_rng(0).uniform(
            -1, 1, (2, height, width, 3)).astype("float32")
        model.save(os.path.join(OUT, f"{name}.keras"))
        outputs[f"{name}_images"] = images
        outputs[f"{name}_outputs"] = np.asarray(model.predict(images,
                                                              verbose=0))
    np.savez(os.path.join(OUT, "outputs.npz"), **outputs)


if __name__ == "__main__":
    main()

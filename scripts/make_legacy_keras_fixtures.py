"""Writes tests/fixtures/legacy_keras: `.keras` files saved by the
releases before the `VisionTransformer` class, whose models were anonymous
functional `keras.Model`s (their config names no architecture), and each
model's outputs on fixed images.

Written by commit 19857ed; the files test that such models still load
and predict the same (tests/test_vit_class.py). Each model is
`create_model(None, **LEGACY_MODELS[name])`, its arguments in
tests/legacy_models.py (which the test reads too). Today's create_model
writes another format, so the script runs in a tree of that commit,
with this script and tests/legacy_models.py copied in:

    git archive 19857ed | tar -x -C /tmp/old
    cp scripts/make_legacy_keras_fixtures.py /tmp/old/scripts/
    cp tests/legacy_models.py /tmp/old/tests/
    (cd /tmp/old && python scripts/make_legacy_keras_fixtures.py)
    cp /tmp/old/tests/fixtures/legacy_keras/* tests/fixtures/legacy_keras/

(Elsewhere it refuses, leaving the files as they are.)
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Importable as a script (python scripts/make_legacy_keras_fixtures.py).
sys.path.insert(0, ROOT)

# First: keras_vit holds TensorFlow's start-up notices back while it
# loads Keras (keras_vit.quiet_start).
import keras_vit  # noqa: E402

# isort: split
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_vit.model import create_model  # noqa: E402
from tests.legacy_models import LEGACY_MODELS  # noqa: E402

OUT = os.path.join(ROOT, "tests", "fixtures", "legacy_keras")


def main(argv=None):
    argparse.ArgumentParser(
        description="Writes (replaces) the .keras files and outputs of "
        f"{os.path.relpath(OUT, ROOT)}, in a tree of commit 19857ed (see "
        "the module's docstring).").parse_args(argv)
    if hasattr(keras_vit, "VisionTransformer"):
        sys.exit("This keras_vit writes models of the VisionTransformer "
                 "class, not the older files these fixtures are: run the "
                 "script in a tree of commit 19857ed (see its docstring).")
    os.makedirs(OUT, exist_ok=True)
    keras.utils.set_random_seed(0)
    outputs = {}
    for name, kwargs in LEGACY_MODELS.items():
        model = create_model(None, **kwargs)
        size = kwargs["image_size"]  # a dynamic model's input has none
        height, width = (size, size) if isinstance(size, int) else size
        images = np.random.default_rng(0).uniform(
            -1, 1, (2, height, width, 3)).astype("float32")
        model.save(os.path.join(OUT, f"{name}.keras"))
        outputs[f"{name}_images"] = images
        outputs[f"{name}_outputs"] = np.asarray(model.predict(images,
                                                              verbose=0))
    np.savez(os.path.join(OUT, "outputs.npz"), **outputs)


if __name__ == "__main__":
    main()

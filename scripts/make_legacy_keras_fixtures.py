"""Writes tests/fixtures/legacy_keras: `.keras` files saved by the
releases before the `VisionTransformer` class, whose models were anonymous
functional `keras.Model`s (their config names no architecture), and each
model's outputs on fixed images.

Written once, by commit 19857ed; the files test that such models still
load and predict the same (tests/test_vit_class.py).

    python scripts/make_legacy_keras_fixtures.py
"""

import os

import keras
import numpy as np

from keras_vit.model import create_model

OUT = os.path.join(os.path.dirname(__file__), os.pardir, "tests",
                   "fixtures", "legacy_keras")

TINY = dict(variant=None, patch_size=4, hidden_size=16, num_layers=2,
            num_heads=2, mlp_dim=32)
MODELS = {
    # Class token, pre-logits, a head.
    "tiny_token": dict(TINY, num_classes=3, image_size=16,
                       representation_size=8, head_zero_init=False),
    # Global average pooling, rectangular input, a features model.
    "tiny_gap_features": dict(TINY, num_classes=0, image_size=(16, 24),
                              pooling="gap"),
    # A hybrid: the ResNet root only (R+Ti style), stride 4 x patch 2.
    "tiny_hybrid": dict(TINY, num_classes=5, image_size=16, patch_size=2,
                        resnet_layers=(), head_zero_init=False),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    keras.utils.set_random_seed(0)
    outputs = {}
    for name, kwargs in MODELS.items():
        model = create_model(**kwargs)
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

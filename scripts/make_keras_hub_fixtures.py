"""Writes tests/fixtures/keras_hub/: tiny random ViTs saved by keras-hub's
own `save_to_preset`, with the outputs keras-hub itself computes on fixed
pixels.

    pip install -e ".[keras_hub_reference]"   # keras-hub 0.32.0
    python scripts/make_keras_hub_fixtures.py

tests/test_keras_hub_presets.py reads each folder with keras_vit's reader
(no keras-hub) and compares keras_vit's outputs with the stored ones: the
reference is the library that wrote the preset.

Folders (each with reference.npz: `pixels` uint8 (N, H, W, 3) and the
reference output):
- vit_classifier: ViTImageClassifier, class-token pooling, 5 classes, a
  converter of scale 1/127.5 and offset -1 (keras-hub's ViT presets');
  `logits` of `classifier.predict(pixels)` (the preprocessor included).
- vit_gap_pre_logits: no class token, 'gap' pooling, a tanh pre-logits
  layer (intermediate_dim 12), attention without biases, per-channel
  ImageNet scale and offset; `logits`.
- vit_backbone: a ViTBackbone saved alone beside its image_converter.json;
  `features`: the backbone's class-token output on the converted pixels.
"""

from __future__ import annotations

import argparse
import os
import shutil

import numpy as np

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures",
                   "keras_hub")
keras = keras_hub = None  # imported by main(): keras-hub is optional
_MEAN = np.array([0.485, 0.456, 0.406])
_STD = np.array([0.229, 0.224, 0.225])


def _backbone(side: int, **kwargs):
    fields = dict(image_shape=(side, side, 3), patch_size=8, num_layers=2,
                  num_heads=2, hidden_dim=16, mlp_dim=32)
    fields.update(kwargs)
    return keras_hub.models.ViTBackbone(**fields)


def _converter(side: int, scale, offset):
    return keras_hub.layers.ViTImageConverter(
        image_size=(side, side), scale=scale, offset=offset)


def _randomise(model, seed: int) -> None:
    """Every weight drawn at random (biases and norms too), so that a
    weight read into the wrong place changes the outputs."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        shape = tuple(weight.shape)
        weight.assign(rng.normal(0, 0.5, shape).astype("float32"))


def _save(name: str, model, pixels, **outputs) -> None:
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    model.save_to_preset(folder)
    np.savez(os.path.join(folder, "reference.npz"), pixels=pixels,
             **outputs)
    return folder


def build_parser() -> argparse.ArgumentParser:
    """No options: the fixtures are fixed."""
    return argparse.ArgumentParser(description=__doc__.split("\n")[0])


def main() -> None:
    global keras, keras_hub
    build_parser().parse_args()
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)

    converter = _converter(32, 1 / 127.5, -1.0)
    classifier = keras_hub.models.ViTImageClassifier(
        backbone=_backbone(32), num_classes=5,
        preprocessor=keras_hub.models.ViTImageClassifierPreprocessor(
            image_converter=converter))
    _randomise(classifier, 1)
    logits = classifier.predict(pixels.astype("float32"), verbose=0)
    _save("vit_classifier", classifier, pixels, logits=logits)

    small = rng.integers(0, 256, (4, 24, 24, 3), dtype=np.uint8)
    converter = _converter(24, list(1 / (255 * _STD)), list(-_MEAN / _STD))
    gap = keras_hub.models.ViTImageClassifier(
        backbone=_backbone(24, use_class_token=False, use_mha_bias=False),
        num_classes=3, pooling="gap", intermediate_dim=12,
        preprocessor=keras_hub.models.ViTImageClassifierPreprocessor(
            image_converter=converter))
    _randomise(gap, 2)
    logits = gap.predict(small.astype("float32"), verbose=0)
    _save("vit_gap_pre_logits", gap, small, logits=logits)

    backbone = _backbone(32)
    _randomise(backbone, 3)
    converter = _converter(32, 1 / 127.5, -1.0)
    features = np.asarray(backbone(converter(pixels.astype("float32"))))
    folder = _save("vit_backbone", backbone, pixels,
                   features=features[:, 0])
    converter.save_to_preset(folder)
    print(f"wrote {os.path.normpath(OUT)} (keras-hub "
          f"{keras_hub.__version__}, Keras {keras.__version__})")


if __name__ == "__main__":
    main()

"""How far the LiteRT files of a trained model are from Keras, on the
digits test split (360 real images, no download).

    python train.py --config=configs/digits.py --workdir=/tmp/vit_digits
    python scripts/litert_agreement.py --workdir=/tmp/vit_digits \\
        --output=/tmp/litert_agreement.json

Exports the run's model as float32, float16 and int8 (dynamic-range)
`.tflite` files (`keras_vit.export.litert`), runs each with the LiteRT
interpreter on the test images preprocessed as evaluation does, and
reports per file: its size, the largest probability difference from the
Keras model, top-1 agreement with the float32 file and test accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

# First: keras_vit holds TensorFlow's start-up notices back while it
# loads Keras (keras_vit.quiet_start).
import keras_vit  # noqa: F401

# isort: split
import keras
import numpy as np
import tensorflow as tf

from keras_vit.checkpoint import loader
from keras_vit.data import preprocessing, sources
from keras_vit.export import litert
from keras_vit.storage.atomic import atomic_write


def test_pixels(size, split: str = "test"):
    """(pixels in [0, 255] at `size`, labels): the digits split resized as
    evaluation resizes it (before its [-1, 1] scaling)."""
    images, labels = sources.digits_split(split)
    pixels = np.stack([
        preprocessing.resize(
            preprocessing.to_rgb(tf.constant(image)), size
        ).numpy()
        for image in images
    ])
    return pixels, labels


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--output", help="also write the results as JSON")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    model = loader.load_model(loader.WorkdirSource(args.workdir))
    size = tuple(model.input_shape[1:3])
    pixels, labels = test_pixels(size)
    logits = keras.ops.convert_to_numpy(model(pixels / 127.5 - 1.0))
    want = tf.nn.softmax(logits.astype(np.float32)).numpy()
    command = "python scripts/litert_agreement.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    results = {"command": command, "workdir": args.workdir,
               "test_images": len(labels),
               "keras_accuracy": float(np.mean(want.argmax(-1) == labels))}
    with tempfile.TemporaryDirectory() as folder:
        top1 = {}
        for quantization in litert.QUANTIZATIONS:
            path = litert.export_litert(
                model, os.path.join(folder, f"{quantization}.tflite"),
                quantization=quantization,
            )
            got = litert.run_litert(path, pixels)
            top1[quantization] = got.argmax(-1)
            results[quantization] = {
                "bytes": os.path.getsize(path),
                "max_abs_probability_diff_vs_keras": float(
                    np.max(np.abs(got - want))),
                "top1_agreement_with_float32": float(
                    np.mean(top1[quantization] == top1["float32"])),
                "top1_agreement_with_keras": float(
                    np.mean(top1[quantization] == want.argmax(-1))),
                "accuracy": float(np.mean(top1[quantization] == labels)),
            }
    text = json.dumps(results, indent=2)
    print(text)
    if args.output:
        atomic_write(args.output, text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

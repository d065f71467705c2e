"""LiteRT (TFLite) export of a ViT classifier, for phones and edge devices.

    export_litert(model, "vit.tflite", quantization="int8")

writes a `.tflite` whose one signature takes `images`, float32 pixels in
[0, 255] of shape (1, H, W, 3) at the model's input size (RGB; resize on
the device first, as `vit.preprocessing.json` beside it records: the
input size and the evaluation resize), and returns `probabilities`
(1, K). The [0, 255] -> [-1, 1] scaling and the softmax (or, for a model
scored a class at a time, the sigmoid) are inside the file. Conversion is
Keras 3's own (`model.export(format="litert")`, which runs TensorFlow's
`TFLiteConverter` on a SavedModel of the model),
restricted to LiteRT's built-in ops so that the plain runtime runs the
file, no Flex delegate.

The class names (`<name>.labels.txt`) and the preprocessing record are written
before the `.tflite` is renamed into place, and the record names both by their
SHA-256: an export stopped between the writes (an `--overwrite` cut short)
leaves files that `litert_record.read_resize` finds do not go together, so
keras-vit-predict refuses them instead of preprocessing the new file as the
old one was.

Quantization: "float32" (none), "float16" (weights stored as float16, half the
size) or "int8" (dynamic range: int8 weights, activations quantized on the fly;
a quarter of the size). The file is checked with the LiteRT interpreter
(`ai-edge-litert`, the `litert` extra) before it is published: float32 must
equal the Keras model to `VERIFY_ATOL`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
from typing import List, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from keras_vit.derived import input_image_size
from keras_vit.errors import UsageError
from keras_vit.export import graph as export_graph
from keras_vit.export import options as export_options
from keras_vit.export.litert_record import (
    INPUT_NAME,
    OUTPUT_NAME,
    killed_export_files,
    labels_path,
    preprocessing_path,
    preprocessing_record,
    written_paths,
)
from keras_vit.scoring import scores as vit_scores
from keras_vit.storage import atomic
from keras_vit.storage.atomic import atomic_write

QUANTIZATIONS = ("float32", "float16", "int8")
# float32 LiteRT against Keras, same pixels: the largest probability
# difference allowed before the file is rejected.
VERIFY_ATOL = 1e-4

_INSTALL = 'pip install -e ".[litert]"  (or: pip install ai-edge-litert)'


def interpreter_class():
    """The LiteRT interpreter class (ai_edge_litert; TensorFlow's own
    `tf.lite.Interpreter` is deprecated in its favour)."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as error:  # optional dependency
        raise ImportError(
            f"Running a .tflite file needs the LiteRT runtime: {_INSTALL}."
        ) from error
    return Interpreter


def pixels_model(model: keras.Model, batch_size: int = 1,
                 scores: str = vit_scores.SOFTMAX) -> keras.Model:
    """keras.Model. `model` behind [0, 255] -> [-1, 1] scaling and a
    softmax (or with `scores` "sigmoid", a sigmoid): pixels in,
    probabilities out, at a fixed input size."""
    export_options.classifier_width(model, "LiteRT export")
    size = tuple(model.input_shape[1:3])
    if None in size or size != tuple(input_image_size(model)):
        raise UsageError(
            "LiteRT export needs a model of fixed input size; rebuild it "
            "with keras_vit.rebuild_at_resolution(model, size) first."
        )
    model = export_graph.float32_inference_model(model)
    height, width = input_image_size(model)
    images = keras.Input(
        (height, width, 3), batch_size=batch_size, name=INPUT_NAME
    )
    # float32 whatever the global policy (a mixed one made these two
    # layers bfloat16, which the converter refused).
    x = keras.layers.Rescaling(1.0 / 127.5, offset=-1.0, dtype="float32",
                               name="scale_to_unit_range")(images)
    logits = model(x, training=False)
    if vit_scores.check_scores(scores) == vit_scores.SIGMOID:
        probabilities = keras.layers.Activation(
            "sigmoid", dtype="float32", name=OUTPUT_NAME)(logits)
    else:
        probabilities = keras.layers.Softmax(dtype="float32",
                                             name=OUTPUT_NAME)(logits)
    # A dict output names the LiteRT signature's output.
    return keras.Model(images, {OUTPUT_NAME: probabilities},
                       name=f"{model.name}_litert")


def _converter_options(quantization: str) -> dict:
    # Built-in ops only: a Flex (TF select) op would need the large Flex
    # delegate on the device, which the plain LiteRT runtime lacks.
    target = {"supported_ops": [tf.lite.OpsSet.TFLITE_BUILTINS]}
    if quantization == "float32":
        return {"target_spec": target}
    if quantization == "float16":
        target["supported_types"] = [tf.float16]
    # Optimize.DEFAULT without a representative data set is dynamic-range
    # int8 quantization (or float16 weights with the type above).
    return {"optimizations": [tf.lite.Optimize.DEFAULT], "target_spec": target}


def run_litert(path: str, pixels: np.ndarray) -> np.ndarray:
    """np.ndarray (N, K). Probabilities of a .tflite written by
    `export_litert` on pixels (N, H, W, 3) in [0, 255], one image per
    invocation (the file's batch size is 1); pixels of another shape are
    a UsageError naming the file's."""
    runner = interpreter_class()(model_path=path).get_signature_runner()
    pixels = np.asarray(pixels, np.float32)
    size = tuple(int(n) for n in runner.get_input_details()[INPUT_NAME][
        "shape"][1:])
    if pixels.ndim != 4 or pixels.shape[1:] != size:
        raise UsageError(f"{path} takes pixels (N, {size[0]}, {size[1]}, 3),"
                         f" got {pixels.shape}: resize the images first.")
    out = [runner(**{INPUT_NAME: p[None]})[OUTPUT_NAME] for p in pixels]
    return np.concatenate(out, axis=0)


def export_litert(  # noqa: PLR0913 (its options, by keyword)
    model: keras.Model,
    path: str,
    *,
    quantization: str = "float32",
    class_names: Optional[Sequence[str]] = None,
    verify: bool = True,
    resize_size: Optional[int] = None,
    keep_aspect: bool = False,
    scores: Optional[str] = None,
    overwrite: bool = True,
    source: Optional[dict] = None,
) -> str:
    """Writes `model` as a LiteRT file.

    Args:
        model: keras.Model. A classifier from `keras_vit.create_model` (or
            loaded by `keras_vit.checkpoint.loader.load_model`) taking
            [-1, 1] images of a fixed size and returning logits.
        path: str. The `.tflite` to write (atomically, after the files
            beside it). With `class_names`, `<path minus .tflite>.labels
            .txt` holds them, one per line; without, a file of that name
            is removed (it would be read as this file's class names).
        quantization: str. One of QUANTIZATIONS.
        class_names: sequence of str or None. One per class, none blank
            (`keras_vit.export.options.class_names`).
        verify: bool. Run the file with the LiteRT interpreter on random
            pixels before publishing it: float32 must match the Keras
            model to VERIFY_ATOL; quantized files must give probabilities.
        resize_size: int or None. The evaluation resize the model was
            scored with (resize the image to it, then take the central
            crop of the input size; None: resize straight to the input
            size), recorded in `<path minus .tflite>.preprocessing.json`
            with the input size, for the client that prepares the pixels.
        keep_aspect: bool. `resize_size` is the shorter side's length,
            the aspect ratio kept; without `resize_size`, the central crop
            of the input's aspect ratio is resized (`preprocess_eval`);
            also recorded.
        scores: str or None. "softmax" or "sigmoid": how the file scores
            the logits; None: a sigmoid for one logit, else a softmax
            (`keras_vit.scoring.scores.scores_for`).
        overwrite: bool. Replace an earlier export's files; False: a
            FileExistsError where one is there (those of a killed export
            aside: `killed_export_files`), nothing written.
        source: dict or None. Where the model came from (keras-vit-export
            records its --model: location, kind, a run's step), recorded
            in the preprocessing record as export.json records it.

    Returns:
        str. `path`.
    """
    _check_options(quantization, path, source)
    num_classes = export_options.classifier_width(model, "LiteRT export")
    scores = vit_scores.scores_for(num_classes, scores)
    wrapped = pixels_model(model, scores=scores)
    height, width = wrapped.input_shape[1:3]
    export_options.check_resize_size(resize_size, (height, width),
                                     keep_aspect)
    if isinstance(resize_size, (tuple, list)):  # the record holds one N
        raise UsageError(f"resize_size {resize_size!r}: a LiteRT export "
                         "records one int (an N x N resize).")
    labels = None
    if class_names is not None:  # one a line: none blank, as a SavedModel's
        labels = "".join(f"{name}\n" for name in export_options.class_names(
            class_names, num_classes))
    if verify:
        interpreter_class()  # fail before converting, not after
    record = preprocessing_record(height, width, resize_size, quantization,
                                  keep_aspect)
    record["scores"] = scores  # how `output` is read: one class, or many
    record["source"] = source
    _write_files(wrapped, path, labels, (quantization, verify, overwrite),
                 record)
    return path


def _check_options(quantization: str, path: str, source) -> None:
    """The refusals of `export_litert`'s options, before any work."""
    if quantization not in QUANTIZATIONS:
        raise UsageError(
            f"quantization {quantization!r}: use one of "
            f"{', '.join(QUANTIZATIONS)}."
        )
    if not str(path).endswith(".tflite"):
        raise UsageError(f"{path}: a LiteRT file's name ends in .tflite.")
    if keras.backend.backend() != "tensorflow":
        raise UsageError(
            "LiteRT export runs on the TensorFlow backend; set "
            "KERAS_BACKEND=tensorflow."
        )
    export_options.check_source(source, "the .preprocessing.json")


def _check_free(path: str) -> None:
    """A FileExistsError naming the first file of an earlier export at
    the .tflite `path` (those a killed export left aside)."""
    left = killed_export_files(path)
    for taken in written_paths(path):
        if taken not in left and atomic.exists(taken):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST),
                                  taken)


def _write_files(wrapped: keras.Model, path: str, labels: Optional[str],
                 options: tuple, record: dict) -> None:
    """Converts `wrapped` into the .tflite `path` (checked with `verify`)
    and publishes it with the files beside it (`labels`, the
    preprocessing `record` with both files' digests), the .tflite last;
    `options`: (quantization, verify, overwrite), as `export_litert`'s."""
    quantization, verify, overwrite = options
    with contextlib.ExitStack() as publishing:
        def write(tmp: str) -> None:
            # The converter loads JAX, whose garbage-collection callback
            # (and TensorFlow's finalizers) would swallow a Ctrl-C or
            # SIGTERM raised from here on: held, it stops the export once
            # the file is made and checked, before anything is replaced.
            with atomic.signals_deferred():
                logging.info("Converting to LiteRT (%s) ...", quantization)
                wrapped.export(tmp, format="litert", verbose=False,
                               **_converter_options(quantization))
                if verify:
                    logging.info("Checking the LiteRT file against the "
                                 "model ...")
                    _verify(tmp, wrapped, quantization)
                record["tflite_sha256"] = atomic.sha256(tmp)
                record["labels_sha256"] = None if labels is None else (
                    hashlib.sha256(labels.encode("utf-8")).hexdigest())
            # From the files beside it to the rename: replaced together
            # (a signal waits for the rename, then names them written).
            held.append(publishing.enter_context(atomic.signals_deferred()))
            if not overwrite:  # (one made while this one converted: kept)
                _check_free(path)
            _write_side_files(path, labels, record)
            sides.append(path)

        held: List[list] = []
        sides: List[str] = []  # written beside it: gone with it
        try:
            atomic_write(path, write, replace=overwrite)  # last
        except FileExistsError:
            if not sides:  # (a file beside it, made as it converted)
                raise
            for side in written_paths(path)[1:]:  # a .tflite made since
                if atomic.exists(side):  # its own: gone with it
                    tf.io.gfile.remove(side)
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST),
                                  path) from None
        for written in held:  # what a signal held while publishing finds
            written.extend(p for p in written_paths(path)  # done
                           if tf.io.gfile.exists(p))


def _write_side_files(path: str, labels: Optional[str],
                      record: dict) -> None:
    """The class names (or none: an earlier file's would be read as this
    one's), then the preprocessing record naming them and the .tflite."""
    if labels is not None:
        atomic_write(labels_path(path), labels)
    elif tf.io.gfile.exists(labels_path(path)):
        tf.io.gfile.remove(labels_path(path))
    atomic_write(preprocessing_path(path),
                 json.dumps(record, indent=1) + "\n")


def open_interpreter(path: str):
    """The LiteRT interpreter of the .tflite `path`; a local file opened
    first, so that a folder or a file that cannot be read raises its own
    OSError (IsADirectoryError, PermissionError), not an interpreter
    error that reads as a file to export again."""
    if "://" not in path:
        with open(path, "rb"):
            pass
    return interpreter_class()(model_path=path)


def _scored_alone(wrapped: keras.Model) -> bool:
    """Whether `wrapped` (`pixels_model`) scores each class on its own (a
    sigmoid), so that its probabilities need not sum to 1."""
    return not isinstance(wrapped.layers[-1], keras.layers.Softmax)


def _verify(path: str, wrapped: keras.Model, quantization: str) -> None:
    height, width = wrapped.input_shape[1:3]
    pixels = np.random.default_rng(0).uniform(
        0, 255, (2, height, width, 3)
    ).astype(np.float32)
    got = run_litert(path, pixels)
    if quantization == "float32":
        want = keras.ops.convert_to_numpy(
            wrapped(pixels[:1], training=False)[OUTPUT_NAME]
        )
        want = np.concatenate([want, keras.ops.convert_to_numpy(
            wrapped(pixels[1:], training=False)[OUTPUT_NAME])])
        error = float(np.max(np.abs(got - want)))
        if not error <= VERIFY_ATOL:
            raise RuntimeError(
                f"The LiteRT file disagrees with the Keras model by "
                f"{error:.3g} (tolerance {VERIFY_ATOL}); not written."
            )
    elif not (np.all(np.isfinite(got)) and np.all(got >= 0)
              and np.all(got <= 1 + 1e-3)
              and (_scored_alone(wrapped)
                   or np.allclose(got.sum(-1), 1.0, atol=1e-3))):
        raise RuntimeError(
            f"The {quantization} LiteRT file gives no probabilities; not "
            "written."
        )

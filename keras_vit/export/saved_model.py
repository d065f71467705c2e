"""Exports a ViT classifier as a versioned SavedModel for TF Serving.

    export_model(model, "exports", model_name="vit", class_names=names)

writes `exports/vit/<next version>/` (signatures `serving_default` on image
bytes, `predict_images` on pixels, `features`; see `keras_vit.export.graph`),
a warm-up file for TF Serving, adds the model to `exports/models.config` and
writes `exports/batching_parameters.txt` (if not there) for
`tensorflow_model_server --enable_batching`.

From the command line, from a `.keras` file, an official `.npz` checkpoint
or a training workdir:

    keras-vit-export --export_dir=exports --model_name=vit \
        --model=model.keras
    keras-vit-export --export_dir=exports --model_name=vit_b16 \
        --model=ViT-B_16.npz --variant=B/16 --num_classes=1000 --image_size=384
    keras-vit-export --export_dir=exports --model=runs/digits

A version is written under a dotted temporary name and renamed when
complete, so on a local disk a crash never leaves a half-written version
that a server would load (on gs://, a rename copies objects one at a
time), and an existing version is never overwritten.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from typing import Optional, Sequence

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from keras_vit.data import preprocessing
from keras_vit.derived import (
    input_image_size,
    model_stride,
    with_dynamic_image_size,
)
from keras_vit.errors import UsageError, one_line
from keras_vit.export import files as export_files
from keras_vit.export import graph as export_graph
from keras_vit.export import options as export_options
from keras_vit.export import request_checks, server_config
from keras_vit.export import versions as export_versions
from keras_vit.export.options import ExportOptions
from keras_vit.scoring import scores as vit_scores
from keras_vit.storage import atomic
from keras_vit.storage.atomic import atomic_write

BATCHING_FILE = export_files.BATCHING_FILE
BATCHING_PARAMETERS = export_files.BATCHING_PARAMETERS
# What each signature's input is, for export.json: the SavedModel itself
# records only names, dtypes and shapes.
INPUT_DOCS = {
    "serving_default": "image_bytes: string [batch], encoded JPEG, PNG, "
    "GIF, BMP or WebP files as they are",
    "predict_images": "images: float32 [batch, height, width, 3], RGB "
    "pixels in [0, 255] (not [0, 1], not [-1, 1]), any size",
    "features": "image_bytes: as serving_default",
    export_graph.ANY_SIZE_SIGNATURE: "images: float32 [batch, height, "
    "width, 3], RGB pixels in [0, 255], sides multiples of the stride",
}

# Probabilities from the written SavedModel must match the Keras model on
# the same images this closely, or the export is rejected.
VERIFY_ATOL = 1e-4


def _input_size(model: keras.Model):
    shape = model.input_shape
    if not isinstance(shape, list) and len(shape) == 4 and shape[-1] == 3:
        # A dynamic image size: the size of its position embeddings.
        shape = (None, *input_image_size(model), 3)
    if isinstance(shape, list) or len(shape) != 4 or shape[-1] != 3 or (
        None in shape[1:3]
    ):
        raise UsageError(
            f"export_model needs a model taking (batch, height, width, 3) "
            f"images of a fixed size; {model.name!r} takes {shape}."
        )
    return int(shape[1]), int(shape[2])


def _reference_probabilities(model, images: Sequence[bytes], size, resize,
                             scores: str):
    batch = np.stack([
        preprocessing.preprocess_eval(
            preprocessing.decode_image(tf.constant(image)), size, *resize
        ).numpy()
        for image in images
    ])
    logits = keras.ops.convert_to_numpy(model(batch, training=False))
    return vit_scores.probabilities_np(logits, scores)


def verify_export(path: str, model: keras.Model, images: Sequence[bytes],
                  resize=(None, False), scores: str = vit_scores.SOFTMAX
                  ) -> None:
    """Reloads a SavedModel and checks it against the Keras model.

    Every warm-up request replays without error, and `serving_default`
    gives the Keras model's probabilities (within `VERIFY_ATOL`) on
    `images` decoded and preprocessed eagerly (`resize`: resize_size and
    keep_aspect, as `preprocess_eval` takes them; `scores`: softmax or
    sigmoid, as the export scores them).

    Raises:
        RuntimeError: the SavedModel disagrees with the model.
    """
    loaded = tf.saved_model.load(path)
    warmup = export_files.join(path, "assets.extra", export_files.WARMUP_FILE)
    if tf.io.gfile.exists(warmup):
        for log in export_files.read_warmup_file(warmup):
            request = log.predict_log.request
            signature = loaded.signatures[request.model_spec.signature_name]
            inputs = export_files.request_inputs(request)
            signature(**{k: tf.constant(v) for k, v in inputs.items()})
    if not images:
        return
    got = np.concatenate([loaded.signatures["serving_default"](
        image_bytes=tf.constant(part, dtype=tf.string))["probabilities"]
        .numpy() for part in request_checks.requests_within_budget(images)])
    want = _reference_probabilities(model, images, _input_size(model), resize,
                                    scores)
    error = float(np.max(np.abs(got - want)))
    if export_graph.ANY_SIZE_SIGNATURE in loaded.signatures:
        error = max(error, _any_size_error(loaded, model, scores))
    if not error <= VERIFY_ATOL:
        raise RuntimeError(
            f"The exported SavedModel disagrees with the Keras model by "
            f"{error:.3g} (tolerance {VERIFY_ATOL}); the export was not "
            "published."
        )


def _any_size_error(loaded, model: keras.Model, scores: str) -> float:
    """How far `predict_any_size` is from the model, on pixels one stride
    taller than the model's own size (so that the interpolation runs)."""
    height, width = input_image_size(model)
    stride = model_stride(model)
    pixels = np.random.default_rng(0).uniform(
        0, 255, (2, height + stride, width, 3)
    ).astype(np.float32)
    got = loaded.signatures[export_graph.ANY_SIZE_SIGNATURE](
        images=tf.constant(pixels)
    )["probabilities"].numpy()
    logits = keras.ops.convert_to_numpy(
        model(pixels / 127.5 - 1.0, training=False)
    )
    want = vit_scores.probabilities_np(logits, scores)
    return float(np.max(np.abs(got - want)))


def export_model(model: keras.Model, export_dir: str, **options) -> str:
    """Writes `model` as a version of `model_name` for TF Serving.

    Args:
        model: keras.Model. A built classifier taking (batch, H, W, 3)
            images in [-1, 1] and returning logits, e.g. from
            `keras_vit.create_model`. Mixed-precision or distributed models
            are copied to plain float32 for serving.
        export_dir: str. The server's model root: the version goes to
            `<export_dir>/<model_name>/<version>/`, and `<export_dir>/
            models.config` lists the models in it.
        **options: the fields of
            `keras_vit.export.options.ExportOptions`, by name: model_name,
            class_names, top_k, warmup_images, version, resize_size,
            keep_aspect, serving_base_dir, verify, dynamic_size, scores,
            source.
            An unknown
            one raises a UsageError.

    Returns:
        str. The path of the new version folder.
    """
    opts = ExportOptions.of(options)
    _check_session()
    target = _target(model, export_dir, opts)
    serving_model = export_graph.float32_inference_model(model)
    if opts.dynamic_size:
        serving_model = with_dynamic_image_size(serving_model)
    logging.info("Tracing the serving signatures ...")
    servable = export_graph.build_endpoints(
        serving_model, target.names, target.top_k, opts.resize_size,
        any_size=opts.dynamic_size, keep_aspect=opts.keep_aspect,
        scores=target.scores,
    )
    def listed() -> None:  # the server's files name the model
        write_batching_parameters(target.export_dir)
        server_config.update_models_config(
            target.config_path,
            opts.model_name,
            server_config.config_base_path(target.export_dir, opts.model_name,
                                          opts.serving_base_dir),
            replace_base_path=opts.serving_base_dir is not None,
        )

    return _write_version(servable, serving_model, target, opts, listed)


def _check_session() -> None:
    """Raises unless this process can write a SavedModel for serving."""
    if keras.backend.backend() != "tensorflow":
        raise UsageError(
            "SavedModel export runs on the TensorFlow backend; set "
            f"KERAS_BACKEND=tensorflow (now {keras.backend.backend()!r})."
        )
    if tf.distribute.has_strategy():
        raise UsageError(
            "export_model was called inside a tf.distribute strategy scope; "
            "call it after leaving `with strategy.scope():` (the model's "
            "variables are copied to plain float32 ones for serving)."
        )
    export_files.require_serving_api()


def check_can_export(export_dir: str, model_name: str) -> None:
    """What an export at the end of a training run needs, checked at its
    start (not after hours of training): this process can write a
    SavedModel for serving (TensorFlow backend, TF Serving's client API),
    `model_name` is usable, and models.config in `export_dir`, if any,
    can be read."""
    _check_session()
    export_files.check_model_name(model_name)
    server_config.read_models_config(
        export_files.join(os.fspath(export_dir), export_files.CONFIG_FILE))


@dataclasses.dataclass(frozen=True)
class _Target:
    """What a new version holds and where it goes, checked before any of
    it is written."""

    export_dir: str
    config_path: str
    model_dir: str
    names: list
    size: tuple
    top_k: int
    images: list
    scores: str


def _target(model: keras.Model, export_dir: str,
            opts: ExportOptions) -> _Target:
    """The checked `_Target` of exporting `model` to `export_dir`."""
    export_files.check_model_name(opts.model_name)
    num_classes = export_options.classifier_width(model, "export_model")
    size = _input_size(model)
    export_options.check_resize_size(opts.resize_size, size, opts.keep_aspect)
    names = export_options.class_names(opts.class_names, num_classes)
    top_k = export_options.checked_top_k(opts.top_k, num_classes)
    scores = vit_scores.scores_for(num_classes, opts.scores)
    export_options.check_version(opts.version)
    if opts.warmup_images is None:
        images = export_files.default_warmup_images()
    else:
        images = export_files.load_warmup_images(opts.warmup_images)
    if opts.keep_aspect and opts.resize_size is not None:
        export_files.check_warmup_aspect(images, opts.resize_size,
                                         opts.warmup_images)
    export_dir = os.fspath(export_dir)
    config_path = export_files.join(export_dir, export_files.CONFIG_FILE)
    server_config.read_models_config(config_path)  # fail before exporting
    model_dir = export_files.join(export_dir, opts.model_name)
    if tf.io.gfile.exists(model_dir) and not tf.io.gfile.isdir(model_dir):
        raise UsageError(
            f"{model_dir} is a file, not a model folder: choose another "
            "model_name or export_dir.")
    if opts.version is not None and tf.io.gfile.exists(
        export_files.join(model_dir, str(opts.version))
    ):
        raise FileExistsError(
            f"Version {opts.version} of {opts.model_name!r} already exists "
            f"in {model_dir}; pass another version (or none for the next)."
        )
    return _Target(export_dir, config_path, model_dir, names, size, top_k,
                   images, scores)


def _write_version(servable, serving_model: keras.Model, target: _Target,
                   opts: ExportOptions, listed) -> str:
    """Writes, verifies and publishes the new version, then `listed()`
    (models.config); its path. A failure before publishing leaves no
    trace of it; Ctrl-C or SIGTERM while publishing waits until the
    version is listed too."""
    auto_version = opts.version is None
    try:
        made = atomic.make_folders(target.model_dir)
    except (tf.errors.NotFoundError, tf.errors.PermissionDeniedError,
            tf.errors.FailedPreconditionError) as error:
        raise UsageError(
            f"Cannot make {target.model_dir}: {one_line(error)}. Give "
            "`export_dir` a folder this user may write.") from None
    version = (export_versions.next_version(target.model_dir) if auto_version
               else opts.version)
    export_versions.remove_orphans(target.model_dir)
    export_versions.warn_incomplete(target.model_dir)
    tmp_dir = export_versions.temporary_version(target.model_dir, version)
    export_versions.remove_tree(tmp_dir)
    with atomic.removed_if_refused(target.model_dir, made):
        try:
            logging.info("Writing version %s of %r (SavedModel) ...", version,
                         opts.model_name)
            _write_saved_model(servable, tmp_dir)
            _write_extras(tmp_dir, serving_model, target, opts)
            if opts.verify:
                logging.info("Checking the reloaded SavedModel against the "
                             "model ...")
                # Without warm-up images, still compare on synthetic ones.
                verify_export(
                    tmp_dir,
                    serving_model,
                    target.images or export_files.default_warmup_images(),
                    (opts.resize_size, opts.keep_aspect),
                    target.scores,
                )
            atomic.sync_tree(tmp_dir)  # on disk before the quick publishing
            with atomic.signals_deferred() as written:
                path = export_versions.publish_version(
                    tmp_dir, target.model_dir, int(version), auto_version)
                listed()
                written.append(path)
            return path
        except BaseException:
            export_versions.remove_tree(tmp_dir)
            raise


def write_batching_parameters(export_dir: str) -> Optional[str]:
    """Writes `<export_dir>/batching_parameters.txt` for
    `tensorflow_model_server --enable_batching`, unless one is there (it
    may have been tuned). Returns its path, or None if it was kept."""
    path = export_files.join(export_dir, BATCHING_FILE)
    if tf.io.gfile.exists(path):
        return None
    atomic_write(path, BATCHING_PARAMETERS % (os.cpu_count() or 1))
    return path


def _write_saved_model(servable, path: str) -> None:
    servable.write_out(path)


def _write_extras(path: str, model: keras.Model, target: _Target,
                  opts: ExportOptions) -> None:
    """Writes the labels, the warm-up requests and export.json beside the
    SavedModel at `path`."""
    assets = export_files.join(path, "assets")
    tf.io.gfile.makedirs(assets)
    with tf.io.gfile.GFile(export_files.join(assets, "labels.txt"), "w") as f:
        f.write("".join(f"{name}\n" for name in target.names))
    extra = export_files.join(path, "assets.extra")
    tf.io.gfile.makedirs(extra)
    requests = export_files.warmup_requests(
        opts.model_name, target.images, target.size,
        export_graph.ANY_SIZE_SIGNATURE if opts.dynamic_size else "")
    if requests:
        export_files.write_warmup_file(
            export_files.join(extra, export_files.WARMUP_FILE), requests
        )
    info = _export_info(model, target, opts)
    with tf.io.gfile.GFile(export_files.join(extra, "export.json"), "w") as f:
        json.dump(info, f, indent=2)


def _export_info(model: keras.Model, target: _Target,
                 opts: ExportOptions) -> dict:
    """dict. What export.json says of the version."""
    signatures = list(export_graph.SIGNATURES) + (
        [export_graph.ANY_SIZE_SIGNATURE] if opts.dynamic_size else []
    )
    resize_size = opts.resize_size
    if resize_size is not None:
        resize_size = (int(resize_size) if opts.keep_aspect
                       else list(preprocessing.as_hw(resize_size)))
    return {
        "model_name": opts.model_name,
        "keras_model_name": model.name,
        "image_size": list(target.size),
        # [height, width], or with keep_aspect the shorter side's length.
        "resize_size": resize_size,
        "keep_aspect": bool(opts.keep_aspect),
        "num_classes": len(target.names),
        "top_k": target.top_k,
        # How `probabilities` scores the logits: softmax or sigmoid.
        "scores": target.scores,
        "source": opts.source,
        "signatures": signatures,
        "inputs": {name: INPUT_DOCS[name] for name in signatures},
        "exported_at": datetime.datetime.now(datetime.timezone.utc)
        .isoformat(timespec="seconds"),
    }

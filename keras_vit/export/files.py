"""On-disk layout of an export for TF Serving: versions, warm-up, config.

    <export_dir>/models.config                 model_config_list (text proto)
    <export_dir>/models.config.lock            locked while it is updated
    <export_dir>/batching_parameters.txt       for --enable_batching
    <export_dir>/<model_name>/<version>/       one SavedModel per version
        saved_model.pb, variables/, assets/labels.txt,
        assets.extra/tf_serving_warmup_requests, assets.extra/export.json

Versions and their publishing are `versions`'. Paths go through
`tf.io.gfile`, so `gs://` export dirs work where TensorFlow's GCS
filesystem is installed.
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import List, Sequence, Union

import numpy as np
import tensorflow as tf

from keras_vit.data import checks, decoding, preprocessing
from keras_vit.errors import UsageError, one_line
from keras_vit.export import request_checks

WARMUP_FILE = "tf_serving_warmup_requests"
# TF Serving reads at most this many warm-up records.
MAX_WARMUP_RECORDS = 1000
CONFIG_FILE = "models.config"
# Locked while an export updates models.config (a local export folder).
LOCK_FILE = "models.config.lock"
# TF Serving's batching settings, written beside models.config.
BATCHING_FILE = "batching_parameters.txt"
# The most images one request may hold when the server batches: the
# max_batch_size of the BATCHING_FILE an export writes. TF Serving refuses
# a larger request there, and replays warm-up through the batching too (a
# refused warm-up request fails the model's load), so no warm-up request
# holds more images than this.
MAX_BATCH_SIZE = 32
# TF Serving's --batching_parameters_file, tuned for a CPU server: a batch
# closes at MAX_BATCH_SIZE (32) requests' images or after 5 ms, whichever
# first. On a GPU raise max_batch_size (e.g. 128) and batch_timeout_micros
# (e.g. 10000).
BATCHING_PARAMETERS = f"""\
max_batch_size {{ value: {MAX_BATCH_SIZE} }}
batch_timeout_micros {{ value: 5000 }}
max_enqueued_batches {{ value: 100 }}
num_batch_threads {{ value: %d }}
"""

_MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")

WarmupImage = Union[bytes, str, os.PathLike, np.ndarray]


def require_serving_api() -> None:
    """Raises a clear ImportError if tensorflow-serving-api is missing.

    The warm-up records and models.config are its protos.
    """
    try:
        import tensorflow_serving.apis.prediction_log_pb2  # noqa: F401
        import tensorflow_serving.config.model_server_config_pb2  # noqa: F401
    except ImportError as e:
        raise ImportError(
            f"Export needs the tensorflow-serving-api package ({e}): pip "
            "install tensorflow-serving-api. On a TPU VM, where its "
            "dependency on `tensorflow` would replace tensorflow-tpu, use "
            "pip install --no-deps tensorflow-serving-api."
        ) from None


def check_model_name(name: str) -> str:
    """str. `name` if usable as a TF Serving model name and folder name
    (not the name of a file the export writes beside the models)."""
    if not isinstance(name, str) or not _MODEL_NAME_RE.match(name):
        raise UsageError(
            f"model_name {name!r} is not usable: use letters, digits, '_', "
            "'-' and '.', not starting with '.' or '-' (e.g. 'vit')."
        )
    # .bak, .bak.N: server_config's copies of a models.config with comments
    if name in (CONFIG_FILE, BATCHING_FILE, LOCK_FILE) or re.fullmatch(
            re.escape(CONFIG_FILE) + r"\.bak(\.\d+)?", name):
        raise UsageError(
            f"model_name {name!r} is the name of a file the export writes "
            "beside the models: choose another (e.g. 'vit')."
        )
    return name


def join(*parts: str) -> str:
    """str. Joins path parts; URLs like gs:// keep forward slashes."""
    if "://" in str(parts[0]):
        return posixpath.join(*[str(p) for p in parts])
    return os.path.join(*[os.fspath(p) for p in parts])


def check_saved_signature(path: str, signature) -> None:
    """A UsageError where the serving_default `signature` of the SavedModel
    `path` lacks the image_bytes input or the probabilities output."""
    outputs = signature.structured_outputs
    _check_names(path, signature.structured_input_signature[1],
                 outputs if isinstance(outputs, dict) else {})


def check_litert_signature(path: str, interpreter, names) -> None:
    """A UsageError where the LiteRT file `path` (its `interpreter`) has
    other than one signature, taking and giving `names` (input, output)."""
    one = list(interpreter.get_signature_list().values())
    one = one[0] if len(one) == 1 else {}  # several: none of them
    _check_names(path, one.get("inputs", ()), one.get("outputs", ()), names)


def _check_names(path: str, inputs, outputs,
                 names=("image_bytes", "probabilities")) -> None:
    """A UsageError where a served file's signature (its `inputs` and
    `outputs` names) lacks what keras-vit-export writes (`names`: input,
    output): a SavedModel or LiteRT file that other tools wrote."""
    if names[0] in inputs and names[1] in outputs:
        return
    raise UsageError(
        f"{path} takes {', '.join(sorted(inputs)) or 'no named input'} and "
        f"gives {', '.join(sorted(outputs)) or 'no named output'}, not "
        f"{names[0]} -> {names[1]}: it is no export of keras-vit-export. "
        "Export the model with keras-vit-export, or name the model itself "
        "(a .keras file, a workdir or a released model's name).")


# ---------------------------------------------------------------- warm-up


def default_warmup_images() -> List[bytes]:
    """list of bytes. Small synthetic images in the formats clients send.

    A colour JPEG, an RGB PNG, a grayscale PNG and an RGBA PNG, of different
    sizes, so warm-up exercises every decode and resize path.
    """
    rng = np.random.RandomState(0)
    yy, xx = np.mgrid[0:48, 0:64]
    gradient = np.stack(
        [xx * 4, yy * 5, (xx + yy) * 2], axis=-1
    ).astype(np.uint8)
    noise = rng.randint(0, 256, (37, 53, 3), dtype=np.uint8)
    gray = (np.add.outer(np.arange(40), np.arange(40)) * 3).astype(np.uint8)
    rgba = rng.randint(0, 256, (30, 50, 4), dtype=np.uint8)
    return [
        tf.io.encode_jpeg(gradient, quality=90).numpy(),
        tf.io.encode_png(noise).numpy(),
        tf.io.encode_png(gray[..., None]).numpy(),
        tf.io.encode_png(rgba).numpy(),
    ]


def load_warmup_images(images: Sequence[WarmupImage]) -> List[bytes]:
    """Encoded bytes for each warm-up image, each checked to decode.

    Args:
        images: sequence of bytes (an encoded image file), str / PathLike (a
            path to one) or uint8 numpy arrays (H, W[, C]; encoded as PNG).

    Returns:
        list of bytes. The encoded images.
    """
    if isinstance(images, (bytes, str, os.PathLike, np.ndarray)):
        raise UsageError(
            "warmup_images must be a list of images (bytes, paths or "
            "arrays), not a single image: wrap it in a list."
        )
    max_images = max_warmup_images()
    encoded = []
    for index, image in enumerate(images):
        if isinstance(image, (str, os.PathLike)):
            if tf.io.gfile.isdir(os.fspath(image)):
                raise UsageError(
                    f"warmup_images[{index}] ({os.fspath(image)}) is a "
                    "folder: name image files, or a glob of them (e.g. "
                    "photos/*.jpg).")
            what = f"warmup_images[{index}] ({os.fspath(image)})"
            try:
                with tf.io.gfile.GFile(os.fspath(image), "rb") as f:
                    data = f.read()
            except tf.errors.OpError as error:  # missing, unreadable
                raise UsageError(f"{what} cannot be read: "
                                 f"{one_line(error)}.") from None
        elif isinstance(image, np.ndarray):
            array = np.asarray(image)
            if array.dtype != np.uint8 or array.ndim not in (2, 3):
                raise UsageError(
                    f"warmup_images[{index}] is an array of dtype "
                    f"{array.dtype} and shape {array.shape}: arrays must be "
                    "uint8 (height, width[, channels])."
                )
            if array.ndim == 2:
                array = array[..., None]
            data = tf.io.encode_png(array).numpy()
            what = f"warmup_images[{index}]"
        elif isinstance(image, bytes):
            data, what = image, f"warmup_images[{index}]"
        else:
            raise UsageError(
                f"warmup_images[{index}] has type {type(image).__name__}; "
                "expected bytes, a path or a uint8 array."
            )
        try:
            decoding.decode_one(tf.constant(data))
        except tf.errors.InvalidArgumentError as e:
            raise UsageError(
                f"{what} is not a decodable JPEG/PNG/GIF/BMP image: "
                f"{checks.decode_reason(e)}"
            ) from None
        encoded.append(data)
    if len(encoded) > max_images:
        raise UsageError(
            f"{len(encoded)} warm-up images given; TF Serving reads at most "
            f"{MAX_WARMUP_RECORDS} warm-up records, so pass at most "
            f"{max_images} images."
        )
    return encoded


def check_warmup_aspect(images: Sequence[bytes], resize_size: int,
                        given=None) -> None:
    """A UsageError naming the first warm-up image (encoded `images`, from
    the `warmup_images` `given`) too elongated for the keep-aspect resize
    of its shorter side to `resize_size` (`preprocessing.resize_small`):
    TF Serving replays the warm-up when it loads the model, and one
    refused request fails the load."""
    for index, data in enumerate(images):
        shape = tf.shape(decoding.decode_one(tf.constant(data)))
        if not preprocessing.too_elongated(shape, resize_size):
            continue
        what = f"warmup_images[{index}]"
        if isinstance(given, (list, tuple)) and isinstance(
                given[index], (str, os.PathLike)):
            what += f" ({os.fspath(given[index])})"
        raise UsageError(f"{what}, {int(shape[0])} x {int(shape[1])} "
                         f"pixels: {preprocessing.ELONGATED_MESSAGE}")


def _warmup_records(count: int) -> int:
    """int. The most records `warmup_requests` makes of `count` images:
    one each, the batched ones, and the pixels (fixed and any size) and
    features requests."""
    return count + (-(-count // MAX_BATCH_SIZE) if count > 1 else 0) + 3


def max_warmup_images() -> int:
    """int. The most warm-up images whose records TF Serving reads all."""
    count = MAX_WARMUP_RECORDS
    while _warmup_records(count) > MAX_WARMUP_RECORDS:
        count -= 1
    return count


def _request(model_name: str, signature: str, inputs: dict):
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    return request


def warmup_requests(model_name: str, images: Sequence[bytes],
                    image_size: Sequence[int], any_size: str = ""
                    ) -> list:
    """PredictRequests that touch every signature, for TF Serving warm-up.

    One `serving_default` request per image, the images batched (in
    requests of at most MAX_BATCH_SIZE, which a batching server takes),
    one `predict_images` request (the first image resized to the model's
    input size, float32 [0, 255]), the same pixels to the signature
    named `any_size` where the export has one (`predict_any_size`), and
    one `features` request.

    Returns:
        list of tensorflow_serving.apis.predict_pb2.PredictRequest.
    """
    if not images:
        return []
    requests = [
        _request(
            model_name,
            "serving_default",
            {"image_bytes": np.array([image], dtype=object)},
        )
        for image in images
    ]
    if len(images) > 1:
        # Batched requests within the batching file's max_batch_size and
        # the signature's pixel budget (TF Serving's load fails on either).
        requests.extend(
            _request(model_name, "serving_default",
                     {"image_bytes": np.array(part, dtype=object)})
            for part in request_checks.requests_within_budget(
                images, MAX_BATCH_SIZE)
        )
    pixels = preprocessing.resize(
        preprocessing.decode_image(tf.constant(images[0])), image_size
    )
    # Whole values, as a decoded image's: the signature refuses a nearly
    # black image of fractions in [0, 1] as one scaled to [0, 1].
    pixels = np.clip(np.round(pixels.numpy()), 0.0, 255.0)[None].astype(
        np.float32)
    requests.extend(_request(model_name, name, {"images": pixels})
                    for name in ["predict_images", any_size] if name)
    requests.append(
        _request(
            model_name,
            "features",
            {"image_bytes": np.array([images[0]], dtype=object)},
        )
    )
    return requests


def write_warmup_file(path: str, requests: Sequence) -> None:
    """Writes PredictRequests as a TFRecord of PredictionLog records."""
    from tensorflow_serving.apis import prediction_log_pb2

    if len(requests) > MAX_WARMUP_RECORDS:
        raise UsageError(
            f"{len(requests)} warm-up records; TF Serving reads at most "
            f"{MAX_WARMUP_RECORDS}."
        )
    with tf.io.TFRecordWriter(path) as writer:
        for request in requests:
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
            writer.write(log.SerializeToString())


def read_warmup_file(path: str) -> list:
    """list of PredictionLog. The records of a warm-up file, parsed."""
    from tensorflow_serving.apis import prediction_log_pb2

    logs = []
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        logs.append(prediction_log_pb2.PredictionLog.FromString(record))
    return logs


def request_inputs(request) -> dict:
    """dict of str -> numpy array. The input tensors of a PredictRequest."""
    return {
        key: tf.make_ndarray(proto) for key, proto in request.inputs.items()
    }

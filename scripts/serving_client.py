"""Ask TF Serving for an exported ViT's answer, over REST or gRPC.

    python scripts/serving_client.py --rest http://localhost:8501 \\
        --model vit cat.jpg
    python scripts/serving_client.py --grpc localhost:8500 \\
        --model vit cat.jpg dog.png

Sends the image files as they are (the export decodes and preprocesses
them) to `serving_default` and prints each image's top classes; `features`
prints each image's pre-logits embedding, and `predict_images` sends the
decoded RGB pixels (float32 in [0, 255]) instead of the files. REST
carries the bytes as base64 under {"b64": ...}, which the server decodes,
and pixels as nested lists; gRPC sends the raw bytes in a DT_STRING tensor
and pixels in a DT_FLOAT one (needs the `serving` extra:
tensorflow-serving-api and grpcio). One request holds every image
(`predict_images`: of one size); a bad one is answered with an error
naming its index (`image_bytes[i]`).
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import os
import re
import sys
import urllib.error
import urllib.request
from typing import Dict, List, Optional, Sequence

import numpy as np

OUTPUTS = ("class_names", "scores")
# The input of each signature of an export: encoded image files, or RGB
# pixels (float32 in [0, 255], any height and width).
INPUTS = {"serving_default": "image_bytes", "features": "image_bytes",
          "predict_images": "images"}


def pixels(images: Sequence[bytes],
           names: Optional[Sequence[str]] = None) -> np.ndarray:
    """float32 [batch, H, W, 3] in [0, 255]: the decoded RGB pixels of
    image files of one size (what `predict_images` takes); a file that is
    no image, or whose header declares more pixels than the export reads,
    is named (`names`: the files', else "image N") in one line."""
    import tensorflow as tf

    names = names or [f"image {i + 1}" for i in range(len(images))]
    for name, image in zip(names, images):
        # TensorFlow's decoder reads such a BMP's colour indices as grey.
        if image[:2] == b"BM" and len(image) >= 30 and int.from_bytes(
                image[28:30], "little") <= 8:
            raise SystemExit(f"error: {name}: "
                             "A BMP with a colour table (8 bits per pixel or "
                             "fewer): save it as PNG or JPEG, or send the "
                             "file itself (serving_default).")
        # TensorFlow's WebP decoder corrupts memory on an animated one
        # (VP8X header, animation flag), as the export refuses it too.
        if image[:4] == b"RIFF" and image[8:16] == b"WEBPVP8X" and len(
                image) > 20 and image[20] & 2:
            raise SystemExit(f"error: {name}: "
                             "An animated WebP, which TensorFlow's decoder "
                             "cannot read: save its first frame as PNG or "
                             "JPEG, or send the file itself "
                             "(serving_default refuses it by name).")
    decoded = [_decoded(tf, name, image) for name, image in zip(names,
                                                                 images)]
    if len({tuple(d.shape) for d in decoded}) > 1:
        raise SystemExit("predict_images takes images of one size per "
                         "request: send them one at a time.")
    return tf.cast(tf.stack(decoded), tf.float32).numpy()


def _decoded(tf, name: str, image: bytes):
    """The RGB pixels of image file `image` as the export decodes it (a
    JPEG with the accurate DCT, as Pillow), its header checked first as
    the export checks it (the checkout's keras_vit/data/image_headers.py);
    a SystemExit naming `name` where it cannot be decoded."""
    headers = _checkout_module("image_headers", "data", "image_headers.py")
    try:
        data = tf.constant(image)
        if headers is not None and not bool(headers.is_known_format(data)):
            raise SystemExit(f"error: {name}: "
                             f"{headers.UNKNOWN_FORMAT_MESSAGE}")
        if headers is not None and int(headers.declared_pixels(data)) > (
                headers.MAX_PIXELS):
            raise SystemExit(f"error: {name}: {headers.HUGE_MESSAGE}")
        if tf.io.is_jpeg(image):
            return tf.io.decode_jpeg(image, channels=3,
                                     dct_method="INTEGER_ACCURATE")
        return tf.io.decode_image(image, channels=3, expand_animations=False)
    except tf.errors.OpError as error:
        reason = re.sub(r"^\{\{[^}]*\}\}\s*|\s*\[Op:\w+\].*$", "",
                        str(error.message).strip().splitlines()[0])
        raise SystemExit(f"error: {name} cannot be decoded ({reason}): "
                         "check the file, or send it as it is "
                         "(serving_default).") from None


def rest_request(images: Sequence[bytes],
                 signature: str = "serving_default",
                 names: Optional[Sequence[str]] = None) -> Dict:
    """dict. The JSON body of a REST predict request (row format): the
    files as base64 under "b64", or for `predict_images` the pixels."""
    if INPUTS[signature] == "images":
        instances = pixels(images, names).tolist()
    else:
        instances = [{"b64": base64.b64encode(image).decode("ascii")}
                     for image in images]
    return {"signature_name": signature, "instances": instances}


def rest_predict(url: str, model: str, images: Sequence[bytes],
                 timeout: float = 30.0,
                 signature: str = "serving_default",
                 names: Optional[Sequence[str]] = None) -> List[Dict]:
    """list of dict. One prediction per image, from
    POST <url>/v1/models/<model>:predict."""
    body = json.dumps(rest_request(images, signature, names)).encode()
    request = urllib.request.Request(
        f"{url.rstrip('/')}/v1/models/{model}:predict", data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            predictions = json.load(answer)["predictions"]
    except urllib.error.HTTPError as e:  # the server's answer: its words
        body = e.read().decode("utf-8", "replace")
        try:
            body = json.loads(body).get("error", body)
        except (ValueError, AttributeError):
            pass
        raise SystemExit(f"error: {url} answered {e.code}: {body}") from None
    except urllib.error.URLError as e:
        raise SystemExit(f"error: cannot reach {url}: {e.reason}") from None
    except OSError as e:  # a timeout, a connection reset
        raise SystemExit(f"error: no answer from {url}: {e}") from None
    # A signature with one output (features) answers without its name.
    return [p if isinstance(p, dict) else {"features": p}
            for p in predictions]


def grpc_request(model: str, images: Sequence[bytes],
                 signature: str = "serving_default",
                 names: Optional[Sequence[str]] = None):
    """A tensorflow_serving PredictRequest with the raw image bytes (for
    `predict_images`, the pixels)."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    if INPUTS[signature] == "images":
        tensor = tf.make_tensor_proto(pixels(images, names),
                                      dtype=tf.float32)
    else:
        tensor = tf.make_tensor_proto(list(images), dtype=tf.string)
    request.inputs[INPUTS[signature]].CopyFrom(tensor)
    return request


def grpc_predict(address: str, model: str, images: Sequence[bytes],
                 timeout: float = 30.0,
                 signature: str = "serving_default",
                 names: Optional[Sequence[str]] = None) -> List[Dict]:
    """list of dict. One prediction per image, from the gRPC
    PredictionService at `address` (host:port)."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            answer = stub.Predict(grpc_request(model, images, signature, names),
                                  timeout=timeout)
        except grpc.RpcError as e:
            raise SystemExit(f"error: {address} answered {e.code().name}: "
                             f"{e.details()}") from None
    outputs = {k: tf.make_ndarray(v) for k, v in answer.outputs.items()}
    return [
        {k: outputs[k][i].tolist() for k in outputs}
        for i in range(len(images))
    ]


def describe(prediction: Dict) -> str:
    """str. "name 0.912, name 0.051, ..." of one prediction; of a
    `features` answer, its width and first values."""
    if "class_names" not in prediction:
        values = np.asarray(prediction["features"], np.float64)
        head = ", ".join(f"{v:.3f}" for v in values[:4])
        return f"features [{values.size}]: {head}, ..."
    names = [n.decode() if isinstance(n, bytes) else str(n)
             for n in prediction["class_names"]]
    scores = np.asarray(prediction["scores"], np.float64)
    return ", ".join(f"{n} {s:.3f}" for n, s in zip(names, scores))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    server = parser.add_mutually_exclusive_group(required=True)
    server.add_argument("--rest", help="the server's REST address, e.g. "
                        "http://localhost:8501")
    server.add_argument("--grpc", help="the server's gRPC address, e.g. "
                        "localhost:8500")
    parser.add_argument("--model", default="vit",
                        help="the model's name in the server's "
                        "models.config (keras-vit-export's --model_name; "
                        "default: %(default)s)")
    parser.add_argument("--signature", default="serving_default",
                        choices=sorted(INPUTS),
                        help="the export's signature to ask (default: "
                        "%(default)s)")
    parser.add_argument("images", nargs="+",
                        help="image files to classify (JPEG, PNG, ...)")
    return parser


def _checkout_module(name: str, *parts: str):
    """The checkout's module keras_vit/<parts...>, loaded by its path
    (importing keras_vit would load Keras), once; None where this script
    was copied out of the checkout."""
    if name in _LOADED:
        return _LOADED[name]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(here, "keras_vit", *parts)
    module = None
    if os.path.exists(path):
        spec = importlib.util.spec_from_file_location(f"_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    _LOADED[name] = module
    return module


_LOADED: Dict = {}


def _load_tensorflow_quietly() -> None:
    """Imports TensorFlow without its start-up notices (oneDNN, CPU
    features, no CUDA driver), as the keras-vit commands do: with the
    checkout's keras_vit/quiet_start.py."""
    quiet = _checkout_module("quiet_start", "quiet_start.py")
    if quiet is None:
        return
    quiet.hold(sys.argv[1:])
    try:
        import tensorflow  # noqa: F401
    finally:
        quiet.release()


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    images = []
    for path in args.images:
        try:
            with open(path, "rb") as f:
                images.append(f.read())
        except OSError as e:
            raise SystemExit(f"error: cannot read {path}: "
                             f"{e.strerror or e}") from None
    if args.grpc or args.signature == "predict_images":
        _load_tensorflow_quietly()
    if args.rest:
        predictions = rest_predict(args.rest, args.model, images,
                                   signature=args.signature,
                                   names=args.images)
    else:
        predictions = grpc_predict(args.grpc, args.model, images,
                                   signature=args.signature,
                                   names=args.images)
    for path, prediction in zip(args.images, predictions):
        print(f"{path}: {describe(prediction)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

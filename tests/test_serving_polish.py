"""What a new user of the SavedModel runs into: a bad image in a batch named
by its index, [0, 1]-scaled pixels refused, WebP, the batching file,
signature docs, the REST / gRPC client, class names in analysis titles."""

import base64
import importlib.util
import io
import json
import os
import resource
import struct
import zlib

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit import create_model
from keras_vit.analysis.report import run_analysis
from keras_vit.data import image_headers, preprocessing
from keras_vit.export import files as export_files
from keras_vit.export import graph, request_checks, saved_model
from tests.reliability_cases import check_error, covers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ["cat", "dog", "bird"]
SIZE = 16


def _client():
    spec = importlib.util.spec_from_file_location(
        "serving_client", os.path.join(ROOT, "scripts", "serving_client.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _encode(array, fmt):
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format=fmt)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    return create_model(None, num_classes=3, image_size=SIZE, patch_size=8,
                        hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                        head_zero_init=False)


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
    return {fmt: _encode(rgb, fmt) for fmt in ("JPEG", "PNG", "WEBP")}


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    root = tmp_path_factory.mktemp("exports")
    path = saved_model.export_model(model, str(root), class_names=NAMES,
                                    top_k=2)
    return root, path, tf.saved_model.load(path)


def _reference(model, datas):
    batch = np.stack([preprocessing.preprocess_eval(
        preprocessing.decode_image(tf.constant(d)), SIZE).numpy()
        for d in datas])
    return tf.nn.softmax(model(batch)).numpy()


def _serve(loaded, datas):
    return loaded.signatures["serving_default"](
        image_bytes=tf.constant(datas, dtype=tf.string))


@pytest.mark.parametrize("bad, message", [
    (b"", r"image_bytes\[2\]: Empty image"),
    (b"GIF89a\x01\x00", r"image_bytes\[2\]: Invalid GIF data"),
    (b"not an image at all \x00\x01", r"image_bytes\[2\]: Unknown image "
     r"file format: send JPEG, PNG, GIF, BMP or WebP"),
    ("truncated_jpeg", r"image_bytes\[2\]: Invalid JPEG data"),
    ("base64", r"image_bytes\[2\]: image_bytes looks like base64 text"),
    # Shorter than the signatures' offsets (a WebP's is 8): still named.
    (b"\x00\x01", r"image_bytes\[2\]: Unknown image file format: send JPEG, "
     r"PNG, GIF, BMP or WebP"),
    ("jxl", r"image_bytes\[2\]: Unknown image file format: send JPEG, PNG, "
     r"GIF, BMP or WebP \(told by the first bytes of the file; JPEG XL"),
])
def test_bad_image_of_a_batch_is_named_by_index(exported, images, bad,
                                                message):
    jpeg = images["JPEG"]
    bad = {"truncated_jpeg": jpeg[: len(jpeg) // 2],
           "base64": base64.b64encode(jpeg), "jxl": JXL}.get(bad, bad)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        _serve(exported[2], [jpeg, images["PNG"], bad, jpeg])


# A JPEG XL codestream of 40 x 56 pixels (29 bytes), which TensorFlow's
# decode_image reads; and the start of a JPEG XL container, whose header
# is enough for the check.
JXL = (b"\xff\n\t\x0c\x88\x04\x08\x04\x01\x00D\x00K\x18\x8b\x15\x80]\xfe"
       b"\xff\x00bL\x83\x01\x00R5$")
JXL_CONTAINER = b"\x00\x00\x00\x0cJXL \r\n\x87\n" + bytes(20)


@covers("unsupported_image_format")
def test_jpeg_xl_is_refused_by_its_first_bytes_unread(exported, images):
    """TensorFlow's decoder reads JPEG XL, whose size no header check
    reads: a JPEG XL file is refused by its first bytes, by the assertion
    the decoder waits on, so the decoder never runs (its own message,
    which lists JPEG XL among its formats, never shows); alone, in a
    batch (by index), and where training and keras-vit-predict decode."""
    assert tf.io.decode_image(
        JXL, expand_animations=False).shape == (40, 56, 3)
    for data in (JXL, JXL_CONTAINER):
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            _serve(exported[2], [data])
        check_error("unsupported_image_format", info.value)
        assert "JPEG, JPEG XL, PNG" not in str(info.value)
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"image_bytes\[1\]: Unknown image file "
                           "format: send JPEG"):
            _serve(exported[2], [images["PNG"], data])
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            preprocessing.decode_image(tf.constant(data))
        check_error("unsupported_image_format", info.value)


@covers("serve_request_pixel_budget")
def test_a_request_over_its_pixel_budget_is_refused_unread(exported):
    """Five images, each within the limit of one, that declare more than
    MAX_REQUEST_PIXELS together: refused whole from their headers, before
    any is decoded (the memory is never taken); four of them would be
    within it."""
    bomb = _png_bomb(11000)
    assert 11000 ** 2 <= image_headers.MAX_PIXELS
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        _serve(exported[2], [bomb] * 5)
    check_error("serve_request_pixel_budget", info.value)
    assert f"more than {request_checks.MAX_REQUEST_PIXELS:,}" in str(
        info.value)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < (
        200 * 1024)  # KiB: not the 363 MB a decoded one takes
    assert 4 * 11000 ** 2 <= request_checks.MAX_REQUEST_PIXELS


def test_the_client_script_explains_every_argument():
    """scripts/serving_client.py --help: a sentence for each argument."""
    parser = _client().build_parser()
    actions = [a for a in parser._actions if a.dest != "help"]
    assert {a.dest for a in actions} == {"rest", "grpc", "model",
                                         "signature", "images"}
    assert all(a.help and len(a.help) > 15 for a in actions), [
        a.dest for a in actions if not a.help]
    assert all("%(default)s" in a.help for a in actions if a.default)


def test_clients_of_the_project_cut_requests_within_the_budget():
    """keras-vit-predict, the export's check and its warm-up send large
    photos a few at a time: each request within MAX_REQUEST_PIXELS (five
    images of 11000 x 11000 in 32 per request were refused whole), at most
    `max_count` images, in order; unreadable headers count nothing."""
    bomb, small = _png_bomb(11000), _png_bomb(10)
    parts = request_checks.requests_within_budget(
        [small, bomb, bomb, bomb, bomb, bomb, small, b"junk"], 32)
    assert [len(p) for p in parts] == [5, 3]
    assert sum(parts, []) == [small, bomb, bomb, bomb, bomb, bomb, small,
                              b"junk"]
    assert [len(p) for p in request_checks.requests_within_budget(
        [small] * 70, 32)] == [32, 32, 6]


def test_a_batch_is_decoded_a_fixed_few_images_at_a_time(exported):
    """The tf.data passes over a batch's images run DECODE_PARALLEL at a
    time, not tf.data.AUTOTUNE's one per core: a request's peak memory is
    a few decoded images on any server."""
    graph_def = exported[2].signatures["serving_default"].graph.as_graph_def()
    found = []
    for function in graph_def.library.function:
        consts = {node.name: node for node in function.node_def
                  if node.op == "Const"}
        for node in function.node_def:
            if node.op.startswith("ParallelMapDataset"):
                parallel = consts[node.input[-1].split(":")[0]]
                found.append(tf.make_ndarray(parallel.attr["value"].tensor))
    assert found and all(int(n) == request_checks.DECODE_PARALLEL
                         for n in found), found


def _png_bomb(side: int, rows: int = 8) -> bytes:
    """A valid PNG header declaring side x side RGB pixels, with only a few
    rows of compressed zeros: a few kilobytes."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    row = b"\0" * (1 + 3 * side)
    deflate = zlib.compressobj(9)
    idat = b"".join(deflate.compress(row) for _ in range(rows))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0,
                                         0))
            + chunk(b"IDAT", idat + deflate.flush()) + chunk(b"IEND", b""))


def _gif_bomb(side, frames):
    """An animated GIF of `frames` copies of one `side` x `side` frame of
    one colour: some kilobytes a frame, decoded all at once."""
    buffer = io.BytesIO()
    Image.new("P", (side, side), 0).save(buffer, "GIF")
    data = buffer.getvalue()
    at = data.index(b"\x2c\0\0\0\0" + struct.pack("<HH", side, side))
    return data[:-1] + data[at:-1] * (frames - 1) + b";"


def _jpeg_bomb(side):
    """A JPEG of 16 x 16 pixels whose frame header says `side` x `side`."""
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (9, 99, 199)).save(buffer, "JPEG")
    data = bytearray(buffer.getvalue())
    at = data.index(b"\xff\xc0")
    data[at + 5:at + 9] = struct.pack(">HH", side, side)
    return bytes(data)


@covers("serve_decompression_bomb")
def test_an_image_that_declares_too_many_pixels_is_refused_unread(
        exported, images):
    """A decompression bomb: some kilobytes that declare 20,000 x 20,000
    pixels (6.4 GB as float32 once decoded) are refused from the header,
    alone and in a batch, without the memory; so is an animated GIF of
    160 frames of 4096 x 4096 (2 MB; 2.7 GB of frames read), each frame
    within the limit, and a JPEG that declares 20,000 x 20,000 (with
    its own reason in a batch, not the decoder's); so is a palette BMP, by
    its own reason in a batch too."""
    bomb, gif = _png_bomb(20000), _gif_bomb(4096, 160)
    assert len(bomb) < 20000 and len(gif) < 2_500_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for datas, index in (([bomb], 0), ([images["PNG"], bomb], 1),
                         ([gif], 0), ([images["PNG"], gif], 1),
                         ([images["PNG"], _jpeg_bomb(20000)], 1)):
        with pytest.raises(tf.errors.InvalidArgumentError, match=(
                rf"image_bytes\[{index}\]: " if len(datas) > 1 else "")
                + "The header of the image file declares more than "
                "134,217,728 pixels") as info:
            _serve(exported[2], datas)
        check_error("serve_decompression_bomb", info.value)
    # Training's Inception crop decodes a JPEG inside its window only
    # (from a TFDS data set, with no start-up check): the same limit.
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="declares more than 134,217,728 pixels"):
        preprocessing.preprocess_pretrain_encoded(
            tf.constant(_jpeg_bomb(12000)), 16)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < 500 * 1024  # KiB: not the gigabytes of a decode
    palette = io.BytesIO()
    Image.new("P", (20, 20), 3).save(palette, "BMP")
    with pytest.raises(tf.errors.InvalidArgumentError, match=(
            r"image_bytes\[1\]: A BMP with a colour table")):
        _serve(exported[2], [images["PNG"], palette.getvalue()])
    # An animated WebP, which TensorFlow's decoder reads by corrupting the
    # process's memory (TF Serving's), alone and in a batch.
    frames = [Image.new("RGB", (20, 20), c) for c in ("red", "blue")]
    animated = io.BytesIO()
    frames[0].save(animated, "WEBP", save_all=True, append_images=frames[1:])
    for datas, index in (([animated.getvalue()], 0),
                         ([images["PNG"], animated.getvalue()], 1)):
        with pytest.raises(tf.errors.InvalidArgumentError, match=(
                rf"image_bytes\[{index}\]: " if len(datas) > 1 else "")
                + "An animated WebP"):
            _serve(exported[2], datas)


def test_an_empty_batch_gets_empty_answers(exported):
    for name in ("serving_default", "features"):
        out = exported[2].signatures[name](
            image_bytes=tf.constant([], tf.string))
        assert all(v.shape[0] == 0 for v in out.values()), name


def test_webp_is_served(exported, model, images):
    datas = [images["WEBP"], images["PNG"]]
    np.testing.assert_allclose(
        _serve(exported[2], datas)["probabilities"].numpy(),
        _reference(model, datas), atol=1e-5)


def test_unit_range_pixels_are_refused(exported):
    sig = exported[2].signatures["predict_images"]
    scaled = np.random.default_rng(1).uniform(0, 1, (2, SIZE, SIZE, 3))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"images scaled to \[0, 1\]. Send the unscaled "
                       r"pixels in \[0, 255\]"):
        sig(images=tf.constant(scaled, tf.float32))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"pixel values in \[0, 255\]"):
        sig(images=tf.constant(scaled * 2 - 1, tf.float32))
    # One scaled image beside an unscaled one: refused, named by index.
    mixed = np.stack([scaled[0] * 255.0, scaled[1]])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"(?s)images scaled to \[0, 1\].*Images \(by "
                       r"index in the batch\):.*\[1\]"):
        sig(images=tf.constant(mixed, tf.float32))
    # A black image, or one of zeros and ones, is a real [0, 255] image.
    for value in (0.0, 1.0):
        out = sig(images=tf.fill((1, SIZE, SIZE, 3), value))
        assert out["probabilities"].shape == (1, 3)


def test_batching_file_and_input_docs(exported, model):
    root, path, _ = exported
    batching = root / saved_model.BATCHING_FILE
    text = batching.read_text()
    assert "max_batch_size { value: 32 }" in text
    assert "batch_timeout_micros { value: 5000 }" in text
    batching.write_text("max_batch_size { value: 8 }\n")
    saved_model.export_model(model, str(root), class_names=NAMES,
                             verify=False, warmup_images=[])
    assert batching.read_text() == "max_batch_size { value: 8 }\n"  # kept
    with open(os.path.join(path, "assets.extra", "export.json")) as f:
        inputs = json.load(f)["inputs"]
    assert "[0, 255] (not [0, 1], not [-1, 1])" in inputs["predict_images"]
    assert "WebP" in inputs["serving_default"]


def test_rest_and_grpc_client_requests(exported, model, images):
    client = _client()
    loaded = exported[2]
    datas = [images["JPEG"], images["WEBP"]]
    want = _reference(model, datas)
    body = json.loads(json.dumps(client.rest_request(datas)))
    sent = [base64.b64decode(i["b64"]) for i in body["instances"]]
    np.testing.assert_allclose(
        _serve(loaded, sent)["probabilities"].numpy(), want, atol=1e-5)
    request = client.grpc_request("vit", datas)
    assert request.model_spec.signature_name == "serving_default"
    inputs = export_files.request_inputs(request)
    out = loaded.signatures["serving_default"](
        **{k: tf.constant(v) for k, v in inputs.items()})
    np.testing.assert_allclose(out["probabilities"].numpy(), want, atol=1e-5)
    answer = {k: v.numpy()[0] for k, v in out.items()}
    top = NAMES[int(np.argmax(want[0]))]
    assert client.describe(answer).startswith(top + " ")


@pytest.mark.parametrize("signature", ["serving_default", "features",
                                       "predict_images"])
def test_rest_and_grpc_requests_of_every_signature(exported, images,
                                                   signature):
    """The client's REST body and gRPC request of each signature the
    export has, run on that signature: the same answer as the image
    files sent to serving_default / features."""
    client = _client()
    assert set(client.INPUTS) == set(graph.SIGNATURES)
    loaded = exported[2]
    datas = [images["PNG"], images["PNG"]]
    fn = loaded.signatures[signature]
    reference = loaded.signatures[
        "features" if signature == "features" else "serving_default"](
        image_bytes=tf.constant(datas))
    key = "features" if signature == "features" else "probabilities"
    body = json.loads(json.dumps(client.rest_request(datas, signature)))
    assert body["signature_name"] == signature
    if client.INPUTS[signature] == "images":
        rest_inputs = {"images": tf.constant(body["instances"], tf.float32)}
    else:
        rest_inputs = {"image_bytes": tf.constant(
            [base64.b64decode(i["b64"]) for i in body["instances"]])}
    request = client.grpc_request("vit", datas, signature)
    assert request.model_spec.signature_name == signature
    grpc_inputs = export_files.request_inputs(request)
    assert list(grpc_inputs) == [client.INPUTS[signature]]
    for inputs in (rest_inputs, {k: tf.constant(v)
                                 for k, v in grpc_inputs.items()}):
        np.testing.assert_allclose(fn(**inputs)[key].numpy(),
                                   reference[key].numpy(), atol=1e-5)
    if signature == "features":
        answer = {"features": reference[key].numpy()[0]}
        assert client.describe(answer).startswith("features [16]: ")


def test_rollout_titles_name_the_classes(model, tmp_path):
    pixels = np.random.default_rng(2).uniform(-1, 1, (2, SIZE, SIZE, 3))
    data = run_analysis(model, pixels.astype(np.float32), str(tmp_path),
                        class_names=NAMES)
    for entry in data["images"]:
        assert entry["predicted_name"] == NAMES[entry["predicted_class"]]
    assert os.path.exists(tmp_path / "attention_rollout.png")


def test_the_client_shows_the_servers_refusal_in_one_line(images, capsys):
    """A REST server that answers 400 (as TF Serving does for a bad image)
    and a closed port: one line each, the server's own words, no
    traceback; a palette BMP is refused before predict_images sends its
    grey indices as pixels."""
    import http.server
    import threading

    class Refusing(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            del args

        def do_POST(self):  # noqa: N802 (the handler's name)
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"error": "image_bytes[1]: Invalid JPEG "
                                        "data"}).encode()
            self.send_response(400)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.HTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    client = _client()
    try:
        with pytest.raises(SystemExit, match=(
                rf"error: {url} answered 400: image_bytes\[1\]: Invalid JPEG "
                "data")):
            client.rest_predict(url, "vit", [images["JPEG"], b"\xff\xd8"])
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(SystemExit, match=f"error: cannot reach {url}"):
        client.rest_predict(url, "vit", [images["JPEG"]], timeout=5)
    # predict_images decodes on the client: a file it cannot decode, or
    # whose header declares more pixels than the export reads, is named
    # in one line (it was TensorFlow's traceback, naming no file).
    import zlib

    header = (40000).to_bytes(4, "big") * 2 + bytes([8, 2, 0, 0, 0])
    huge = (b"\x89PNG\r\n\x1a\n" + (13).to_bytes(4, "big") + b"IHDR"
            + header + zlib.crc32(b"IHDR" + header).to_bytes(4, "big"))
    for data, says in (
            (images["JPEG"][:200], r"error: b\.jpg cannot be decoded \("
             r"[^{}\[]*\): check the file, or send it as it is "
             r"\(serving_default\)\.$"),
            (b"not an image", "error: b.jpg: Unknown image file format"),
            (huge, "error: b.jpg: The header of the image file declares "
             "more than 134,217,728 pixels")):
        with pytest.raises(SystemExit, match=says):
            client.rest_request([images["JPEG"], data], "predict_images",
                                names=["a.jpg", "b.jpg"])
    with pytest.raises(SystemExit, match="error: image 1: Unknown image"):
        client.pixels([b"not an image"])
    palette = io.BytesIO()
    Image.new("P", (20, 20), 3).save(palette, "BMP")
    with pytest.raises(SystemExit, match="A BMP with a colour table"):
        client.rest_request([palette.getvalue()], "predict_images")
    # An animated WebP never reaches TensorFlow's decoder in the client.
    frames = [Image.new("RGB", (20, 20), c) for c in ("red", "blue")]
    animated = io.BytesIO()
    frames[0].save(animated, "WEBP", save_all=True, append_images=frames[1:])
    with pytest.raises(SystemExit, match="An animated WebP, which "
                       "TensorFlow's decoder cannot read"):
        client.rest_request([images["PNG"], animated.getvalue()],
                            "predict_images")


@pytest.mark.slow
def test_the_client_script_is_quiet_and_names_its_errors(tmp_path):
    """scripts/serving_client.py as the docs show it: TensorFlow loads
    without its start-up notices (gRPC, predict_images); a server that
    does not answer and a missing image are one line each."""
    import socket
    import subprocess
    import sys

    image = tmp_path / "x.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(image)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = os.path.join(ROOT, "scripts", "serving_client.py")
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    for args, says in (
            (["--grpc", f"127.0.0.1:{port}", "--signature",
              "predict_images", str(image)], "answered UNAVAILABLE"),
            (["--rest", f"http://127.0.0.1:{port}", str(tmp_path / "no.png")],
             f"error: cannot read {tmp_path / 'no.png'}: No such file")):
        result = subprocess.run([sys.executable, script, *args], env=env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 1, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0], result.stderr

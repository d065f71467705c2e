"""SavedModel export for TF Serving: signatures, numerics, layout, failures.

References are computed independently of the export graph: images decoded
and preprocessed eagerly with `keras_vit.data.preprocessing`, then the Keras
model called on them.
"""

import base64
import io
import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit import create_model, features_model
from keras_vit.build import dtype_policy
from keras_vit.data import preprocessing
from keras_vit.errors import UsageError
from keras_vit.export import files as export_files
from keras_vit.export import saved_model as export_lib
from keras_vit.export import server_config
from keras_vit.export import versions as export_versions
from keras_vit.export.saved_model import export_model
from tests.strategies import two_cpu_mirrored

SIZE = 32
NUM_CLASSES = 5
TOP_K = 3
NAMES = ["cat", "dog", "bird", "fish", "frog"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def saved_model_cli(*args):
    """Runs TensorFlow's saved_model_cli (the installed script if any)."""
    script = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    if os.path.exists(script):
        command = [script]
    else:
        command = [sys.executable, "-m",
                   "tensorflow.python.tools.saved_model_cli"]
    return subprocess.run(command + list(args), capture_output=True,
                          text=True, check=True)


def tiny_model(seed=0, representation_size=16):
    keras.utils.set_random_seed(seed)
    return create_model(
        None,
        num_classes=NUM_CLASSES,
        image_size=SIZE,
        patch_size=8,
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        mlp_dim=64,
        representation_size=representation_size,
        head_zero_init=False,
    )


def encode(array, fmt):
    if fmt == "jpeg":
        return tf.io.encode_jpeg(array, quality=85).numpy()
    if fmt == "png":
        return tf.io.encode_png(array).numpy()
    buffer = io.BytesIO()
    Image.fromarray(np.squeeze(array)).save(buffer, format=fmt.upper())
    return buffer.getvalue()


def make_images():
    """{name: encoded bytes}. Test images in every supported format."""
    rng = np.random.RandomState(1)
    rgb = rng.randint(0, 256, (45, 60, 3), dtype=np.uint8)
    return {
        "jpeg": encode(rgb, "jpeg"),
        "png": encode(rng.randint(0, 256, (33, 21, 3), dtype=np.uint8),
                      "png"),
        "png_gray": encode(rng.randint(0, 256, (40, 40, 1), dtype=np.uint8),
                           "png"),
        "png_rgba": encode(rng.randint(0, 256, (30, 50, 4), dtype=np.uint8),
                           "png"),
        "gif": encode(rng.randint(0, 256, (28, 36, 3), dtype=np.uint8),
                      "gif"),
        "bmp": encode(rng.randint(0, 256, (25, 31, 3), dtype=np.uint8),
                      "bmp"),
    }


@pytest.fixture(scope="module")
def images():
    return make_images()


def preprocess_eagerly(data, resize_size=None, keep_aspect=False):
    image = preprocessing.decode_image(tf.constant(data))
    return preprocessing.preprocess_eval(image, SIZE, resize_size,
                                         keep_aspect).numpy()


def reference(model, datas, resize_size=None, keep_aspect=False):
    batch = np.stack([preprocess_eagerly(d, resize_size, keep_aspect)
                      for d in datas])
    logits = keras.ops.convert_to_numpy(model(batch, training=False))
    return tf.nn.softmax(logits.astype(np.float32)).numpy()


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    export_dir = str(tmp_path_factory.mktemp("exports"))
    path = export_model(
        model, export_dir, class_names=NAMES, top_k=TOP_K
    )
    return export_dir, path


@pytest.fixture(scope="module")
def loaded(exported):
    return tf.saved_model.load(exported[1])


def serve(loaded, datas):
    return {
        k: v.numpy()
        for k, v in loaded.signatures["serving_default"](
            image_bytes=tf.constant(list(datas), dtype=tf.string)
        ).items()
    }


def test_layout(exported):
    export_dir, path = exported
    assert path == os.path.join(export_dir, "vit", "1")
    assert sorted(os.listdir(os.path.join(export_dir, "vit"))) == ["1"]
    for name in ("saved_model.pb", "variables/variables.index",
                 "assets/labels.txt",
                 "assets.extra/tf_serving_warmup_requests"):
        assert os.path.isfile(os.path.join(path, name)), name
    with open(os.path.join(path, "assets", "labels.txt")) as f:
        assert f.read().splitlines() == NAMES
    config = server_config.read_models_config(
        os.path.join(export_dir, "models.config"))
    entries = config.model_config_list.config
    assert [(e.name, e.base_path, e.model_platform) for e in entries] == [
        ("vit", os.path.join(export_dir, "vit"), "tensorflow")]


def _parse_cli_show(text):
    """{signature: {"inputs"/"outputs": {key: (dtype, shape)}}}."""
    signatures = {}
    blocks = re.split(r"signature_def\['([^']+)'\]:", text)
    for name, body in zip(blocks[1::2], blocks[2::2]):
        entry = {"inputs": {}, "outputs": {}}
        for kind, key, dtype, shape in re.findall(
            r"(inputs|outputs)\['([^']+)'\] tensor_info:\s*dtype: (\w+)\s*"
            r"shape: (\([^)]*\))", body):
            entry[kind][key] = (dtype, shape)
        signatures[name] = entry
    return signatures


@pytest.mark.slow
def test_saved_model_cli_show(exported):
    result = saved_model_cli("show", "--dir", exported[1], "--all")
    sigs = _parse_cli_show(result.stdout)
    outputs = {
        "probabilities": ("DT_FLOAT", f"(-1, {NUM_CLASSES})"),
        "classes": ("DT_INT32", f"(-1, {TOP_K})"),
        "scores": ("DT_FLOAT", f"(-1, {TOP_K})"),
        "class_names": ("DT_STRING", f"(-1, {TOP_K})"),
    }
    assert sigs["serving_default"] == {
        "inputs": {"image_bytes": ("DT_STRING", "(-1)")}, "outputs": outputs}
    assert sigs["predict_images"] == {
        "inputs": {"images": ("DT_FLOAT", "(-1, -1, -1, 3)")},
        "outputs": outputs}
    assert sigs["features"] == {
        "inputs": {"image_bytes": ("DT_STRING", "(-1)")},
        "outputs": {"features": ("DT_FLOAT", "(-1, 16)")}}


@pytest.mark.slow
def test_saved_model_cli_run_matches_keras(exported, model, images,
                                           tmp_path):
    datas = [images["jpeg"], images["png"]]
    inputs = tmp_path / "bytes.npy"
    np.save(inputs, np.array(datas, dtype=object), allow_pickle=True)
    outdir = tmp_path / "out"
    saved_model_cli(
        "run", "--dir", exported[1], "--tag_set", "serve",
        "--signature_def", "serving_default",
        "--inputs", f"image_bytes={inputs}", "--outdir", str(outdir))
    got = np.load(outdir / "probabilities.npy")
    np.testing.assert_allclose(got, reference(model, datas), atol=1e-5)
    np.testing.assert_array_equal(
        np.load(outdir / "classes.npy"), np.argsort(-got, axis=1)[:, :TOP_K])


def test_all_formats_match_keras(loaded, model, images):
    datas = list(images.values())
    out = serve(loaded, datas)
    want = reference(model, datas)
    np.testing.assert_allclose(out["probabilities"], want, atol=1e-5)
    top = np.argsort(-want, axis=1)[:, :TOP_K]
    np.testing.assert_array_equal(out["classes"], top)
    np.testing.assert_allclose(
        out["scores"], np.take_along_axis(want, top, axis=1), atol=1e-5)
    assert out["class_names"].tolist() == [
        [NAMES[i].encode() for i in row] for row in top]


def test_features_match_keras(loaded, model, images):
    datas = [images["jpeg"], images["png_rgba"]]
    got = loaded.signatures["features"](
        image_bytes=tf.constant(datas))["features"].numpy()
    batch = np.stack([preprocess_eagerly(d) for d in datas])
    want = keras.ops.convert_to_numpy(features_model(model)(batch))
    assert got.shape == (2, 16)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_predict_images_matches_bytes_and_keras(loaded, model, images):
    decoded = preprocessing.decode_image(tf.constant(images["jpeg"]))
    pixels = tf.cast(decoded, tf.float32)[None]
    got = loaded.signatures["predict_images"](images=pixels)
    np.testing.assert_allclose(
        got["probabilities"].numpy(),
        serve(loaded, [images["jpeg"]])["probabilities"], atol=1e-6)
    # Any size, float values: resized in the graph like evaluation.
    rng = np.random.RandomState(3)
    pixels = rng.uniform(0, 255, (2, 50, 19, 3)).astype(np.float32)
    want = tf.nn.softmax(model(np.stack([
        preprocessing.preprocess_eval(tf.constant(p), SIZE).numpy()
        for p in pixels
    ]))).numpy()
    np.testing.assert_allclose(
        loaded.predict_images(tf.constant(pixels))["probabilities"].numpy(),
        want, atol=1e-5)


def test_rest_b64_request(loaded, model, images):
    datas = [images["jpeg"], images["png"]]
    body = json.dumps({"instances": [
        {"b64": base64.b64encode(d).decode("ascii")} for d in datas]})
    # What TF Serving's REST layer does with {"b64": ...} on a string input.
    request = json.loads(body)
    received = [base64.b64decode(i["b64"]) for i in request["instances"]]
    assert received == datas
    out = serve(loaded, received)
    np.testing.assert_allclose(
        out["probabilities"], reference(model, datas), atol=1e-5)
    # The answer serialises as the REST "predictions" JSON.
    json.dumps({"predictions": [
        {k: (v[i].astype(str) if v.dtype == object else v[i]).tolist()
         for k, v in out.items()} for i in range(len(datas))]})


@pytest.mark.parametrize("case, message", [
    ("garbage", "Unknown image file format"),
    ("empty", "Empty image"),
    ("truncated_jpeg", "Invalid JPEG data"),
    ("truncated_png", "PNG"),
    ("base64_text", "looks like base64 text"),
])
def test_bad_bytes_clear_error_then_recovers(loaded, model, images, case,
                                            message):
    jpeg = images["jpeg"]
    bad = {
        "garbage": b"this is not an image \x00\x01\x02",
        "empty": b"",
        "truncated_jpeg": jpeg[: len(jpeg) // 2],
        "truncated_png": images["png"][: len(images["png"]) // 2],
        "base64_text": base64.b64encode(jpeg),
    }[case]
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        serve(loaded, [jpeg, bad])
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        loaded.signatures["features"](image_bytes=tf.constant([bad]))
    np.testing.assert_allclose(
        serve(loaded, [jpeg])["probabilities"], reference(model, [jpeg]),
        atol=1e-5)


def test_predict_images_wrong_dtype_rank_range(loaded, images):
    sig = loaded.signatures["predict_images"]
    ints = tf.zeros((1, 20, 20, 3), tf.int32)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="expected to be a float tensor"):
        sig(images=ints)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="expected to be a float tensor"):
        loaded.predict_images(ints)
    for shape in [(20, 20, 3), (1, 20, 20, 4), (1, 1, 20, 20, 3)]:
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"not compatible with expected shape "
                                 r"\[\?,\?,\?,3\]"):
            sig(images=tf.zeros(shape))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"pixel values in \[0, 255\]"):
        sig(images=tf.fill((1, 20, 20, 3), -1.0))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="zero height or width"):
        sig(images=tf.zeros((1, 0, 20, 3)))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"expected shape \[\?\]"):
        loaded.signatures["serving_default"](
            image_bytes=tf.constant([[images["jpeg"]]]))
    out = sig(images=tf.fill((1, 20, 20, 3), 255.0))
    assert out["probabilities"].shape == (1, NUM_CLASSES)
    # numpy's float64 (its default) and Python floats are taken as float32.
    for pixels in (np.full((1, 20, 20, 3), 255.0), [[[[255.0] * 3] * 20] * 20]):
        np.testing.assert_allclose(
            loaded.predict_images(pixels)["probabilities"],
            out["probabilities"], atol=1e-6)


def test_warmup_file_replays(exported, loaded):
    path = os.path.join(exported[1], "assets.extra",
                        export_files.WARMUP_FILE)
    logs = export_files.read_warmup_file(path)
    assert 0 < len(logs) <= export_files.MAX_WARMUP_RECORDS
    seen_formats, seen_signatures = set(), set()
    for log in logs:
        request = log.predict_log.request
        assert request.model_spec.name == "vit"
        seen_signatures.add(request.model_spec.signature_name)
        inputs = export_files.request_inputs(request)
        for data in inputs.get("image_bytes", []):
            seen_formats.add({b"\xff\xd8": "jpeg", b"\x89P": "png"}[data[:2]])
        out = loaded.signatures[request.model_spec.signature_name](
            **{k: tf.constant(v) for k, v in inputs.items()})
        batch = next(iter(inputs.values())).shape[0]
        assert all(v.shape[0] == batch for v in out.values())
    assert seen_formats == {"jpeg", "png"}
    assert seen_signatures == {"serving_default", "predict_images",
                               "features"}


def test_a_nearly_black_warmup_image_replays(loaded):
    """A warm-up photo whose pixels are at most 1: its predict_images
    request holds the resized pixels as whole values, which the
    signature takes (fractions in [0, 1] it refuses as pixels scaled to
    [0, 1], and a refused warm-up request fails the model's load)."""
    dark = np.zeros((37, 53, 3), np.uint8)
    dark[::5, ::7] = 1
    data = tf.io.encode_png(dark).numpy()
    requests = export_files.warmup_requests("vit", [data], (SIZE, SIZE))
    [pixels] = [export_files.request_inputs(r)["images"] for r in requests
                if r.model_spec.signature_name == "predict_images"]
    assert pixels.max() == 1.0 and np.array_equal(pixels, np.round(pixels))
    for request in requests:
        inputs = export_files.request_inputs(request)
        out = loaded.signatures[request.model_spec.signature_name](
            **{k: tf.constant(v) for k, v in inputs.items()})
        assert all(v.shape[0] == 1 for v in out.values())


def test_warmup_batches_fit_the_batching_file(images, tmp_path):
    """TF Serving replays warm-up through its batching, which refuses a
    request of more than max_batch_size images and then fails the model's
    load: the images are batched in requests of at most MAX_BATCH_SIZE,
    the max_batch_size the batching file is written with, and the most
    images allowed still make at most MAX_WARMUP_RECORDS records."""
    batch = export_files.MAX_BATCH_SIZE
    assert f"max_batch_size {{ value: {batch} }}" in (
        export_lib.BATCHING_PARAMETERS)
    count = export_files.max_warmup_images()
    datas = [images["png"], images["jpeg"]] * (count // 2) + [
        images["png_gray"]] * (count % 2)
    requests = export_files.warmup_requests("vit", datas, (SIZE, SIZE),
                                            "predict_any_size")
    assert len(requests) == export_files.MAX_WARMUP_RECORDS
    sizes = [len(export_files.request_inputs(r)["image_bytes"])
             for r in requests if r.model_spec.signature_name
             == "serving_default"]
    assert max(sizes) == batch
    batched = [r for r in requests
               if r.model_spec.signature_name == "serving_default"
               and len(r.inputs["image_bytes"].string_val) > 1]
    assert list(np.concatenate([
        export_files.request_inputs(r)["image_bytes"] for r in batched
    ])) == datas  # every image once, in order
    path = str(tmp_path / export_files.WARMUP_FILE)
    export_files.write_warmup_file(path, requests)
    assert len(export_files.read_warmup_file(path)) == len(requests)
    with pytest.raises(ValueError, match=f"pass at most {count} images"):
        export_files.load_warmup_images([images["png"]] * (count + 1))


def test_tfsm_layer_reload(exported, loaded, model):
    layer = keras.layers.TFSMLayer(exported[1],
                                   call_endpoint="predict_images")
    assert sorted(w.numpy().sum() for w in layer.weights) == pytest.approx(
        sorted(w.numpy().sum() for w in model.weights))
    assert len(loaded.variables) == len(model.weights)
    pixels = np.random.RandomState(4).uniform(
        0, 255, (3, SIZE, SIZE, 3)).astype(np.float32)
    out = layer(pixels)
    want = tf.nn.softmax(model(pixels / 127.5 - 1.0)).numpy()
    np.testing.assert_allclose(out["probabilities"], want, atol=1e-5)
    np.testing.assert_allclose(
        out["scores"],
        loaded.predict_images(tf.constant(pixels))["scores"], atol=1e-6)


@pytest.mark.slow
def test_versions_increment_and_never_overwrite(model, images, tmp_path):
    model_dir = tmp_path / "vit"
    # An existing version, and a crashed export's leftover: a dotted,
    # non-numeric folder that is not a version.
    (model_dir / "3").mkdir(parents=True)
    (model_dir / "3" / "saved_model.pb").write_bytes(b"version 3")
    # One of a process still running (kept: it may be writing), one of a
    # process gone (removed by the next export).
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    running = f".tmp-9-{os.getpid()}"
    (model_dir / running).mkdir()
    (model_dir / f".tmp-8-{gone.pid}").mkdir()
    from keras_vit.storage import leftovers

    (model_dir / f".tmp-6-{leftovers.HOST}-{gone.pid}").mkdir()
    (model_dir / f".tmp-5-other_host-{gone.pid}").mkdir()  # not judged
    running_here = f".tmp-9-{leftovers.writer()}"
    (model_dir / running_here).mkdir()
    assert export_versions.existing_versions(str(model_dir)) == [3]
    path = export_model(model, str(tmp_path), verify=False,
                        warmup_images=[images["png"]])
    assert path == str(model_dir / "4")
    kept = sorted([running, running_here, f".tmp-5-other_host-{gone.pid}"])
    assert sorted(os.listdir(model_dir)) == [*kept, "3", "4"]
    with pytest.raises(FileExistsError, match="already exists"):
        export_model(model, str(tmp_path), version=3)
    assert (model_dir / "3" / "saved_model.pb").read_bytes() == b"version 3"
    path = export_model(model, str(tmp_path), version=7, verify=False,
                        warmup_images=[])
    assert path == str(model_dir / "7")
    assert sorted(os.listdir(model_dir)) == [*kept, "3", "4", "7"]
    assert export_versions.next_version(str(model_dir)) == 8
    # The new versions serve the model.
    np.testing.assert_allclose(
        serve(tf.saved_model.load(path), [images["jpeg"]])["probabilities"],
        reference(model, [images["jpeg"]]), atol=1e-5)


def test_a_version_tf_serving_cannot_read_is_refused(model, tmp_path,
                                                     caplog):
    """TF Serving reads a version folder's name as an int64 and skips one
    it cannot read: a larger --version (a date with nanoseconds) is
    refused before anything is written, and such a folder left by hand
    is no version to count on (the next is not 2**63 + 1)."""
    model_dir = tmp_path / "vit"
    for version in (2**63, 20261204193015123456789):
        with pytest.raises(UsageError, match=r"above 9,223,372,036,854,775,"
                           r"807 \(2\*\*63 - 1\), the largest TF Serving "
                           "reads"):
            export_model(model, str(tmp_path), version=version)
    assert not model_dir.exists()
    (model_dir / str(2**63)).mkdir(parents=True)
    (model_dir / "5").mkdir()
    # Digits of other scripts, which isdigit() takes: no version either.
    (model_dir / "\u00b2").mkdir()
    (model_dir / "\u0663").mkdir()
    assert export_versions.existing_versions(str(model_dir)) == [5]
    assert export_versions.next_version(str(model_dir)) == 6
    path = export_model(model, str(tmp_path), version=2**63 - 1,
                        verify=False, warmup_images=[])
    assert path == str(model_dir / str(2**63 - 1))
    # No version after it: refused, nothing written (it was 2**63,
    # never served, and the export after that looped for good).
    with pytest.raises(UsageError, match="holds version 9,223,372,036,854,"
                       "775,807, the largest TF Serving reads"):
        export_model(model, str(tmp_path), verify=False, warmup_images=[])
    assert sorted(os.listdir(model_dir)) == sorted(
        ["5", "\u00b2", "\u0663", str(2**63), str(2**63 - 1)])
    # A version below the newest is published, and said not to be served.
    caplog.set_level("WARNING", logger="absl")
    export_model(model, str(tmp_path), version=3, verify=False,
                 warmup_images=[])
    assert (model_dir / "3" / "saved_model.pb").exists()
    assert f"Version 3 is below the newest in {model_dir}, {2**63 - 1}: " \
        "TF Serving's default policy (the latest version) serves" in \
        caplog.text


def test_models_config_updated_not_clobbered(model, tmp_path):
    export_dir = str(tmp_path)
    config_path = tmp_path / "models.config"
    config_path.write_text(
        'model_config_list { config { name: "vit" base_path: "/models/vit" '
        'model_platform: "tensorflow" model_version_policy { latest { '
        "num_versions: 2 } } } }\n")
    export_model(model, export_dir, verify=False, warmup_images=[])
    export_model(model, export_dir, model_name="vit_small", verify=False,
                 warmup_images=[], serving_base_dir="/models")
    entries = server_config.read_models_config(
        str(config_path)).model_config_list.config
    assert [(e.name, e.base_path) for e in entries] == [
        ("vit", "/models/vit"), ("vit_small", "/models/vit_small")]
    assert entries[0].model_version_policy.latest.num_versions == 2
    # Comments written by hand: kept where the entry is already there (the
    # file is not rewritten); a new entry rewrites it, the old one in .bak.
    commented = ("# production models, by ops\n"
                 + config_path.read_text().replace(
                     'name: "vit"', 'name: "vit"  # canary', 1))
    config_path.write_text(commented)
    export_model(model, export_dir, verify=False, warmup_images=[])
    assert config_path.read_text() == commented
    assert not (tmp_path / "models.config.bak").exists()
    export_model(model, export_dir, model_name="vit_tiny", verify=False,
                 warmup_images=[])
    assert (tmp_path / "models.config.bak").read_text() == commented
    assert [e.name for e in server_config.read_models_config(
        str(config_path)).model_config_list.config] == [
            "vit", "vit_small", "vit_tiny"]
    # A .bak of other text (the one before, or the user's own) is never
    # overwritten: the next copy goes to .bak.1; one of the same text is
    # not written twice. Before, the user's .bak was replaced.
    recommented = "# again\n" + config_path.read_text()
    for name in ("vit_b", "vit_c"):
        config_path.write_text(recommented)
        export_model(model, export_dir, model_name=name, verify=False,
                     warmup_images=[])
        assert (tmp_path / "models.config.bak").read_text() == commented
        assert (tmp_path / "models.config.bak.1").read_text() == recommented
    assert not (tmp_path / "models.config.bak.2").exists()
    # Only the names of those copies are refused as model names.
    assert export_files.check_model_name("models.config.backup")
    with pytest.raises(UsageError, match="the name of a file the export"):
        export_files.check_model_name("models.config.bak.7")
    config_path.write_text("model_config_list { config { name: ")
    with pytest.raises(ValueError, match="not a valid TF Serving model"):
        export_model(model, export_dir, verify=False)
    assert sorted(os.listdir(tmp_path / "vit")) == ["1", "2"]


@pytest.mark.parametrize("stage", [
    pytest.param("write_out", marks=pytest.mark.slow),
    pytest.param("warmup", marks=pytest.mark.slow), "verify"])
def test_crash_leaves_no_version(model, tmp_path, monkeypatch, stage):
    def write_then_crash(servable, filepath):
        os.makedirs(filepath)
        with open(os.path.join(filepath, "saved_model.pb"), "wb") as f:
            f.write(b"partial")
        raise OSError("disk full")

    def crash(*args, **kwargs):
        raise OSError("disk full")

    if stage == "write_out":
        monkeypatch.setattr(export_lib, "_write_saved_model",
                            write_then_crash)
    elif stage == "warmup":
        monkeypatch.setattr(export_files, "write_warmup_file", crash)
    else:
        monkeypatch.setattr(export_lib, "verify_export", crash)
    with pytest.raises(OSError, match="disk full"):
        export_model(model, str(tmp_path))
    # The model's folder, made for the version, goes with it.
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_mixed_bfloat16_model_served_in_float32(images, tmp_path):
    reference_model = tiny_model(seed=2)
    with dtype_policy("bfloat16"):
        bf16_model = tiny_model(seed=3)
    bf16_model.set_weights(reference_model.get_weights())
    assert bf16_model.layers[-2].compute_dtype == "bfloat16"
    datas = [images["jpeg"], images["png"]]
    want = reference(reference_model, datas)
    # Served as trained, bf16 would visibly differ from float32 ...
    assert np.abs(reference(bf16_model, datas) - want).max() > 1e-4
    path = export_model(bf16_model, str(tmp_path), class_names=NAMES)
    loaded = tf.saved_model.load(path)
    # ... the export computes in float32.
    np.testing.assert_allclose(
        serve(loaded, datas)["probabilities"], want, atol=1e-5)
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        assert b"bfloat16" not in f.read().lower()
    assert bf16_model.dtype_policy.name == "mixed_bfloat16"


@pytest.mark.slow
def test_export_after_mirrored_strategy_training(images, tmp_path):
    strategy = two_cpu_mirrored()
    with strategy.scope():
        model = tiny_model(seed=6)
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    rng = np.random.RandomState(0)
    x = rng.uniform(-1, 1, (8, SIZE, SIZE, 3)).astype(np.float32)
    y = rng.randint(0, NUM_CLASSES, (8,))
    before = [w.copy() for w in model.get_weights()]
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert any(np.abs(a - b).max() > 0 for a, b in
               zip(before, model.get_weights()))
    with strategy.scope():
        with pytest.raises(UsageError, match="outside|after leaving"):
            export_model(model, str(tmp_path))
    path = export_model(model, str(tmp_path))
    datas = [images["jpeg"], images["bmp"]]
    np.testing.assert_allclose(
        serve(tf.saved_model.load(path), datas)["probabilities"],
        reference(model, datas), atol=1e-5)


@pytest.mark.parametrize("keep_aspect", [False, True])
def test_resize_size_matches_eval_crop(model, images, tmp_path, keep_aspect):
    """serving_default resizes as evaluation does (both sides, or the
    shorter side keeping the aspect ratio), and predict_images, given the
    same photos' pixels, answers alike. NumPy's ints are ints."""
    path = export_model(model, str(tmp_path), resize_size=np.int64(40),
                        keep_aspect=keep_aspect,
                        warmup_images=[images["png_gray"]])
    datas = [images["jpeg"], images["gif"]]
    loaded = tf.saved_model.load(path)
    served = serve(loaded, datas)["probabilities"]
    np.testing.assert_allclose(
        served, reference(model, datas, 40, keep_aspect), atol=1e-5)
    for data, want in zip(datas, served):
        pixels = preprocessing.decode_image(tf.constant(data))
        got = loaded.signatures["predict_images"](
            images=tf.cast(pixels, tf.float32)[None])["probabilities"]
        np.testing.assert_allclose(got[0], want, atol=1e-5)
    with pytest.raises(ValueError, match="one int"):
        export_model(model, str(tmp_path), resize_size=(40, 48),
                     keep_aspect=True)


def test_argument_errors(model, images, tmp_path):
    d = str(tmp_path)
    with pytest.raises(ValueError, match="5 classes"):
        export_model(model, d, class_names=["a", "b"])
    # A blank name would be a blank line of labels.txt, which readers skip.
    with pytest.raises(ValueError, match=r"class_names\[1\] = ' ': names "
                       r"must be str without newlines, and not blank \(name "
                       r'a class without one by its index, "1"\)'):
        export_model(model, d, class_names=["a", " ", "c", "d", "e"])
    with pytest.raises(ValueError, match="top_k"):
        export_model(model, d, top_k=0)
    with pytest.raises(ValueError, match="model_name"):
        export_model(model, d, model_name="../evil")
    with pytest.raises(ValueError, match="warmup_images\\[1\\]"):
        export_model(model, d, warmup_images=[images["jpeg"], b"junk"])
    features = create_model(None, num_classes=0, image_size=SIZE,
                            patch_size=8, hidden_size=32, num_layers=1,
                            num_heads=2, mlp_dim=64)
    with pytest.raises(ValueError, match="classifier"):
        export_model(features, d)
    assert os.listdir(d) == []


def test_unknown_option_is_refused_by_name(tmp_path):
    # Refused before the model or the folder is looked at.
    with pytest.raises(UsageError, match="unknown option\\(s\\) top_kk; "
                                         "its options are model_name, "):
        export_model(None, str(tmp_path), top_kk=3)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("source, words", [
    ("run", "source must be a dict (export.json records it) or None, not "
     "str."),
    ({"step": float("nan")}, "source must be a JSON object or None"),
    ({"step": object()}, "source must be a JSON object or None"),
])
def test_a_source_export_json_cannot_record_is_refused(tmp_path, source,
                                                       words):
    with pytest.raises(UsageError) as info:
        export_model(None, str(tmp_path), source=source)
    assert words in str(info.value)
    assert os.listdir(tmp_path) == []


def test_missing_serving_api_is_named(model, tmp_path, monkeypatch):
    # None in sys.modules makes the import fail as if not installed.
    monkeypatch.setitem(
        sys.modules, "tensorflow_serving.apis.prediction_log_pb2", None)
    with pytest.raises(ImportError, match="pip install --no-deps "
                                          "tensorflow-serving-api"):
        export_model(model, str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_a_version_is_on_disk_before_it_is_published(model, tmp_path,
                                                     monkeypatch):
    """Every file of the SavedModel (written by TensorFlow, not through
    atomic_write) and every folder of it is fsynced before the rename
    that publishes it, and the model folder after: a power loss cannot
    leave a published version of empty files."""

    events = []
    fsync, rename = os.fsync, tf.io.gfile.rename

    def recorded_fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return fsync(fd)

    def recorded_rename(src, dst, overwrite=False):
        events.append(("rename", dst))
        return rename(src, dst, overwrite)

    monkeypatch.setattr(os, "fsync", recorded_fsync)
    monkeypatch.setattr(tf.io.gfile, "rename", recorded_rename)
    path = export_model(model, str(tmp_path), warmup_images=[])
    published = [i for i, e in enumerate(events) if e == ("rename", path)]
    assert len(published) == 1
    before = {os.path.relpath(p, str(tmp_path / "vit")).split(os.sep, 1)[-1]
              for kind, p in events[:published[0]] if kind == "fsync"}
    written = {os.path.relpath(os.path.join(d, n), path)
               for d, _, names in os.walk(path) for n in names}
    assert written and written <= before, written - before
    model_dir = os.path.dirname(path)
    assert ("fsync", model_dir) in events[published[0]:]
    assert export_versions.existing_versions(model_dir) == [1]

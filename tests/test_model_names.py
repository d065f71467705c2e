"""Models by name: `keras_vit.load_model("ViT-B_16")`, `"hf://ORG/NAME"`,
gs:// addresses, and `keras_vit.list_models()`.

Nothing is downloaded from the internet: a directory served through a
`file://` URL stands in for gs://vit_models ($KERAS_VIT_MODELS_BASE_URL),
the Hugging Face cache is laid out by the test the way huggingface_hub
lays it out, and interrupted or short downloads are simulated by a remote
reader that fails or lies about its size.
"""

import dataclasses
import functools
import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import threading

import huggingface_hub
import keras
import numpy as np
import pytest
from huggingface_hub import constants as hf_constants

import keras_vit
from keras_vit.checkpoint import loader, weights
from keras_vit.checkpoint.zoo import cache, catalog, release
from keras_vit.commands import convert as convert_command
from keras_vit.errors import UsageError
from tests import model_cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HF_FIXTURE = model_cache.HF_FIXTURE
REVISION = model_cache.REVISION


@pytest.fixture(scope="module")
def tiny_npz(tmp_path_factory):
    """A small ViT at 224 (14 x 14 patches of 16) in the official layout."""
    model = keras_vit.create_model(
        None, num_classes=5, image_size=224, patch_size=16, hidden_size=32,
        num_layers=2, num_heads=2, mlp_dim=64, head_zero_init=False,
    )
    path = str(tmp_path_factory.mktemp("npz") / "tiny.npz")
    weights.save_npz(model, path)
    return path


# The tiny file's architecture: what `tiny_release` makes the catalog say
# the released names hold.
TINY = dict(hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64,
            patch_size=16, resnet_layers=None, num_classes=5, grid=14)


@pytest.fixture
def tiny_release(monkeypatch):
    """The tiny file stands in for the released files: the catalog's
    table of what each name holds (`catalog.expected_architecture`) is
    swapped for the tiny architecture, so that the download and cache
    mechanics run on a small file; the check itself still runs.
    tests below check the real table and its refusals."""
    monkeypatch.setattr(catalog, "expected_architecture",
                        lambda info: dict(TINY))


@pytest.fixture
def mirror(tmp_path, monkeypatch, tiny_npz, tiny_release):
    """An empty cache, and a directory standing in for gs://vit_models
    that holds the tiny file as two official names."""
    root = tmp_path / "mirror"
    for name in ("imagenet21k/ViT-B_16.npz",
                 "imagenet21k+imagenet2012/ViT-B_16.npz"):
        os.makedirs(root / os.path.dirname(name), exist_ok=True)
        shutil.copy(tiny_npz, root / name)
    monkeypatch.setenv(catalog.BASE_URL_ENV, f"file://{root}")
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(cache.OFFLINE_ENV, raising=False)
    return root


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no request lines in the test output
        pass


@pytest.fixture
def http_mirror(mirror):
    """The mirror served over HTTP on the loopback: an http(s) mirror is
    read with urllib (TensorFlow's file system has no such scheme)."""
    handler = functools.partial(_QuietHandler, directory=str(mirror))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def _images(size=224, n=2):
    rng = np.random.default_rng(0)
    return rng.uniform(-1, 1, (n, size, size, 3)).astype("float32")


def _logits(model, size=224):
    return np.asarray(model(_images(size)))


def _leftovers(path):
    """Temporary files beside a cached file."""
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        return []
    return [name for name in os.listdir(folder) if ".tmp-" in name]


def test_list_models_names_urls_and_variants(monkeypatch):
    monkeypatch.delenv(catalog.BASE_URL_ENV, raising=False)
    models = keras_vit.list_models()
    names = [m.name for m in models]
    assert len(names) == len(set(names)) == 7 + 8 + 2 + 19
    by_dir = {}
    for m in models:
        by_dir.setdefault(m.name.split("/")[0], []).append(m)
        assert m.url == f"gs://vit_models/{m.name}.npz"
        assert keras_vit.decode_variant(m.variant)  # a known variant
        assert catalog.lookup(m.name) == m
        assert catalog.lookup(m.url) == m
    assert {d: len(v) for d, v in by_dir.items()} == {
        "imagenet21k": 7, "imagenet21k+imagenet2012": 8, "sam": 2,
        "augreg": 19}
    assert {m.image_size for m in by_dir["imagenet21k"]} == {224}
    assert {m.num_classes for m in by_dir["imagenet21k"]} == {21843}
    finetuned = {m.name.split("/")[1]: m.image_size
                 for m in by_dir["imagenet21k+imagenet2012"]}
    assert finetuned["ViT-B_16"] == 384 and finetuned["ViT-B_16-224"] == 224
    assert catalog.lookup("R50+ViT-B_16").variant == "R50+B/16"
    assert catalog.lookup("ViT-H_14.npz").name == "imagenet21k/ViT-H_14"
    # Short names: the ImageNet-21k pre-training, or the only file.
    assert catalog.lookup("ViT-B_16").name == "imagenet21k/ViT-B_16"
    assert catalog.lookup("ViT-L_16-224").name == (
        "imagenet21k+imagenet2012/ViT-L_16-224")
    # Every AugReg file of the index, listed or not, by its name.
    name = ("B_8-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0"
            "--cifar100-steps_2k-lr_0.01-res_224")
    info = catalog.lookup(f"augreg/{name}")
    assert (info.variant, info.image_size, info.num_classes) == (
        "B/8", 224, 100)
    assert info.url == f"gs://vit_models/augreg/{name}.npz"
    augreg = [m for m in by_dir["augreg"] if m.name.endswith("res_384")]
    assert len(augreg) == 9 and {m.num_classes for m in augreg} == {1000}
    assert [m.name for m in keras_vit.list_models("*vit-l_16*")] == [
        "imagenet21k/ViT-L_16", "imagenet21k+imagenet2012/ViT-L_16",
        "imagenet21k+imagenet2012/ViT-L_16-224"]
    monkeypatch.setenv(catalog.BASE_URL_ENV, "https://example.org/vit/")
    assert catalog.lookup("ViT-B_32").url == (
        "https://example.org/vit/imagenet21k/ViT-B_32.npz")
    assert catalog.lookup("ViT-B_99") is None


def test_short_name_from_a_filled_cache_equals_the_file(
    tiny_npz, tmp_path, monkeypatch, tiny_release
):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(cache.OFFLINE_ENV, "1")
    cached = cache.cache_path("imagenet21k/ViT-B_16.npz")
    os.makedirs(os.path.dirname(cached))
    shutil.copy(tiny_npz, cached)
    want = _logits(loader.load_model(loader.NpzSource(tiny_npz)))
    for name in ("ViT-B_16", "imagenet21k/ViT-B_16",
                 "gs://vit_models/imagenet21k/ViT-B_16.npz"):
        assert loader.resolve(name).path == cached
        model = keras_vit.load_model(name)
        assert model.input_shape[1:3] == (224, 224)
        np.testing.assert_array_equal(_logits(model), want)
    # Training initialises from a name as from the file.
    target = keras_vit.create_model(
        None, num_classes=5, image_size=224, patch_size=16, hidden_size=32,
        num_layers=2, num_heads=2, mlp_dim=64)
    loader.initialise(target, "ViT-B_16")
    np.testing.assert_array_equal(_logits(target), want)
    assert loader.describe_source("ViT-B_16").image_size == (224, 224)


def test_download_from_a_mirror_then_from_the_cache(mirror, monkeypatch):
    name = "imagenet21k+imagenet2012/ViT-B_16"
    model = keras_vit.load_model(name)
    cached = cache.cache_path(name + ".npz")
    with open(cached, "rb") as a, open(mirror / (name + ".npz"), "rb") as b:
        assert a.read() == b.read()
    assert not _leftovers(cached)
    # The catalog says 384; the file's own grid (14 x 14 of 16) wins.
    assert model.input_shape[1:3] == (224, 224)

    def no_network(url):
        raise AssertionError(f"read {url} again")

    monkeypatch.setattr(cache, "_open_remote", no_network)
    again = keras_vit.load_model(f"gs://vit_models/{name}.npz")
    np.testing.assert_array_equal(_logits(again), _logits(model))


def test_mirror_as_a_plain_directory(mirror, tmp_path, monkeypatch):
    monkeypatch.setenv(catalog.BASE_URL_ENV, str(mirror))
    source = loader.resolve("ViT-B_16")
    assert source.path == cache.cache_path("imagenet21k/ViT-B_16.npz")
    assert source.image_size == 224
    with open(source.path, "rb") as a, open(
        mirror / "imagenet21k" / "ViT-B_16.npz", "rb"
    ) as b:
        assert a.read() == b.read()


def test_interrupted_download_leaves_nothing_that_loads(mirror, monkeypatch):
    real = cache._open_remote

    class Interrupted:
        def __init__(self, url):
            self.file = real(url)
            self.reads = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def read(self, n):
            self.reads += 1
            if self.reads > 2:
                raise OSError("Connection reset by peer")
            return self.file.read(n)

    monkeypatch.setattr(cache, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(cache, "_open_remote", Interrupted)
    with pytest.raises(UsageError) as error:
        keras_vit.load_model("ViT-B_16")
    message = str(error.value)
    assert "stopped after 8192 of" in message and "\n" not in message
    cached = cache.cache_path("imagenet21k/ViT-B_16.npz")
    assert not os.path.exists(cached) and not _leftovers(cached)
    monkeypatch.setattr(cache, "_open_remote", real)
    model = keras_vit.load_model("ViT-B_16")
    assert os.path.getsize(cached) == os.path.getsize(
        mirror / "imagenet21k" / "ViT-B_16.npz")
    assert model.output_shape[-1] == 5


def test_half_file_of_an_earlier_crash_is_ignored_and_replaced(mirror):
    cached = cache.cache_path("imagenet21k/ViT-B_16.npz")
    os.makedirs(os.path.dirname(cached))
    remote = mirror / "imagenet21k" / "ViT-B_16.npz"
    stale = cached[: -len(".npz")] + ".tmp-" + "0" * 12 + ".npz"
    with open(remote, "rb") as f, open(stale, "wb") as out:
        out.write(f.read(1000))
    assert cache.fetch(f"file://{remote}", cached) == cached
    assert _leftovers(cached) == [] and not os.path.exists(stale)
    with open(cached, "rb") as a, open(remote, "rb") as b:
        assert a.read() == b.read()


def test_size_mismatch_is_refused(mirror, monkeypatch):
    real = cache._remote_size
    monkeypatch.setattr(cache, "_remote_size", lambda url: real(url) + 10)
    with pytest.raises(UsageError, match="where the remote file has"):
        keras_vit.load_model("ViT-B_16")
    cached = cache.cache_path("imagenet21k/ViT-B_16.npz")
    assert not os.path.exists(cached) and not _leftovers(cached)


def test_not_cached_offline_or_unreachable_names_the_fix(
    mirror, monkeypatch
):
    monkeypatch.setenv(cache.OFFLINE_ENV, "1")
    with pytest.raises(UsageError) as error:
        keras_vit.load_model("ViT-L_16")
    message = str(error.value)
    assert "\n" not in message
    target = cache.cache_path("imagenet21k/ViT-L_16.npz")
    for part in ("ViT-L_16", target, "unset KERAS_VIT_OFFLINE",
                 catalog.BASE_URL_ENV):
        assert part in message, part
    monkeypatch.delenv(cache.OFFLINE_ENV)
    # Online, but the mirror lacks the file: it says so, and the way on.
    with pytest.raises(UsageError) as error:
        keras_vit.load_model("ViT-L_16")
    message = str(error.value)
    assert "there is no such file at file://" in message
    assert "\n" not in message and "connect to the network" not in message
    assert "Copy it there, or unset KERAS_VIT_MODELS_BASE_URL" in message


def test_unknown_name_gives_the_closest_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as error:
        keras_vit.load_model("ViT-B_17")
    message = str(error.value)
    assert "\n" not in message
    assert "Did you mean ViT-B_16" in message
    assert "`keras_vit.list_models()` lists them" in message
    with pytest.raises(UsageError, match="hf://ORG/NAME"):
        keras_vit.load_model("hf://just-a-name")


def _hf_cache(root, repo="test-org/tiny-vit"):
    return model_cache.fill_hf_cache(root, repo)


def test_hugging_face_model_from_the_cache_offline(tmp_path, monkeypatch):
    snapshot = _hf_cache(tmp_path / "hub")
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE",
                        str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    want = _logits(loader.load_model(loader.HubSource(HF_FIXTURE)), 32)
    for uri in ("hf://test-org/tiny-vit",
                f"hf://test-org/tiny-vit@{REVISION}"):
        source = loader.resolve(uri)
        assert os.path.realpath(source.path) == os.path.realpath(snapshot)
        np.testing.assert_array_equal(
            _logits(keras_vit.load_model(uri), 32), want)
    with pytest.raises(UsageError) as error:
        keras_vit.load_model("hf://test-org/not-downloaded")
    message = str(error.value)
    assert "\n" not in message and "unset HF_HUB_OFFLINE" in message
    assert "hf download test-org/not-downloaded" in message
    # KERAS_VIT_OFFLINE keeps Hugging Face models offline too.
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv(cache.OFFLINE_ENV, "1")
    with pytest.raises(UsageError, match="unset KERAS_VIT_OFFLINE"):
        keras_vit.load_model("hf://test-org/not-downloaded")


def test_a_cached_commit_is_read_without_the_network(tmp_path, monkeypatch):
    """hf://ORG/NAME@<commit> cached whole: read from the cache at once,
    not asked of the Hub first (a commit never changes; offline, that cost
    retries); a branch, or a commit not cached, goes to the Hub."""
    snapshot = _hf_cache(tmp_path / "hub")
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv(cache.OFFLINE_ENV, raising=False)
    calls, real = [], huggingface_hub.snapshot_download

    def recorded(*args, **kwargs):
        calls.append(kwargs["local_files_only"])
        if not kwargs["local_files_only"]:
            raise huggingface_hub.utils.LocalEntryNotFoundError("no network")
        return real(*args, **kwargs)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", recorded)
    folder = cache.hf_snapshot(f"hf://test-org/tiny-vit@{REVISION}")
    assert os.path.realpath(folder) == os.path.realpath(snapshot)
    assert calls == [True]
    for uri in ("hf://test-org/tiny-vit@main",
                f"hf://test-org/tiny-vit@{'f' * 40}"):
        calls.clear()
        with pytest.raises(UsageError, match="check the network"):
            cache.hf_snapshot(uri)
        assert calls[-1] is False


@pytest.mark.slow
def test_hf_home_and_offline_from_the_environment(tmp_path):
    """A fresh process with HF_HOME and HF_HUB_OFFLINE=1 set, as a user
    would: the model comes from HF_HOME/hub without the network."""
    _hf_cache(tmp_path / "home" / "hub")
    env = dict(os.environ, HF_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1",
               PYTHONPATH=ROOT)
    env.pop("HF_HUB_CACHE", None)
    code = ("import keras_vit; m = keras_vit.load_model("
            "'hf://test-org/tiny-vit'); print('shape', m.output_shape)")
    result = subprocess.run([sys.executable, "-c", code], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    reference = loader.load_model(loader.HubSource(HF_FIXTURE))
    assert f"shape {reference.output_shape}" in result.stdout


def test_released_names_imply_their_architecture():
    def arch(name):
        return catalog.expected_architecture(catalog.lookup(name))

    assert arch("ViT-B_16") == dict(
        hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072,
        patch_size=16, resnet_layers=None, num_classes=21843, grid=14)
    assert arch("imagenet21k+imagenet2012/ViT-L_16")["grid"] == 24
    hybrid = arch("R50+ViT-B_16")
    assert (hybrid["patch_size"], hybrid["resnet_layers"],
            hybrid["grid"]) == (1, (3, 4, 9), 14)
    r_ti = arch("augreg/R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-"
                "sd_0.0")
    assert (r_ti["patch_size"], r_ti["resnet_layers"], r_ti["grid"]) == (
        8, (), 7)


def test_a_small_model_cached_as_a_release_is_refused(tiny_npz, tmp_path,
                                                      monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(cache.OFFLINE_ENV, "1")
    cached = cache.cache_path("imagenet21k/ViT-B_16.npz")
    os.makedirs(os.path.dirname(cached))
    shutil.copy(tiny_npz, cached)
    with pytest.raises(UsageError, match=(
            r"cached file .*ViT-B_16.npz is not the released imagenet21k/"
            r"ViT-B_16 \(B/16\): it holds a model of other sizes \("
            r"hidden_size 32.* where imagenet21k/ViT-B_16 has hidden_size "
            r"768.*Delete .* to download")):
        keras_vit.load_model("ViT-B_16")


def test_a_downloaded_file_of_another_model_is_not_cached(
        tiny_npz, tmp_path, monkeypatch):
    root = tmp_path / "mirror"
    os.makedirs(root / "imagenet21k")
    shutil.copy(tiny_npz, root / "imagenet21k" / "ViT-B_32.npz")
    monkeypatch.setenv(catalog.BASE_URL_ENV, f"file://{root}")
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(cache.OFFLINE_ENV, raising=False)
    with pytest.raises(UsageError, match=(
            "download of .*ViT-B_32.npz is not the released imagenet21k/"
            "ViT-B_32 .*nothing was cached")):
        loader.resolve("ViT-B_32")
    cached = cache.cache_path("imagenet21k/ViT-B_32.npz")
    assert not os.path.exists(cached) and not _leftovers(cached)


def _with_known_file(monkeypatch, name, size, sha256):
    info = dataclasses.replace(catalog.lookup(name), size=size,
                               sha256=sha256)
    monkeypatch.setitem(catalog._MODELS, info.name, info)
    monkeypatch.setitem(catalog._SHORT, info.name.split("/", 1)[1], info)


def test_known_size_and_sha256_are_checked(mirror, tiny_npz, monkeypatch):
    with open(tiny_npz, "rb") as f:
        content = f.read()
    digest = hashlib.sha256(content).hexdigest()
    name = "imagenet21k/ViT-B_16"
    cached = cache.cache_path(name + ".npz")
    # A wrong size or digest: the download is refused, nothing cached.
    for size, sha, message in (
        (len(content) + 1, digest, f"{len(content)} bytes where the release"
         f" has {len(content) + 1}"),
        (len(content), "0" * 64, f"SHA-256 {digest} where the release has "
         "0000"),
    ):
        _with_known_file(monkeypatch, name, size, sha)
        with pytest.raises(UsageError, match=message):
            loader.resolve("ViT-B_16")
        assert not os.path.exists(cached)
    # The right ones: downloaded, hashed once, then read from the stamp.
    _with_known_file(monkeypatch, name, len(content), digest)
    assert loader.resolve("ViT-B_16").path == cached
    with open(cached + ".sha256") as f:
        assert f.read().split()[0] == digest
    real_sha256 = release._sha256
    hashed = []
    monkeypatch.setattr(release, "_sha256",
                        lambda path: hashed.append(path) or digest)
    assert loader.resolve("ViT-B_16").path == cached
    assert not hashed
    # A cached file changed afterwards is hashed again and refused.
    monkeypatch.setattr(release, "_sha256", real_sha256)
    with open(cached, "r+b") as f:
        f.seek(len(content) // 2)
        f.write(b"\xff\xfe")
    with pytest.raises(UsageError, match="cached file .* SHA-256 .* where "
                       "the release has " + digest):
        loader.resolve("ViT-B_16")


def test_names_download_from_an_http_mirror(http_mirror, monkeypatch,
                                             tiny_npz, tmp_path):
    """KERAS_VIT_MODELS_BASE_URL=http(s)://...: keras-vit-convert by
    name downloads the file (its size from a HEAD request) into the
    cache, and the model equals the file's; a listed name the mirror
    lacks, and a misspelled one, say there is no such file."""
    monkeypatch.setenv(catalog.BASE_URL_ENV, http_mirror)
    out = tmp_path / "b16.keras"
    assert convert_command.main(["keras-vit-convert", "--model=ViT-B_16",
                                 f"--output={out}"]) == 0
    cached = cache.cache_path("imagenet21k/ViT-B_16.npz")
    with open(cached, "rb") as got, open(tiny_npz, "rb") as want:
        assert got.read() == want.read()
    assert _leftovers(cached) == []
    np.testing.assert_array_equal(
        _logits(keras.saving.load_model(str(out))),
        _logits(keras_vit.load_model(tiny_npz)))
    with pytest.raises(UsageError, match=(
            r"imagenet21k/ViT-L_16: there is no such file at http://127.0.0"
            r".1:\d+/imagenet21k/ViT-L_16.npz: the mirror .* lacks it")):
        keras_vit.load_model("ViT-L_16")
    with pytest.raises(UsageError, match=r"there is no such file at http.*"
                       r"Did you mean: augreg/S_16-i21k-300ep-lr_0.001-aug_"
                       r"light1-wd_0.03-do_0.0-sd_0.0"):
        keras_vit.load_model("augreg/S_16-i21k-300ep-lr_0.001-aug_light-"
                             "wd_0.03-do_0.0-sd_0.0")

"""A VTAB-1k task's download, served on the loopback interface, for
TensorFlow Datasets' own `download_and_prepare` to fetch and prepare.

The task is DTD (Describable Textures): `write_dtd_archive` writes
`dtd-r1.0.1.tar.gz` in the release's layout (`dtd/images/<class>/*.jpg`,
`dtd/labels/{train1,val1,test1}.txt`) with tiny images of the 47 classes
TFDS knows, enough of them for VTAB-1k's `train[:800]` and
`validation[:200]` and for 25-shot probes; `serve` answers HTTP requests
for it on 127.0.0.1; `SITECUSTOMIZE`, put on a child process's path,
points TFDS's DTD builder at that address (`KERAS_VIT_TEST_DTD_URL`), so
that the unchanged builder (name, version, features, parsing) downloads,
extracts and prepares it as it would the real file.
"""

import contextlib
import functools
import http.server
import io
import os
import tarfile
import threading

import numpy as np
from PIL import Image

ARCHIVE = "dtd-r1.0.1.tar.gz"
# Per class: train1 (26: 25-shot probes need 25), val1 (5), test1 (2).
PER_CLASS = {"train1": 26, "val1": 5, "test1": 2}
URL_ENV = "KERAS_VIT_TEST_DTD_URL"
# How many times TFDS's downloader tries a file again (its default: 10,
# about 3.5 minutes against an address that does not answer).
RETRIES_ENV = "KERAS_VIT_TEST_TFDS_RETRIES"

SITECUSTOMIZE = f"""\
import os

if os.environ.get({URL_ENV!r}):
    from tensorflow_datasets.image_classification import dtd

    dtd._DATA_URL = os.environ[{URL_ENV!r}]
if os.environ.get({RETRIES_ENV!r}):
    from tensorflow_datasets.core.download import downloader

    downloader.MAX_RETRIES = int(os.environ[{RETRIES_ENV!r}])
"""


def class_names():
    """[str]. The 47 DTD classes, as TFDS's builder names them."""
    import tensorflow_datasets as tfds

    path = tfds.core.tfds_path(
        os.path.join("image_classification", "dtd_key_attributes.txt"))
    return [line.strip() for line in path.read_text().splitlines()
            if line.strip()]


def _jpeg(rng, index):
    pixels = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
    pixels[:, :, index % 3] = 255  # something of the class in each image
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


def write_dtd_archive(folder):
    """Writes ARCHIVE into `folder`; returns {split file: example count}."""
    rng = np.random.default_rng(0)
    names = class_names()
    lists = {split: [] for split in PER_CLASS}
    path = os.path.join(str(folder), ARCHIVE)

    def add(tar, name, data):
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(path, "w:gz") as tar:
        for index, name in enumerate(names):
            n = 0
            for split, count in PER_CLASS.items():
                for _ in range(count):
                    rel = f"{name}/{name}_{n:04d}.jpg"
                    add(tar, f"dtd/images/{rel}", _jpeg(rng, index))
                    lists[split].append(rel)
                    n += 1
        for split, files in lists.items():
            add(tar, f"dtd/labels/{split}.txt",
                ("\n".join(files) + "\n").encode())
    return {split: len(files) for split, files in lists.items()}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    requests = []

    def log_message(self, *args):
        del args

    def do_GET(self):  # noqa: N802  (the handler's name)
        type(self).requests.append(self.path)
        super().do_GET()


@contextlib.contextmanager
def serve(folder):
    """Serves `folder` on 127.0.0.1 (a free port); yields (the URL of
    ARCHIVE, the list of request paths as they come)."""
    handler = type("Handler", (_Quiet,), {"requests": []})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host}:{port}/{ARCHIVE}", handler.requests
    finally:
        server.shutdown()
        server.server_close()


def loopback_env(env, site):
    """`env` for a child process that downloads from the loopback server:
    `site` (holding SITECUSTOMIZE) first on its path, no proxy for
    127.0.0.1."""
    env = dict(env)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(site) + (os.pathsep + path if path else "")
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env

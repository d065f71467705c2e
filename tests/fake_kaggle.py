"""A stand-in for Kaggle's model API on the loopback interface, which
kagglehub's own downloader (`kagglehub.model_download`) talks to with
KAGGLE_API_ENVIRONMENT=TEST (kagglesdk's http://localhost:7777): it lists
a folder's files as one model version and serves each file.

kagglesdk's test endpoint has a fixed port, so the port is held under a
file lock for as long as a test needs it, serving or needing nothing
there (`no_server`): test processes running side by side take turns."""

import contextlib
import http.server
import json
import os
import tempfile
import threading

import filelock

PORT = 7777  # kagglesdk's TEST endpoint
ENV = {"KAGGLE_API_ENVIRONMENT": "TEST"}
_SERVICE = "/api/v1/models.ModelApiService/"


def _handler(folder, requests):
    files = sorted(n for n in os.listdir(folder) if n != "reference.npz")

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            size = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(size) or b"{}")
            requests.append((self.path, body))
            if self.path == _SERVICE + "ListModelInstanceVersionFiles":
                self._send(json.dumps({
                    "files": [{"name": n} for n in files],
                    "nextPageToken": ""}).encode(), "application/json")
            elif self.path == _SERVICE + "GetModelInstance":
                self._send(json.dumps({"versionNumber": 1}).encode(),
                           "application/json")
            elif (self.path == _SERVICE + "DownloadModelInstanceVersion"
                  and body.get("path") in files):
                with open(os.path.join(folder, body["path"]), "rb") as f:
                    self._send(f.read(), "application/octet-stream")
            else:
                self.send_response(404)
                self.end_headers()

        def _send(self, data, kind):
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def no_server():
    """Holds the port with nothing serving on it."""
    return filelock.FileLock(os.path.join(
        tempfile.gettempdir(), f"keras_vit_fake_kaggle_{PORT}.lock"),
        timeout=600)


@contextlib.contextmanager
def serve(folder):
    """Serves `folder` as every model version; yields the list of
    (path, JSON body) of the requests it answered."""
    with no_server():
        with _serving(folder) as requests:
            yield requests


@contextlib.contextmanager
def _serving(folder):
    requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", PORT),
                                             _handler(str(folder), requests))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield requests
    finally:
        server.shutdown()
        server.server_close()

"""TF Serving's models.config (a model_config_list in protobuf's text
format) of an export folder: read, checked, and given one model's entry,
keeping the others and what was edited by hand.

Exports running at once into one local export folder each add their entry:
the file is read, changed and written under an exclusive lock on
`models.config.lock` beside it (`fcntl.flock`; a process that dies lets
go of it). A gs:// folder has no such lock: there, exports that update
its models.config at the same moment can lose one another's entries, so
export into it one at a time."""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
from typing import Iterator, Optional

import tensorflow as tf
from absl import logging

from keras_vit.errors import UsageError
from keras_vit.export.files import CONFIG_FILE, LOCK_FILE, join
from keras_vit.storage import atomic
from keras_vit.storage.atomic import atomic_write

try:
    import fcntl
except ImportError:  # Windows: models.config is updated unlocked
    fcntl = None

__all__ = ["CONFIG_FILE", "config_base_path", "read_models_config",
           "update_models_config"]


def read_models_config(path: str):
    """The ModelServerConfig in `path` (empty if the file does not exist).

    Raises:
        ValueError: the file exists but is not a valid text proto; nothing
            is overwritten in that case.
    """
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = model_server_config_pb2.ModelServerConfig()
    if not tf.io.gfile.exists(path):
        return config
    with tf.io.gfile.GFile(path, "r") as f:
        text = f.read()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as e:
        raise UsageError(
            f"{path} is not a valid TF Serving model config (text "
            f"ModelServerConfig): {e}. Fix or move it, then export again."
        ) from None
    if config.WhichOneof("config") == "custom_model_config":
        raise UsageError(
            f"{path} holds a custom_model_config; only model_config_list "
            "files can be updated. Move it, then export again."
        )
    return config


def update_models_config(
    path: str,
    model_name: str,
    base_path: str,
    replace_base_path: bool,
) -> None:
    """Adds (or updates) one model's entry in a model_config_list file.

    Entries of other models, and the other fields of this model's entry
    (version policy, labels), are kept. An existing entry's base_path is
    changed only with `replace_base_path`, so a path edited by hand for a
    server (e.g. /models/vit in a container) survives re-exports. A local
    file is read and written under its lock (`locked`), so that exports
    at once into one folder keep each other's entries.
    """
    with locked(path):
        _update(path, model_name, base_path, replace_base_path)


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Holds an exclusive lock on LOCK_FILE beside the local `path` (none
    for a URL such as gs://, which has no lock, nor where `fcntl` is
    missing: Windows)."""
    if "://" in str(path) or fcntl is None:
        yield
        return
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, LOCK_FILE), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _update(path: str, model_name: str, base_path: str,
            replace_base_path: bool) -> None:
    """`update_models_config`'s read, change and write, once locked."""
    from google.protobuf import text_format

    config = read_models_config(path)
    before = text_format.MessageToString(config)
    entries = config.model_config_list.config
    entry = next((e for e in entries if e.name == model_name), None)
    if entry is None:
        entry = entries.add()
        entry.name = model_name
        entry.base_path = base_path
        entry.model_platform = "tensorflow"
    elif replace_base_path or not entry.base_path:
        entry.base_path = base_path
    if not entry.model_platform:
        entry.model_platform = "tensorflow"
    text = text_format.MessageToString(config)
    if text != before:  # unchanged: the file, comments and all, stays
        _keep_comments(path)
        atomic_write(path, text)


def _keep_comments(path: str) -> None:
    """A models.config with comments (which protobuf's text format drops)
    is copied to <path>.bak before it is rewritten: to <path>.bak.1, .2,
    ... where a .bak of other text is there (one kept before, or the
    user's own), which is never overwritten."""
    text = tf.io.gfile.GFile(path).read() if tf.io.gfile.exists(path) else ""
    if not re.search(r"(^|\s)#", text):
        return
    backup, n = path + ".bak", 0
    while tf.io.gfile.exists(backup) and (  # (bytes: the user's may be any)
            tf.io.gfile.GFile(backup, "rb").read() != text.encode()):
        n += 1
        backup = f"{path}.bak.{n}"
    if not tf.io.gfile.exists(backup):
        atomic_write(backup, text)
    logging.warning("%s loses its comments in the rewrite; as it was: %s.",
                    path, backup)


def config_base_path(
    export_dir: str, model_name: str, serving_base_dir: Optional[str]
) -> str:
    """str. The base_path a server should use for `model_name`.

    `serving_base_dir` is where the server sees `export_dir` (e.g. /models
    when it is mounted there in a container); by default the export's own
    absolute path.
    """
    if serving_base_dir:
        return posixpath.join(serving_base_dir, model_name)
    return join(atomic.absolute(export_dir), model_name)

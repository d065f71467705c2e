"""Image files named on a command line (keras-vit-predict's and
keras-vit-analysis's arguments), local or remote (gs://, any
`tf.io.gfile` URL, as training's image folders are): a folder's images,
with its sub-folders, and a file's bytes.

A local folder is walked by `image_files.images_under` (linked folders
followed once); a remote one by `tf.io.gfile.walk`, hidden names skipped
the same way. A web address (http://, https://) is no file system here:
it is refused naming the fix.
"""

from __future__ import annotations

import collections
import os
from typing import List

import tensorflow as tf

from keras_vit.data import image_files
from keras_vit.errors import UsageError
from keras_vit.storage.atomic import is_remote

_WEB = ("http://", "https://")


def identity(path: str) -> str:
    """What a file reached twice (a folder and a file in it, a link, the
    same path again) has in common: its real path, a URL as given."""
    return path if is_remote(path) else os.path.realpath(path)


def check_readable_kind(path: str) -> None:
    """A UsageError naming the fix where `path` is a web address."""
    if path.lower().startswith(_WEB):
        raise UsageError(
            f"{path}: images are read from files and folders (local, or "
            "gs:// and other tf.io.gfile URLs), not web addresses: "
            "download it first (e.g. curl -O URL).")


def is_folder(path: str) -> bool:
    """Whether `path` is a folder (a web address: UsageError)."""
    check_readable_kind(path)
    return tf.io.gfile.isdir(path) if is_remote(path) else os.path.isdir(path)


def exists(path: str) -> bool:
    """Whether `path` exists (a web address: UsageError)."""
    check_readable_kind(path)
    return (tf.io.gfile.exists(path) if is_remote(path)
            else os.path.exists(path))


def images_under(top: str) -> List[str]:
    """The image files under folder `top` and its sub-folders, sorted
    (the others said: `image_files.images_under`)."""
    if not is_remote(top):
        return image_files.images_under(top)
    found, not_read = [], collections.Counter()
    for root, _, names in tf.io.gfile.walk(top):
        if image_files.is_hidden(root[len(top):].strip("/")):
            continue  # (walk lists hidden folders too)
        found.extend(os.path.join(root, n) for n in names
                     if image_files.is_image(n))
        image_files.count_not_read(names, not_read)
    image_files.say_not_read(top, not_read)
    return sorted(found)


def read_bytes(path: str) -> bytes:
    """A file's bytes; a remote file that cannot be read is an OSError
    with the file system's reason, as a local one's is."""
    if not is_remote(path):
        with open(path, "rb") as f:
            return f.read()
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read()
    except tf.errors.OpError as e:
        raise OSError(" ".join(str(e.message).split())) from None

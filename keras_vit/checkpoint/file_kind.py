"""What a model file holds, read from its first bytes, not its name.

A file renamed on download (`ViT-B_16.npz` saved as `model.bin`, a
`.keras` file without its suffix) would otherwise be read by the reader its
name picks and refused for a reason that misleads (a Hugging Face
`config.json` missing, an array missing). `content_kind(path)` tells the
kinds apart by their own markers, the way each format's reader checks
them: a zip archive of `.npy` members is an `.npz` (numpy.load); a zip
with `metadata.json` and `config.json` is a `.keras` file (Keras's
saving_lib); a zip with a `data.pkl` is a PyTorch file (torch.save); an
8-byte header length followed by `{` is safetensors; `TFL3` at byte 4 is
a LiteRT flatbuffer. Only the zip's central directory is read, never its
members.
"""

from __future__ import annotations

import struct
import zipfile
from typing import Optional

import tensorflow as tf

# A kind, and the file name ending that its reader takes.
SUFFIXES = {
    "npz": ".npz",
    "keras": ".keras",
    "safetensors": ".safetensors",
    "torch": ".bin",
    "tflite": ".tflite",
}
WHAT = {
    "npz": "numpy arrays (an .npz)",
    "keras": "a Keras model (a .keras file)",
    "safetensors": "safetensors weights",
    "torch": "PyTorch weights",
    "tflite": "a LiteRT model (a .tflite file)",
}


def _zip_kind(f) -> Optional[str]:
    try:
        names = zipfile.ZipFile(f).namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return None
    if names and all(n.endswith(".npy") for n in names):
        return "npz"
    if {"metadata.json", "config.json"} <= set(names):
        return "keras"
    if any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
        return "torch"
    return None


def content_kind(path: str) -> Optional[str]:
    """The kind (a key of SUFFIXES) of model file that `path` holds by its
    content, or None where it is none of them or cannot be read."""
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            head = f.read(9)
            if head[:4] == b"PK\x03\x04":
                f.seek(0)
                return _zip_kind(f)
    except (tf.errors.OpError, OSError):
        return None
    if len(head) == 9 and head[8:9] == b"{":
        (length,) = struct.unpack("<Q", head[:8])
        if 0 < length < 100_000_000:
            return "safetensors"
    if head[4:8] == b"TFL3":
        return "tflite"
    return None


def misnamed(path: str, named_kind: Optional[str]) -> Optional[str]:
    """A one-line message when `path`, taken as `named_kind` by its name
    (None: a name of no kind), holds another kind of model file; else
    None."""
    kind = content_kind(path)
    if kind is None or kind == named_kind:
        return None
    beside = (" (as model.safetensors or pytorch_model.bin, beside its "
              "config.json)" if kind in ("torch", "safetensors") else "")
    return (f"{path} holds {WHAT[kind]}, but its name says otherwise: "
            f"rename it to end in {SUFFIXES[kind]}{beside} (a file's kind "
            "is read from its name).")

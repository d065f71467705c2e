"""Which files are images: the extensions read and the hidden names
skipped, shared by the image folders of training and by keras-vit-predict
(plain Python: the command's --help loads no TensorFlow)."""

from __future__ import annotations

import os

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")


def is_hidden(relative: str) -> bool:
    """Whether a path passes through a hidden name (.thumbnails/,
    .ipynb_checkpoints/, macOS's ._IMG_1.jpg companions): never a split,
    a class or an image."""
    return any(part.startswith(".") for part in relative.split(os.sep))


def is_image(name: str) -> bool:
    """Whether a file name is one of an image read (not hidden)."""
    return name.lower().endswith(IMAGE_EXTENSIONS) and not name.startswith(".")

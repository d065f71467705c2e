"""Which files are images: the extensions read and the hidden names
skipped, shared by the image folders of training and by keras-vit-predict
(plain Python: the command's --help loads no TensorFlow)."""

from __future__ import annotations

import os
from typing import List

# JPEG also as .jpe and .jfif (what some cameras and browsers save).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".gif",
                    ".bmp", ".webp")


def is_hidden(relative: str) -> bool:
    """Whether a path passes through a hidden name (.thumbnails/,
    .ipynb_checkpoints/, macOS's ._IMG_1.jpg companions): never a split,
    a class or an image."""
    return any(part.startswith(".") for part in relative.split(os.sep))


def is_image(name: str) -> bool:
    """Whether a file name is one of an image read (not hidden)."""
    return name.lower().endswith(IMAGE_EXTENSIONS) and not name.startswith(".")


def images_under(top: str) -> List[str]:
    """The image files under folder `top` and its sub-folders, sorted:
    linked folders followed (each real folder once, so a link to a parent
    ends), hidden names skipped, and a folder named like an image
    (`album.jpg/`) searched, never read as one. What keras-vit-predict
    and keras-vit-analysis read of a folder."""
    found, seen = [], set()
    for root, dirs, names in os.walk(top, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found.extend(os.path.join(root, n) for n in names if is_image(n))
    return sorted(found)

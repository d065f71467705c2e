"""The images an analysis is computed on: image files and folders
(`load_images`), or scikit-learn's bundled digits (`digits_images`),
preprocessed as at evaluation time.
"""

from __future__ import annotations

import collections
import os
import sys
from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from keras_vit import progress
from keras_vit.analysis import curves
from keras_vit.analysis.report import JSON_NAME, OUTPUTS
from keras_vit.data import (
    checks,
    folders,
    image_paths,
    preprocessing,
)
from keras_vit.data import digits as digits_data
from keras_vit.errors import UsageError

IMAGE_EXTENSIONS = folders.IMAGE_EXTENSIONS
# What keras-vit-analysis writes into an output folder (--curves too).
_WRITTEN = (*OUTPUTS, curves.FILE)


def _list_images(paths: Sequence[str], output_dir: Optional[str] = None
                 ) -> List[Tuple[str, str]]:
    """(file, name) of the images of `paths`: files as given (named by
    their file name), a local folder searched with its sub-folders as
    keras-vit-predict does (class folders included; named by the path
    inside it, so that cat/1.jpg and dog/1.jpg stay apart), local or
    remote (gs://). A file reached twice is listed once; names
    that would still be alike are the paths as given. The figures an
    analysis writes into `output_dir` are no input, where a folder walked
    holds them (an output folder inside the image folder), nor those of
    an earlier analysis beside its analysis.json (said)."""
    files, seen = [], set()
    for path in paths:
        if image_paths.is_folder(path):
            found = image_paths.images_under(path)
            if not found:
                raise UsageError(
                    f"No images ({', '.join(IMAGE_EXTENSIONS)}) in folder "
                    f"{path!r} or its sub-folders."
                )
            named = [(f, os.path.relpath(f, path)) for f in found
                     if not _written_here(f, output_dir)]
            earlier = [f for f, _ in named if of_an_analysis(f)]
            if earlier:
                logging.info(
                    "%s: %d figure(s) of an earlier analysis (beside its "
                    "%s) not read as images.", path, len(earlier), JSON_NAME)
                named = [(f, n) for f, n in named if f not in earlier]
        elif image_paths.exists(path):
            named = [(path, os.path.basename(path))]
        else:
            if not path:
                raise UsageError("An image argument is empty (an unset "
                                 "shell variable?): give a file or folder.")
            raise UsageError(f"Image {path!r} does not exist (or is a "
                             "link to nothing).")
        for file, name in named:
            key = image_paths.identity(file)
            if key not in seen:
                seen.add(key)
                files.append((file, name))
    count = collections.Counter(name for _, name in files)
    return [(f, f if count[name] > 1 else name) for f, name in files]


def of_an_analysis(file: str) -> bool:
    """`file` is a figure an earlier analysis wrote: named as one, beside
    the analysis.json written with it."""
    return os.path.basename(file) in _WRITTEN and image_paths.exists(
        os.path.join(os.path.dirname(file), JSON_NAME))


def _written_here(file: str, output_dir: Optional[str]) -> bool:
    """`file` is one of the figures an analysis writes into `output_dir`."""
    if not output_dir or os.path.basename(file) not in _WRITTEN:
        return False
    if "://" in file:
        return os.path.dirname(file).rstrip("/") == output_dir.rstrip("/")
    return os.path.realpath(os.path.dirname(file)) == os.path.realpath(
        output_dir)


class ImageFiles:
    """Image files as model input, each read and preprocessed when looked
    up (`images[i]`, `images[a:b]`): a folder of thousands of photos is
    held one batch at a time, not whole.

    Attributes:
        shape: (n, height, width, 3), as an array of them would have.
    """

    def __init__(self, files: Sequence[str], size: Tuple[int, int],
                 resize_size: Optional[int] = None,
                 keep_aspect: bool = False):
        self._files = list(files)
        self._size = tuple(size)
        self._resize = (resize_size, keep_aspect)
        self.shape = (len(self._files),) + self._size + (3,)

    def __len__(self) -> int:
        return len(self._files)

    def __getitem__(self, index):
        if isinstance(index, slice):
            chosen = self._files[index]
            if not chosen:
                return np.zeros((0,) + self.shape[1:], np.float32)
            return np.stack([self._image(f) for f in chosen])
        return self._image(self._files[index])

    def _image(self, file: str) -> np.ndarray:
        return preprocessing.preprocess_eval(
            _decode(file), self._size, *self._resize).numpy()


def _decode(file: str) -> tf.Tensor:
    """A file's pixels (`preprocessing.decode_image`); one UsageError line
    naming the file and the decoder's reason where it cannot be read."""
    try:
        data = image_paths.read_bytes(file)
        return preprocessing.decode_image(tf.constant(data))
    except OSError as error:  # (read_bytes: local or remote)
        reason = error.strerror or str(error)
    except (tf.errors.OpError, ValueError) as error:
        reason = (checks.decode_reason(error)
                  if isinstance(error, (tf.errors.InvalidArgumentError,
                                        ValueError))
                  else " ".join(str(error.message).replace(
                      f"{file}; ", "").split()))
    raise UsageError(
        f"Cannot read {file!r} as an image (JPEG, PNG, GIF, BMP or "
        f"WebP): {reason.rstrip('.')}."
    ) from None


def load_images(
    paths: Sequence[str], size: Tuple[int, int],
    resize_size: Optional[int] = None, keep_aspect: bool = False, *,
    output_dir: Optional[str] = None, show_progress: bool = False,
    skip_bad_images: bool = False,
) -> Tuple[ImageFiles, List[str]]:
    """Reads image files (and folders of them) as the model's input.

    Decoded and resized as at evaluation time (`preprocess_eval`: resized
    to `size`, or to `resize_size` (its shorter side with `keep_aspect`)
    and then the central `size` crop), as
    keras-vit-predict and an export's serving_default do. Every file is
    decoded once here (its count on the terminal with `show_progress`),
    so that one that cannot be read (or is too elongated for the
    keep-aspect resize) stops the command
    before any figure is computed; the pixels are made again batch by
    batch when used (`ImageFiles`). An analysis's own figures in
    `output_dir` are left out (`_list_images`). With `skip_bad_images`, a file
    that cannot be read is named on stderr and left out instead.

    Returns:
        (images, names): `ImageFiles` (n, height, width, 3), float32 in
        [-1, 1] as looked up, and each image's name.
    """
    files, readable = _list_images(paths, output_dir), []
    for i, (file, name) in enumerate(files):
        if show_progress and (i % 50 == 0 or i + 1 == len(files)):
            progress.show(f"checked {i + 1}/{len(files)} images")
        try:
            decoded = _decode(file)
            if keep_aspect and resize_size and preprocessing.too_elongated(
                    tf.shape(decoded), resize_size):  # refused when resized
                raise UsageError(f"{file!r}: {preprocessing.ELONGATED_MESSAGE}")
        except UsageError as error:
            progress.end_line()  # the message on a line of its own
            if not skip_bad_images:
                raise UsageError(f"{error} Leave such files out with "
                                 "`skip_bad_images`.") from None
            print(f"skipped {file}: {error}", file=sys.stderr, flush=True)
            continue
        readable.append((file, name))
    progress.end_line()
    if not readable:
        raise UsageError(f"None of the {len(files)} images can be read.")
    return (ImageFiles([f for f, _ in readable], size, resize_size,
                       keep_aspect),
            [name for _, name in readable])


def digits_images(
    digits: int, size: Tuple[int, int], resize_size: Optional[int] = None,
    keep_aspect: bool = False,
) -> Tuple[np.ndarray, List[str]]:
    """The first `digits` scikit-learn digits as model input (no download).

    The 8 x 8 grey images (values 0..16) are scaled to [0, 255] and go
    through `preprocess_eval`: bilinear upsampling to `size` (or to
    `resize_size`, then the central `size` crop), grey tiled to RGB,
    scaled to [-1, 1].

    Returns:
        (images, names): float32 (digits, height, width, 3) and names such
        as "digit #3 (label 3)".
    """
    grey, labels = digits_data.load()
    if not 1 <= digits <= len(grey):
        raise UsageError(
            f"`digits` must be between 1 and {len(grey)}, got {digits}."
        )
    images = [
        preprocessing.preprocess_eval(
            tf.constant(digit[..., None] * (255.0 / 16.0), tf.float32), size,
            resize_size, keep_aspect,
        ).numpy()
        for digit in grey[:digits]
    ]
    names = [
        f"digit #{i} (label {label})"
        for i, label in enumerate(labels[:digits])
    ]
    return np.stack(images), names

"""The image files keras-vit-predict is given, local or remote (gs://):
folders walked (`list_images`), and each file decoded once before any is
classified (`check_images`), so that an unreadable one stops the run, or
is named and left out, first.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, List, Sequence, Tuple

from keras_vit import progress
from keras_vit.commands.lazy import lazy_module
from keras_vit.data.image_files import IMAGE_EXTENSIONS
from keras_vit.errors import UsageError

if TYPE_CHECKING:  # imported on first use: --help loads no TensorFlow
    import tensorflow as tf

    from keras_vit.analysis import inputs as analysis_inputs
    from keras_vit.data import checks, image_paths, preprocessing
else:
    tf = lazy_module("tensorflow")
    preprocessing = lazy_module("keras_vit.data.preprocessing")
    checks = lazy_module("keras_vit.data.checks")
    image_paths = lazy_module("keras_vit.data.image_paths")
    analysis_inputs = lazy_module("keras_vit.analysis.inputs")


def list_images(paths: Sequence[str]) -> Tuple[List[str], bool]:
    """(files, any folder given): files as given, folders walked
    recursively for IMAGE_EXTENSIONS, sorted; a file reached twice (a
    folder and a file or subfolder in it, a link to it, the same path
    again) once, where it comes first, and said."""
    files, folder = [], False
    for path in paths:
        if image_paths.is_folder(path):
            folder = True
            found = image_paths.images_under(path)
            if not found:
                raise UsageError(
                    f"No images ({', '.join(IMAGE_EXTENSIONS)}) in {path}."
                )
            files.extend(_no_figures(path, found))
        elif image_paths.exists(path):
            files.append(path)
        elif any(c in path for c in "*?["):
            raise UsageError(
                f"{path} does not exist: a shell pattern in quotes is not "
                "expanded; leave out the quotes, or give the folder.")
        else:
            raise UsageError(f"{path} does not exist.")
    return _once(files), folder


def _no_figures(folder: str, found: List[str]) -> List[str]:
    """`found` without the figures of an earlier keras-vit-analysis
    (beside its analysis.json), said."""
    figures = [f for f in found if analysis_inputs.of_an_analysis(f)]
    if figures and len(figures) == len(found):
        raise UsageError(
            f"{folder} holds only the figures of an earlier analysis "
            "(beside its analysis.json), which are not read as images when "
            "a folder is walked: name a figure to classify it.")
    if figures:
        print(f"{folder}: {len(figures)} figure(s) of an earlier analysis "
              "(beside its analysis.json) not read as images.",
              file=sys.stderr, flush=True)
    return [f for f in found if f not in figures]


def _once(files: List[str]) -> List[str]:
    seen, kept = set(), []
    for path in files:
        real = image_paths.identity(path)
        if real not in seen:
            seen.add(real)
            kept.append(path)
    if len(kept) < len(files):
        twice = len(files) - len(kept)
        print(f"{twice} image{'s' if twice > 1 else ''} given more than "
              "once (a folder and a file or folder in it, a link, a path "
              "repeated): each is classified once.", file=sys.stderr,
              flush=True)
    return kept


def skip(path: str, reason: str, skipped: list) -> None:
    """A file left out (--skip_bad_images): said on stderr, and listed in
    `skipped` with its reason."""
    print(f"skipped {path}: {reason}", file=sys.stderr, flush=True)
    skipped.append((path, reason))


def check_images(files: Sequence[str], skip_bad: bool,
                 show_progress: bool = False
                 ) -> Tuple[List[str], List[Tuple[str, str]]]:
    """(readable files, [(file, reason)] skipped): each file decoded once,
    with the decoder every other path uses, before any is classified (an
    unreadable one stops the run first unless `skip_bad`). The bytes are
    not kept: a folder of any size is read again a batch at a time."""
    good, skipped = [], []
    for i, path in enumerate(files):
        if show_progress and (i % 50 == 0 or i + 1 == len(files)):
            progress.show(f"checked {i + 1}/{len(files)} images")
        try:
            preprocessing.decode_image(tf.constant(read_bytes(path)))
        except (tf.errors.InvalidArgumentError, ValueError, OSError) as error:
            reason = (checks.decode_reason(error)
                      if not isinstance(error, OSError)
                      else error.strerror or str(error))
            progress.end_line()  # what follows is on a line of its own
            if not skip_bad:
                raise UsageError(
                    f"{path} is not a readable image ({reason}); pass "
                    "--skip_bad_images to leave such files out."
                ) from None
            skip(path, reason, skipped)
            continue
        good.append(path)
    progress.end_line()
    return good, skipped


def read_bytes(path: str) -> bytes:
    """A file's bytes, local or remote (an unreadable one: OSError)."""
    return image_paths.read_bytes(path)

"""Which files are images: the extensions read and the hidden names
skipped, shared by the image folders of training and by keras-vit-predict;
and the refusals of a run's folder inside its image folder, or of a new
run's folder that holds images or an export (plain Python: the command's
--help, and these refusals, load no TensorFlow)."""

from __future__ import annotations

import collections
import os
from typing import Iterable, List, Mapping

from absl import logging

from keras_vit.errors import UsageError
from keras_vit.storage import lines

# config.input.dataset of an image folder (data.sources reads it).
FOLDER = "folder"

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


def extension_of(name: str) -> str:
    """The lower-case extension of file name `name` ("" for none; a
    leading or trailing dot is none), the key its kind is counted by."""
    return os.path.splitext(name.strip("."))[1].lower()


def count_not_read(names: Iterable[str], counts: collections.Counter
                   ) -> None:
    """Counts in `counts`, by extension ("" for none), the files of
    `names` that are neither images nor hidden."""
    for name in names:
        if not name.startswith(".") and not is_image(name):
            counts[extension_of(name)] += 1


def say_not_read(folder: str, counts: Mapping[str, int]) -> None:
    """One warning line naming, by extension, the files of `folder` that
    are not read (a .tiff or .heic photo is left out, and said)."""
    if counts:
        logging.warning(
            "Image folder %s: %s not read (only %s are images here).",
            folder, ", ".join(f"{n} {ext or 'extensionless'} "
                              f"file{'s' if n > 1 else ''}"
                              for ext, n in sorted(counts.items())),
            ", ".join(IMAGE_EXTENSIONS))


def images_under(top: str) -> List[str]:
    """The image files under folder `top` and its sub-folders, sorted:
    linked folders followed (each real folder once, so a link to a parent
    ends), hidden names skipped, and a folder named like an image
    (`album.jpg/`) searched, never read as one; the other files are
    counted in one warning line (`say_not_read`). What keras-vit-predict
    and keras-vit-analysis read of a folder."""
    found, seen, not_read = [], set(), collections.Counter()

    def refuse(error: OSError):  # os.walk would leave the folder out
        raise unreadable_folder(error.filename or top, error.strerror)

    for root, dirs, names in os.walk(top, onerror=refuse, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found.extend(os.path.join(root, n) for n in names if is_image(n))
        count_not_read(names, not_read)
    say_not_read(top, not_read)
    return sorted(found)


def check_class_folder(folder: str, name: str, images,
                       nested: Iterable[str] = ()) -> None:
    """Refuses a class folder without images (hidden ones are no classes),
    which would drop its class without a word, naming its sub-folders
    among `nested` (the folders found inside class folders, not read)
    where the images are; and a blank name, or one with a line end, which
    no line of labels.txt holds."""
    if not lines.fits_a_line(name):
        what = "blank name" if not name.strip() else "name with a line end"
        raise UsageError(f"Class folder {folder!r} has a {what}, which no "
                         "labels file can hold on one line: rename it.")
    if images or name.startswith("."):
        return
    inner = sorted(os.path.basename(p) + "/" for p in nested
                   if os.path.dirname(p) == folder)
    if inner:
        raise UsageError(
            f"Class folder {folder} has no images of its own, only "
            f"folders inside it ({', '.join(inner[:3])}"
            f"{', ...' if len(inner) > 3 else ''}), which are not read: move "
            f"their images up into {folder}.")
    raise UsageError(f"Class folder {folder} has no images ("
                     f"{', '.join(IMAGE_EXTENSIONS)}; other files are "
                     "ignored): add images or remove the folder.")


def unreadable_folder(path: str, why: str) -> UsageError:
    """The error of a folder of images that cannot be listed (its images
    would be left out unsaid)."""
    return UsageError(
        f"The folder {path} cannot be listed ({why}): give the user running "
        f"this read and search permission on it (chmod a+rx {path}), or "
        "move it out of the folder read.")


# The folders a run writes in its workdir (storage.workdir's checkpoints/
# and TensorBoard summaries, training.records' best checkpoint).
_RUN_FOLDERS = ("checkpoints", "train", "eval", "best")


def check_workdir_apart(config, workdir: str) -> None:
    """Refuses a run's `workdir` (or config.export.export_dir, where the
    run exports elsewhere) that is its image folder or inside it: the
    run's files (checkpoints/, train/, training_curves.png, a SavedModel)
    would be read as classes and images the next time the folder is
    read; and an image folder that is a folder the run writes
    (`_RUN_FOLDERS`), which it would write into or set aside."""
    inp = config.input
    if inp.dataset != FOLDER or inp.vtab_task or not inp.data_dir:
        return
    export_dir = config.export.enabled and config.export.export_dir

    def real(path: str) -> str:
        path = str(path)
        return path.rstrip("/") if "://" in path else os.path.realpath(
            os.path.expanduser(path))

    root = real(inp.data_dir)
    for name in _RUN_FOLDERS:
        written = real(os.path.join(str(workdir), name))
        if root == written or root.startswith(written + "/"):
            raise UsageError(
                f"The image folder {inp.data_dir} (config.input.data_dir) is "
                f"{'' if root == written else 'inside '}the run's {name}/ "
                f"folder of `workdir` {workdir}, which the run writes (and "
                "sets an earlier run's aside): move the images to a folder "
                "of their own, or give the run another workdir.")
    for field, path in (("`workdir`", workdir),
                        ("config.export.export_dir", export_dir)):
        run = real(path) if path else ""
        if run == root or run.startswith(root.rstrip("/") + "/"):
            raise UsageError(
                f"{field} {path} is {'' if run == root else 'inside '}the "
                f"image folder {inp.data_dir} (config.input.data_dir): its "
                "next reading would take the run's files (checkpoints/, "
                "train/, ...) for classes and images. Give the run a "
                "folder outside it.")


# A model export's files (keras-vit-export's SavedModel folders).
_EXPORT_FILES = ("saved_model.pb", "models.config")
# A run's own files (storage.workdir): a folder holding one is a run's,
# whose config.json may be set aside (config.before-N.json) or gone.
_RUN_FILES = ("checkpoints", "history.csv", "metrics.json",
              "training_curves.png", "labels.txt")


def check_workdir_holds_no_data(workdir: str, most: int = 200) -> None:
    """Refuses a new run's local `workdir` (none of a run's files) that
    holds images, at its top or in a folder one level down (an image folder,
    given as --workdir by mistake), or a model export: the run's files
    (checkpoints/, train/, ...) would be written among them and read as
    classes and images, or models, next time. `most`: the entries of
    each folder looked at."""
    local = os.path.expanduser(workdir)
    if "://" in workdir or not os.path.isdir(local):
        return
    folders = [local]
    for folder in folders:  # (the sub-folders added by the first)
        try:
            names = sorted(os.listdir(folder))[:most]
        except OSError:  # (the run's own writes say why)
            continue
        if folder == local:
            if any(n in _RUN_FILES or n.startswith("config.") for n in names):
                return
            folders += [os.path.join(folder, n) for n in names if not (
                n.startswith(".")) and os.path.isdir(os.path.join(folder, n))]
        found = next((n for n in names if is_image(n) or n in _EXPORT_FILES
                      or os.path.isfile(os.path.join(
                          folder, n, _EXPORT_FILES[0]))), None)
        if found:
            kind = ("an image folder" if is_image(found)
                    else "a model export")
            raise UsageError(
                f"--workdir {workdir} holds {os.path.join(folder, found)} "
                f"and no run's config.json: it is {kind}, among whose files "
                "the run would write its own (checkpoints/, train/, ...). "
                "Give the run a folder of its own.")

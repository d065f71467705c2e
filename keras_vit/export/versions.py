"""The version folders of an exported model, and how a new one appears.

TF Serving serves the highest integer-named folder under a model's base
path and ignores the others, so a version is written under a dotted
temporary name (`temporary_version`) and published when complete
(`publish_version`): on a local disk by one rename, which a server sees
all at once; on a URL such as gs://, where a folder has no rename (the
GCS file system copies its objects one at a time), by a copy whose
`saved_model.pb` comes last. A version folder that holds a
`saved_model.pb` is then whole, wherever it is; one an export was killed
in the middle of publishing has none, which TF Serving fails to load
(the version before it stays served) and the next export names
(`warn_incomplete`).
"""

from __future__ import annotations

import posixpath
import re
from typing import List

import tensorflow as tf
from absl import logging

from keras_vit.errors import UsageError
from keras_vit.export.files import join
from keras_vit.storage import atomic, leftovers
from keras_vit.storage.version_names import MAX_VERSION, version_folders

# The file of a SavedModel that TF Serving reads first: a version's
# other files are in place before it is.
GRAPH_FILE = "saved_model.pb"


def existing_versions(model_dir: str) -> List[int]:
    """list of int. The versions of the folders in `model_dir` that TF
    Serving reads as numbers (`storage.version_names`), in order."""
    return [number for number, _ in _folders(model_dir)]


def _folders(model_dir: str):
    """(version, folder name) of the version folders in `model_dir`."""
    if not tf.io.gfile.isdir(model_dir):
        return []
    return version_folders(tf.io.gfile.listdir(model_dir))


def next_version(model_dir: str, after: int = 0) -> int:
    """int. One more than the highest existing version (1 for none) and
    than `after`; a UsageError past MAX_VERSION, the largest TF Serving
    reads (a folder of a larger number would be written and never
    served)."""
    version = max(existing_versions(model_dir) + [after], default=0) + 1
    if version > MAX_VERSION:
        raise UsageError(
            f"{model_dir} holds version {version - 1:,}, the largest TF "
            "Serving reads (2**63 - 1), so there is no next one: pass a "
            "free `version` below it, or another `model_name`.")
    return version


def warn_incomplete(model_dir: str) -> List[int]:
    """Warns of each version folder in `model_dir` without a
    saved_model.pb (an export killed while it copied the version to a
    gs:// folder, or a folder made by hand), which TF Serving cannot
    load; those versions."""
    missing = [(v, name) for v, name in _folders(model_dir) if not
               tf.io.gfile.exists(join(model_dir, name, GRAPH_FILE))]
    for _, name in missing:
        logging.warning(
            "%s holds no %s: that version was not completely published (an "
            "export stopped while copying it) and TF Serving cannot load "
            "it. Remove the folder; this export takes the next number.",
            join(model_dir, name), GRAPH_FILE)
    return [version for version, _ in missing]


def publish_version(
    tmp_dir: str, model_dir: str, version: int, auto: bool
) -> str:
    """Moves a complete temporary export (flushed to disk:
    `atomic.sync_tree`) to its version folder: renamed on a local disk,
    copied with its saved_model.pb last on a URL (`copy_version`).

    Never replaces an existing version: with `auto`, a version taken in the
    meantime (another export to the same folder) moves this one to the next
    free number; otherwise it is an error.

    Returns:
        str. The version folder.
    """
    if not auto:  # listed for a version given by hand alone (gs://)
        _check_given(model_dir, version)
    while True:
        final = join(model_dir, str(version))
        if tf.io.gfile.exists(final):
            if not auto:
                _taken(version, final)
            # Past it: a folder there that is no version (read) is passed.
            version = next_version(model_dir, after=version)
            continue
        if not renames_whole(model_dir):
            copy_version(tmp_dir, final)
            remove_tree(tmp_dir)
            return final
        try:
            tf.io.gfile.rename(tmp_dir, final, overwrite=False)
        except (tf.errors.AlreadyExistsError,
                tf.errors.FailedPreconditionError,  # a folder there since
                FileExistsError, OSError):
            if auto and tf.io.gfile.exists(final):
                continue
            raise
        atomic.sync_folder(model_dir)  # the rename itself
        return final


def _check_given(model_dir: str, version: int) -> None:
    """A version given by hand: refused where a folder of that number is
    there under another name ("007" for 7), warned of below the newest
    (an automatic one is past it by construction)."""
    folders = _folders(model_dir)
    for number, name in folders:
        if number == version:
            _taken(version, join(model_dir, name))
    newest = max((number for number, _ in folders), default=0)
    if version < newest:
        logging.warning(
            "Version %d is below the newest in %s, %d: TF Serving's default "
            "policy (the latest version) serves %d, not this one; leave "
            "the version out for the next free one.", version, model_dir,
            newest, newest)


def _taken(version: int, folder: str) -> None:
    raise FileExistsError(
        f"Version {version} already exists at {folder}; pass another "
        "version (or none for the next free one).")


def renames_whole(path: str) -> bool:
    """bool. Whether a folder under `path` is renamed at once (a local
    disk), not copied object by object (a URL: gs:// and the like)."""
    return not atomic.is_remote(path)


def copy_version(source: str, target: str) -> None:
    """Copies the SavedModel folder `source` to `target` (not there yet)
    file by file, its saved_model.pb after every other file. A failure
    removes what was copied: no part of a version stays behind."""
    folders, files = [], []
    for folder, _, names in tf.io.gfile.walk(source):
        inner = folder[len(source):].strip("/")
        folders.append(inner)
        files += [posixpath.join(inner, name) for name in names]
    files.sort(key=lambda name: (name == GRAPH_FILE, name))
    try:
        for inner in folders:  # the empty ones too
            tf.io.gfile.makedirs(join(target, inner) if inner else target)
        for name in files:
            tf.io.gfile.copy(join(source, name), join(target, name),
                             overwrite=False)
    except BaseException:
        remove_tree(target)
        raise


def remove_tree(path: str) -> None:
    """Deletes a folder if present; never raises (used on error paths)."""
    try:
        if tf.io.gfile.exists(path):
            tf.io.gfile.rmtree(path)
    except (tf.errors.OpError, OSError):
        pass


def temporary_version(model_dir: str, version: int) -> str:
    """The folder a version is written in before it is published,
    .tmp-<version>-<host>-<pid>: TF Serving ignores folders whose name is
    not an integer."""
    return join(model_dir, f".tmp-{version}-{leftovers.writer()}")


# An unpublished version's folder: (host or None)-(pid) its writer.
_UNPUBLISHED = re.compile(r"\.tmp-\d+-(?:([A-Za-z0-9._]+)-)?(\d+)")


def remove_orphans(model_dir: str) -> None:
    """Removes the unpublished versions (.tmp-<version>-<host>-<pid>)
    that an export killed outright (kill -9) left in a local `model_dir`:
    those of this machine's processes no longer running (and those named
    without a machine, .tmp-<version>-<pid>, by earlier versions)."""
    leftovers.remove_killed(model_dir, _UNPUBLISHED, "an export")

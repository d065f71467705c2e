"""Where a command writes: its output path checked before any work
(`check_output_path`, a folder the user may write or the run's folder
written in its place) and an earlier output kept unless --overwrite
(`check_not_written`). `keras_vit.commands.flags` gives both to the
commands."""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Callable, ContextManager, Optional, Tuple

from absl import flags

from keras_vit.errors import UsageError
from keras_vit.storage import atomic


def check_output_path(values: flags.FlagValues, name: str,
                      folder: bool = True,
                      default: Optional[Tuple[str, Optional[str]]] = None
                      ) -> None:
    """A UsageError, before any work, when local path --`name` (a folder;
    `folder` False: a file, whose folder is checked) cannot be made: a part
    of it is a file, or this user may not make a folder in the nearest
    folder there is; gs:// paths are the storage's to check (one out of
    reach is found, as an error of TensorFlow's, before the work). A
    leading `~` is the home folder, as in --model (the shell leaves it
    after `=`): the flag's value becomes the expanded path. Without the
    flag, `default` (the flag and folder written in its place, such as
    ("workdir", the run's workdir)) is checked alike."""
    path = values[name].value
    flag, place = default or (None, None)
    if not path and place and "://" not in str(place):
        probe = _nearest_folder(os.path.abspath(os.path.expanduser(place)))
        if os.path.isdir(probe):  # (under a file: the source's to say)
            _check_writable(probe, f"its results go there without --{name}"
                            f": give --{name} a folder this user may write",
                            f"--{flag}={place}")
        return
    if path and "://" in str(path):
        try:  # a bucket out of reach: found before the work
            atomic.exists(str(path))
        except Exception as error:  # noqa: BLE001 - TensorFlow's file errors
            if not hasattr(error, "message"):
                raise
            reason = (str(error.message).strip().splitlines() or [""])[0]
            raise UsageError(
                f"--{name}={path} cannot be reached ({reason[:300]}): check "
                "the path and this machine's access to it.") from None
    if not path or "://" in str(path):
        return
    path = values[name].value = os.path.expanduser(str(path))
    if not folder and os.path.isdir(str(path)):
        raise UsageError(f"--{name}={path} is a folder: name a file in it "
                         "or another path.")
    probe = _nearest_folder(os.path.abspath(
        str(path) if folder else os.path.dirname(os.path.abspath(str(path)))))
    if os.path.exists(probe) and not os.path.isdir(probe):
        raise UsageError(f"--{name}={path}: {probe} is a file, not a "
                         "folder. Choose another path.")
    _check_writable(probe, f"give --{name} a "
                    f"{'folder' if folder else 'path'} this user may write",
                    path)


def _nearest_folder(path: str) -> str:
    """`path`, or the nearest folder above it that exists."""
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _check_writable(probe: str, fix: str, path: Optional[str] = None
                    ) -> None:
    """A UsageError ending in `fix` unless this user may make a file in
    the folder `probe` (for the output `path`, where it is below it)."""
    try:  # what making the output does first, found before the work
        os.rmdir(tempfile.mkdtemp(prefix=".keras-vit-probe-", dir=probe))
    except OSError as error:
        reason = (error.strerror or str(error)).lower()
        raise UsageError(
            f"Cannot write {path or probe} ({reason} in {probe}): {fix}."
        ) from None


def check_not_written(path: str, flag: str) -> None:
    """A UsageError, before any work, when a file is already at `path`
    (the output that --`flag` names) and --overwrite was not given: a
    user's earlier result is never replaced by accident (a dangling link
    there too: its target would be made)."""
    if atomic.exists(path) or (not atomic.is_remote(path)
                               and os.path.lexists(path)):
        raise UsageError(
            f"{path} already exists: pass --overwrite to replace it, or "
            f"choose another --{flag}.")


@contextlib.contextmanager
def results_held(output_dir: str, *, shared: bool,
                 hold: Callable[[str], ContextManager],
                 evaluated: Optional[str] = None):
    """A few-shot or VTAB-1k run's output folder, made where missing and
    held for the run (`hold(folder)`: the chief's lock, voted on by a
    cluster's workers, `training.state.held_run`): each run checks the
    results there when it starts, so two at once would write one model's
    (or recipe's) results among the other's. `shared`: a cluster's
    workers share the folder. The run folder evaluated (`evaluated`,
    --workdir) is not held: its training holds it, and writes beside the
    results. A run that leaves the folder it made empty (stopped at once,
    failed) removes it; a refused one leaves it to the run that holds
    it."""
    made = atomic.make_folders(output_dir)
    if shared:
        made = None  # another worker's too: never removed here
    own = evaluated and not atomic.is_remote(output_dir) and (
        os.path.realpath(output_dir) == os.path.realpath(evaluated))
    with contextlib.nullcontext() if own else hold(output_dir), \
            atomic.removed_if_refused(output_dir, made):
        yield

"""The one line a command prints when the machine runs out of something
(memory, or another resource TensorFlow counts, and disk space) or will
not let this user use a path (`exhausted_line`, `not_permitted`).

Each names what ran out (the allocation, the file) and the fix in the
flags the command has; `runner.run` prints it instead of a traceback.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Optional

from keras_vit.errors import failed_allocation, is_disk_full
from keras_vit.storage import atomic


def exhausted_line(error: BaseException, values=None) -> Optional[str]:
    """The line for memory or a resource run out, a full disk, or a path
    the file system refuses (`refused_path`); None for another error."""
    if isinstance(error, MemoryError) or (
            type(error).__name__ == "ResourceExhaustedError"):
        return disk_full(error, values) or out_of_memory(error, values)
    return disk_full(error, values) or refused_path(error)


def refused_path(error: BaseException) -> Optional[str]:
    """The line for a path the file system refuses otherwise than by
    permissions: a folder where a file goes (or a file where a folder
    goes), a bucket out of reach (TensorFlow's file errors, raised from
    tf.io.gfile: a FailedPreconditionError, an UnavailableError ...);
    None for another error. A path the message names on a later line (a
    bucket's, after the HTTP error) is added to its first."""
    if isinstance(error, (IsADirectoryError, NotADirectoryError)):
        return (f"{error.filename}: {str(error.strerror).lower()}; check the "
                "path (a folder where a file goes, or the other way?).")
    frames = _frames(getattr(error, "__traceback__", None))
    if not hasattr(error, "message") or not any(
            f.endswith(os.path.join("lib", "io", "file_io.py"))
            for f in frames):
        return None
    text = str(error.message).strip()
    first = (text.splitlines() or [""])[0][:300]
    named = re.search(r"(?:\w+://|/)[^\s;,'\"]+", text)
    if named and "/" not in first:
        first += f" ({named.group(0)})"
    return (f"{first.rstrip('.')}: check the path and this machine's access "
            "to it.")


def _frames(trace) -> list:
    """The file names of a traceback's frames."""
    names = []
    while trace is not None:
        names.append(trace.tb_frame.f_code.co_filename)
        trace = trace.tb_next
    return names


def out_of_memory(error: BaseException,
                  values=None) -> str:
    """The line for a run out of memory (or another resource TensorFlow
    ran out of): its allocation that failed (the first line, without the
    allocator's report) and the fix, in the flags the command has."""
    what = failed_allocation(error)
    memory = what.startswith("OOM ") or isinstance(error, MemoryError)
    batch = [flag for flag, name in (("config.input.batch_size", "config"),
                                     ("--batch_size", "batch_size"))
             if values is not None and name in values]
    lower = (f"the batch size ({' or '.join(batch)}), " if batch
             else "the batch size, ")
    # A resize given, where the allocation that failed is of its size.
    given = (values["resize_size"].value if values is not None
             and "resize_size" in values else None)
    resize = (f"--resize_size={given}, " if given and re.search(
        rf"\b{given}\b", what) else "")
    return (f"{'Out of memory' if memory else 'Resources exhausted'} "
            f"({what}): lower {resize}{lower}the image size or the model, "
            "or run on a machine with more memory.")


def disk_full(error: BaseException, values=None) -> Optional[str]:
    """The line for a full disk (TensorFlow's "<file>; No space left on
    device", an OSError ENOSPC): the file, else the folder written; None if
    not."""
    if not is_disk_full(error):
        return None
    text = str(getattr(error, "message", error))
    named = re.search(r"(?:^|\s)(\S+); No space left", text)
    # The folder the command writes: --output_dir where given (evaluate,
    # analysis), else --workdir.
    flag = next((f for f in ("output_dir", "workdir") if values is not None
                 and f in values and getattr(values, f)), None)
    path = getattr(error, "filename", None) or (
        named.group(1) if named else flag and getattr(values, flag))
    fix = "write to a larger disk." if flag is None else (
        f"use {'an' if flag == 'output_dir' else 'a'} --{flag} on a larger "
        "disk" + (
            "." if "output_dir" in values
            else _checkpoint_kept(getattr(values, flag))))
    where = f" writing {path}" if path else ""
    return f"The disk is full{where}: free space or {fix}"


def _checkpoint_kept(workdir: str) -> str:
    """What a training run that filled the disk keeps: its last complete
    checkpoint, or none where it saved none yet (a local workdir without
    a checkpoint's index)."""
    found = "://" in workdir or glob.glob(
        os.path.join(glob.escape(workdir), "checkpoints", "*.index"))
    return ("; the last complete checkpoint is kept." if found
            else "; no checkpoint was complete yet, so the run starts "
            "again from step 0.")


_DENIED = re.compile(r"(?:^|\s)(\S+); (Permission denied|Operation not "
                     r"permitted|Read-only file system)")
# The flags that name what a command writes.
_OUTPUT_FLAGS = ("export_dir", "output_dir", "output", "workdir")


def not_permitted(error: BaseException, values=None) -> Optional[str]:
    """The line for a path this user may not use (Python's PermissionError,
    TensorFlow's PermissionDeniedError "<path>; Operation not permitted"):
    the path and, where it is under an output flag's path, that flag;
    None if not such an error."""
    if isinstance(error, PermissionError):
        if not error.filename:
            return None  # its own message says it
        path, reason = error.filename, error.strerror or "Permission denied"
    else:
        match = _DENIED.search(str(getattr(error, "message", "")))
        if type(error).__name__ != "PermissionDeniedError" or not match:
            return None
        path, reason = match.groups()
    path = str(path) if path else "a path"
    flag = next((f for f in _OUTPUT_FLAGS if values is not None
                 and f in values and getattr(values, f)
                 and _under(path, str(getattr(values, f)), f == "output")),
                None)
    if flag is None:
        return f"{path}: {reason.lower()}; check its permissions."
    return (f"Cannot write {path} ({reason.lower()}): give --{flag} a "
            "folder this user may write.")


def _under(path: str, named: str, file: bool) -> bool:
    """`path` is `named`, inside it (a folder), or its atomic write's
    temporary file (`file`: <name>.tmp-<hex><extension> beside it)."""
    if "://" in path or "://" in named:
        return path == named or (not file and path.startswith(
            named.rstrip("/") + "/"))
    path, named = os.path.abspath(path), os.path.abspath(named)
    if not file:
        return path == named or path.startswith(named + os.sep)
    return atomic.final_names(path) == named

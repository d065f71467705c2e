"""Atomic file writes, local or remote: every file the project writes goes
through `atomic_write`.

The content goes to a temporary name beside the destination
(`<name>.tmp-<random><extension>`), which is renamed over the destination
once complete. A crash, a full disk or an exception in a writer therefore
leaves the destination as it was (old content, or absent) and never a
partial file; the temporary file is removed on every error a process
survives (a hard kill can leave it, under a name no reader looks for
and which names its writer: the next write of the file removes it).

Local paths use `os.replace` (atomic on POSIX and Windows) after an
`fsync`; a folder another library wrote is flushed whole before it is
renamed into place (`sync_tree`). Remote URLs (`gs://`, any scheme
`tf.io.gfile` knows) go through `tf.io.gfile`; on GCS an object appears
whole when its upload completes, so readers never see a partial object
either. TensorFlow is imported only
for remote paths: local writes work where TensorFlow is not installed
(the benchmarks under the JAX backend).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import os
import re
import shutil
import signal
import tempfile
import uuid
from typing import Callable, Iterator, Optional, Union

from keras_vit.errors import check_stop, holding_signals, send_again
from keras_vit.storage import leftovers

# Writes the file at the (local, temporary) path it is given: for writers
# that take a path, such as `keras.Model.save` or `np.savez`.
Writer = Callable[[str], None]
Content = Union[str, bytes, Writer]


def is_remote(path: str) -> bool:
    """bool. Whether `path` is a URL (gs://, ram://, ...), not a local
    path."""
    return "://" in str(path)


def absolute(path: Union[str, os.PathLike]) -> str:
    """str. A local path made absolute; a URL as it is: where a model or a
    folder is, so that two named alike (two runs called `run`) differ."""
    path = os.fspath(path)
    return path if is_remote(path) else os.path.abspath(path)


def exists(path: Union[str, os.PathLike]) -> bool:
    """bool. Whether a file or folder is at `path` (local, or a URL through
    `tf.io.gfile`)."""
    path = os.fspath(path)
    if not is_remote(path):
        return os.path.exists(path)
    import tensorflow as tf  # only remote paths need TensorFlow

    return tf.io.gfile.exists(path)


def make_folders(path: str) -> Optional[str]:
    """Makes the folder `path` where it is missing, with its parents; the
    outermost folder this made (`path`, or a missing parent of a local
    one), None if none. Raises `tf.errors.OpError` where it cannot."""
    import tensorflow as tf  # (as `exists`)

    missing = None if tf.io.gfile.exists(path) else path
    while missing and not is_remote(path):
        parent = os.path.dirname(os.path.abspath(missing))
        if parent == missing or os.path.exists(parent):
            break
        missing = parent
    tf.io.gfile.makedirs(path)
    return missing


def remove_made(path: str, up_to: Optional[str] = None) -> None:
    """Removes the folder `path` that work which failed made, when it
    holds no file; a file anywhere keeps it. With `up_to` (the outermost
    folder made with it: `make_folders`), its parents up to that one go
    too, each only while empty (another process may have written beside
    it meanwhile)."""
    import tensorflow as tf  # (as `exists`)

    try:
        for _, _, files in tf.io.gfile.walk(path):
            if files:
                return
        tf.io.gfile.rmtree(path)
    except tf.errors.OpError:
        return
    if not up_to or is_remote(path):
        return
    parent, top = os.path.abspath(path), os.path.abspath(up_to)
    while parent != top and parent.startswith(top + os.sep):
        parent = os.path.dirname(parent)
        try:
            os.rmdir(parent)
        except OSError:  # not empty, or not ours to remove
            return


@contextlib.contextmanager
def removed_if_refused(path: str, made: Optional[str],
                       refusals=BaseException) -> Iterator[None]:
    """Within: where the block raises one of `refusals`, the folder `path`
    goes again (`remove_made`, while it holds no file) when this process
    made it: `made` is `make_folders`' answer (None: it made nothing, or
    others share the folder)."""
    try:
        yield
    except refusals:
        if made:  # and the parents made for it, while empty
            remove_made(path, up_to=made)
        raise


def open_binary(path: Union[str, os.PathLike]):
    """The file at `path` opened for reading bytes (local, or a URL through
    `tf.io.gfile`)."""
    path = os.fspath(path)
    if is_remote(path):
        import tensorflow as tf  # only remote paths need TensorFlow

        return tf.io.gfile.GFile(path, "rb")
    return open(path, "rb")


def read_bytes(path: Union[str, os.PathLike]) -> bytes:
    """bytes. The content of the file at `path` (`open_binary`)."""
    with open_binary(path) as f:
        return f.read()


def sha256(path: Union[str, os.PathLike]) -> str:
    """str. The SHA-256 of the file at `path` (`open_binary`) in hex, read
    16 MiB at a time."""
    digest = hashlib.sha256()
    with open_binary(path) as f:
        for chunk in iter(lambda: f.read(16 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _split(path: str) -> tuple:
    """(root, extension) of `path`, ".keras" alone an extension too."""
    root, extension = os.path.splitext(path)
    if not extension and os.path.basename(path).startswith("."):
        # ".keras" alone: splitext reads it as a hidden name, no extension.
        root = os.path.join(os.path.dirname(path), "")
        extension = os.path.basename(path)
    return root, extension


def temporary_name(path: str) -> str:
    """str. A fresh temporary sibling of `path` that keeps its extension
    (Keras and NumPy check it) and names its writer (`leftovers.writer`):
    `a/model.keras` -> `a/model.tmp-<hex>-<host>-<pid>.keras`."""
    root, extension = _split(path)
    return (f"{root}.tmp-{uuid.uuid4().hex[:12]}-{leftovers.writer()}"
            f"{extension}")


# The mark `temporary_name` puts before a path's extension (without its
# writer: of earlier versions).
_TEMPORARY_MARK = re.compile(r"\.tmp-[0-9a-f]{12}(?:-" + leftovers.WRITER
                             + ")?")


def _remove_killed_temporaries(path: str) -> None:
    """Removes what writes of local `path` killed outright left (kill -9):
    their temporaries, which no reader looks for (a model's are large)."""
    root, extension = _split(path)
    leftovers.remove_killed_paths(
        glob.glob(glob.escape(root) + ".tmp-*" + glob.escape(extension)),
        re.compile(re.escape(os.path.basename(root)) + r"\.tmp-[0-9a-f]{12}-"
                   + leftovers.WRITER + re.escape(extension)), "a write")


def final_names(text: str) -> str:
    """`text` (a path, an error message) with each `temporary_name` read
    as the file it becomes: `a/model.tmp-<hex>.keras` -> `a/model.keras`."""
    return _TEMPORARY_MARK.sub("", text)


def atomic_write(path: Union[str, os.PathLike], content: Content,
                 replace: bool = True) -> None:
    """Writes `content` to `path` via a temporary file and a rename.

    Args:
        path: str or path. Local path or URL; missing parent folders are
            created.
        content: str (written as UTF-8), bytes, or a callable that writes
            the file at the local path it is given (for remote `path`, a
            local temporary file that is then copied up).
        replace: bool. Replace a file at `path`; False: a FileExistsError
            when one is there at the moment of publishing, nothing
            written (a local file is published with a hard link, which
            fails on an existing name; a remote one is checked by
            gfile just before its rename).
    """
    path = os.fspath(path)
    if is_remote(path):
        _write_remote(path, content, replace)
    else:
        _write_local(path, content, replace)


def _publish_local(tmp: str, path: str, replace: bool) -> None:
    """Renames `tmp` to `path`; without `replace`, a FileExistsError where
    a file is at `path` (hard-linked, then the temporary name removed;
    on a file system without hard links, checked just before)."""
    if replace:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError:  # no hard links here (FAT, some network mounts)
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST),
                                  path) from None
        os.replace(tmp, path)
        return
    _remove_local(tmp)  # published: the temporary name is only left over


def _write_local(path: str, content: Content, replace: bool = True) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    _remove_killed_temporaries(path)
    tmp = temporary_name(path)
    try:
        if callable(content):
            content(tmp)
            if not os.path.isfile(tmp):
                raise RuntimeError(
                    f"The writer for {path} wrote no file at {tmp}."
                )
        else:
            with open(tmp, "wb") as f:
                f.write(_as_bytes(content))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        check_stop()  # a stop that a library swallowed: nothing published
        _publish_local(tmp, path, replace)
    except BaseException:
        _remove_local(tmp)
        raise


def _write_remote(path: str, content: Content, replace: bool = True
                  ) -> None:
    import tensorflow as tf  # only remote paths need TensorFlow

    gfile = tf.io.gfile
    folder = path.rsplit("/", 1)[0]
    if folder and not folder.endswith(":/"):
        gfile.makedirs(folder)
    tmp = temporary_name(path)
    local_folder = None
    try:
        if callable(content):
            # Writers take a local path: write there, then copy up.
            local_folder = tempfile.mkdtemp(prefix="keras_vit_write_")
            local = os.path.join(local_folder, os.path.basename(path))
            content(local)
            gfile.copy(local, tmp, overwrite=True)
        else:
            with gfile.GFile(tmp, "wb") as f:
                f.write(_as_bytes(content))
        check_stop()
        try:
            gfile.rename(tmp, path, overwrite=replace)
        except tf.errors.AlreadyExistsError:
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST),
                                  path) from None
    except BaseException:
        try:
            if gfile.exists(tmp):
                gfile.remove(tmp)
        except (tf.errors.OpError, OSError):
            pass
        raise
    finally:
        if local_folder is not None:
            shutil.rmtree(local_folder, ignore_errors=True)


def _as_bytes(content: Union[str, bytes]) -> bytes:
    if isinstance(content, str):
        return content.encode("utf-8")
    if isinstance(content, (bytes, bytearray, memoryview)):
        return bytes(content)
    raise TypeError(
        f"atomic_write writes str, bytes or a writer callable, not "
        f"{type(content).__name__}."
    )


def sync_tree(path: str) -> None:
    """Flushes a local folder that another library wrote (a SavedModel),
    every file and folder in it, to the disk (`fsync`) before a rename
    publishes it: after a power loss the published folder then holds
    whole files, not empty ones. A URL: nothing to do (an object is whole
    once its upload completes)."""
    if is_remote(path):
        return
    mode = "rb+" if os.name == "nt" else "rb"  # Windows: writable only
    for folder, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(folder, name), mode) as f:
                os.fsync(f.fileno())
        sync_folder(folder)


def sync_folder(path: str) -> None:
    """Flushes a local folder's entries (a rename into it) to the disk;
    a URL, or a system that cannot open a folder (Windows), is left."""
    if is_remote(path):
        return
    try:
        handle = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


def _remove_local(tmp: str) -> None:
    try:
        if os.path.exists(tmp):
            os.remove(tmp)
    except OSError:
        pass


# What a block of `signals_deferred` finished before the signal it held
# stopped the command (`written_before_stop`).
_WRITTEN_BEFORE_STOP: list = []


@contextlib.contextmanager
def signals_deferred() -> Iterator[list]:
    """Ctrl-C and SIGTERM wait until the block ends (a few quick writes
    that belong together, such as publishing an export and listing it in
    models.config), then act as they would have. The block appends to
    the list it is given what it wrote whole; where a held signal then
    stops the command, `written_before_stop` says so. Outside the main
    thread the block runs as it is."""
    check_stop()  # a stop that a library swallowed: not published
    caught, written = [], []
    _WRITTEN_BEFORE_STOP.clear()
    signums = (signal.SIGINT, signal.SIGTERM)
    try:
        previous = {s: signal.signal(s, lambda n, f: caught.append(n))
                    for s in signums}
    except ValueError:  # not the main thread
        yield written
        return
    try:
        with holding_signals():
            yield written
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if caught:
            _WRITTEN_BEFORE_STOP[:] = written
        for signum in dict.fromkeys(caught):
            send_again(signum)


def written_before_stop() -> list:
    """The paths a `signals_deferred` block wrote whole before the signal
    it held stopped the command (a command's stop line names them: the
    work is there, not to be done again); told once (then cleared)."""
    written = list(_WRITTEN_BEFORE_STOP)
    _WRITTEN_BEFORE_STOP.clear()
    return written

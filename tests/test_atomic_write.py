"""keras_vit.storage.atomic: the one helper every file write goes through.

A write either replaces the file whole or leaves the old one: an exception
in the middle (a full disk, a failing writer) leaves the old content and no
temporary file; a process killed in the middle leaves the old content, and
its partial data only under a temporary name.
"""

import errno
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from keras_vit.checkpoint.formats import npz as checkpoint_io
from keras_vit.storage import atomic, leftovers
from keras_vit.storage.atomic import atomic_write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _names(folder):
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("content, expected", [
    ("héllo\n", "héllo\n".encode("utf-8")),
    (b"\x00\x01binary", b"\x00\x01binary"),
])
def test_str_and_bytes_replace_the_file_whole(tmp_path, content, expected):
    path = tmp_path / "sub" / "out.txt"  # the folder is created
    atomic_write(path, "old")
    atomic_write(path, content)
    assert path.read_bytes() == expected
    assert _names(path.parent) == ["out.txt"]


def test_a_writer_gets_a_temporary_path_with_the_same_extension(tmp_path):
    seen = []

    def writer(tmp):
        seen.append(tmp)
        np.savez(tmp, x=np.arange(3))  # adds .npz unless the name has it

    path = tmp_path / "arrays.npz"
    atomic_write(str(path), writer)
    assert seen[0].endswith(".npz") and seen[0] != str(path)
    assert os.path.dirname(seen[0]) == str(tmp_path)
    np.testing.assert_array_equal(np.load(path)["x"], np.arange(3))
    assert _names(tmp_path) == ["arrays.npz"]



@pytest.mark.parametrize("name", ["m.keras", ".keras", ".hidden.keras", "m"])
def test_a_temporary_name_keeps_the_extension_of_any_name(tmp_path, name):
    """".keras" alone is a hidden name to splitext, not an extension:
    Keras would refuse a temporary "x/.keras.tmp-<hex>"."""
    path = str(tmp_path / name)
    tmp = atomic.temporary_name(path)
    assert os.path.dirname(tmp) == str(tmp_path) and tmp != path
    assert tmp.endswith(os.path.splitext(name)[1] or (
        name if name.startswith(".") else ""))
    assert atomic.final_names(tmp) == path

def test_a_write_removes_what_killed_writes_of_its_file_left(tmp_path):
    """A temporary name carries its writer (host-pid): the next write of
    the same file removes those of writers gone from this machine (a
    kill -9 mid-write: a model's can be gigabytes), and keeps those of a
    running writer, of another machine and of earlier versions (no
    writer named), and every other file's."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    here = leftovers.HOST
    killed = [f"backbone.tmp-0123456789ab-{here}-{gone.pid}.npz"]
    (tmp_path / killed[0]).write_bytes(b"partial")
    folder = f"export.tmp-00000000000a-{here}-{gone.pid}.keras"
    (tmp_path / folder).mkdir()  # a writer that writes a folder
    (tmp_path / folder / "part").write_bytes(b"partial")
    kept = [f"backbone.tmp-0123456789ab-{leftovers.writer()}.npz",
            f"backbone.tmp-0123456789ab-other.host-{gone.pid}.npz",
            "backbone.tmp-0123456789ab.npz",
            f"other.tmp-0123456789ab-{here}-{gone.pid}.npz",
            f"backbone.tmp-0123456789ab-{here}-{gone.pid}.json"]
    for name in kept:
        (tmp_path / name).write_bytes(b"partial")
    atomic_write(tmp_path / "backbone.npz",
                 lambda tmp: np.savez(tmp, x=np.arange(2)))
    atomic_write(tmp_path / "export.keras", b"whole")
    assert _names(tmp_path) == sorted(
        kept + ["backbone.npz", "export.keras"])
    name = os.path.basename(atomic.temporary_name(str(tmp_path / "a.npz")))
    assert name.startswith("a.tmp-") and name.endswith(
        f"-{leftovers.writer()}.npz")
    assert atomic.final_names(f"/x/{kept[1]} is cut") == (
        "/x/backbone.npz is cut")


def test_an_exception_mid_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "metrics.json"
    atomic_write(path, '{"accuracy": 0.9}')

    def full_disk(tmp):
        with open(tmp, "w") as f:
            f.write('{"accur')  # half of the new content
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic_write(path, full_disk)
    assert path.read_text() == '{"accuracy": 0.9}'
    assert _names(tmp_path) == ["metrics.json"]  # no temporary file left


def test_an_interrupted_str_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "labels.txt"
    atomic_write(path, "a\nb\n")

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", no_space)
    with pytest.raises(OSError):
        atomic_write(path, "c\nd\ne\n")
    assert path.read_text() == "a\nb\n"
    assert _names(tmp_path) == ["labels.txt"]


def test_a_writer_that_writes_nothing_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="wrote no file"):
        atomic_write(tmp_path / "m.keras", lambda tmp: None)
    assert _names(tmp_path) == []


def test_other_content_is_refused(tmp_path):
    with pytest.raises(TypeError, match="str, bytes or a writer"):
        atomic_write(tmp_path / "x", 3)
    assert _names(tmp_path) == []


_KILLED = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, sys.argv[1])
    from keras_vit.storage.atomic import atomic_write

    def killed(tmp):
        with open(tmp, "w") as f:
            f.write("partial")
            f.flush()
        os._exit(9)  # as a kill -9 in the middle of the write

    atomic_write(sys.argv[2], killed)
""")


@pytest.mark.slow
def test_a_killed_process_leaves_the_old_file(tmp_path):
    path = tmp_path / "config.json"
    atomic_write(path, "{}\n")
    script = tmp_path / "kill.py"
    script.write_text(_KILLED)
    run = subprocess.run([sys.executable, str(script), ROOT, str(path)],
                         timeout=300)
    assert run.returncode == 9
    assert path.read_text() == "{}\n"
    leftovers = [n for n in _names(tmp_path) if n not in
                 ("config.json", "kill.py")]
    # The partial data is only under a temporary name, which the next
    # write does not reuse.
    assert len(leftovers) == 1 and leftovers[0].startswith("config.tmp-")
    assert leftovers[0].endswith(".json")
    atomic_write(path, '{"a": 1}\n')
    assert path.read_text() == '{"a": 1}\n'
    # The killed writer's partial file goes with the next write.
    assert _names(tmp_path) == ["config.json", "kill.py"]


def test_remote_paths_go_through_gfile():
    tf = pytest.importorskip("tensorflow")
    root = "ram://keras_vit_atomic_test"
    atomic_write(f"{root}/a/t.txt", "text")
    atomic_write(f"{root}/a/b.bin", b"\xff\x00")
    atomic_write(f"{root}/a/n.npz", lambda tmp: np.savez(tmp, x=np.ones(4)))
    with tf.io.gfile.GFile(f"{root}/a/t.txt", "rb") as f:
        assert f.read() == b"text"
    with tf.io.gfile.GFile(f"{root}/a/b.bin", "rb") as f:
        assert f.read() == b"\xff\x00"
    np.testing.assert_array_equal(
        checkpoint_io.read_npz(f"{root}/a/n.npz")["x"], np.ones(4))

    def failing(tmp):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError):
        atomic_write(f"{root}/a/t.txt", failing)
    with tf.io.gfile.GFile(f"{root}/a/t.txt", "rb") as f:
        assert f.read() == b"text"
    assert sorted(tf.io.gfile.listdir(f"{root}/a")) == [
        "b.bin", "n.npz", "t.txt"]


@pytest.mark.parametrize("links", [True, False])
def test_without_replace_a_file_there_at_publishing_is_kept(
        tmp_path, monkeypatch, links):
    """replace=False: a file that appears at the path while the content
    is written (after any check a caller made) is kept, and the write is
    a FileExistsError leaving no temporary file; on a file system without
    hard links, the same, checked just before the rename."""
    if not links:
        def no_links(*args):
            raise OSError(errno.EPERM, "Operation not permitted")
        monkeypatch.setattr(os, "link", no_links)
    path = tmp_path / "answer.json"

    def racing(tmp):
        path.write_text("the user's")  # made meanwhile
        with open(tmp, "w") as f:
            f.write("ours")

    with pytest.raises(FileExistsError):
        atomic_write(path, racing, replace=False)
    assert path.read_text() == "the user's"
    assert _names(tmp_path) == ["answer.json"]
    new = tmp_path / "new.json"
    atomic_write(new, "ours", replace=False)
    assert new.read_text() == "ours"
    assert _names(tmp_path) == ["answer.json", "new.json"]


def test_without_replace_a_remote_file_is_kept():
    tf = pytest.importorskip("tensorflow")
    path = "ram://keras_vit_atomic_keep/a.txt"
    atomic_write(path, "first")
    with pytest.raises(FileExistsError):
        atomic_write(path, "second", replace=False)
    with tf.io.gfile.GFile(path, "rb") as f:
        assert f.read() == b"first"
    assert tf.io.gfile.listdir("ram://keras_vit_atomic_keep") == ["a.txt"]

"""The check that the workers of a multi-worker run share its folder
(keras_vit/training/shared_folder.py), with workers as threads and the
all-reduce as a barrier; tests/test_multiworker_faults.py runs it with real
worker processes."""

import os
import threading

import pytest

from keras_vit.errors import UsageError
from keras_vit.training import shared_folder
from keras_vit.training.cluster import Task


class _Sums:
    """An all-reduce of `n` threads: each passes its list, all get the
    element-wise sum; `calls` counts the rounds."""

    def __init__(self, n: int):
        self.n = n
        self.rounds = {}
        self.barrier = threading.Barrier(n)
        self.lock = threading.Lock()
        self.calls = [0] * n

    def fn(self, index: int):
        def sum_fn(values):
            k = self.calls[index]
            self.calls[index] += 1
            with self.lock:
                self.rounds.setdefault(k, []).append(list(values))
            self.barrier.wait(10)
            return [sum(v) for v in zip(*self.rounds[k])]
        return sum_fn


def _run(folders, rounds=2, **kwargs):
    """`check` on one thread per folder (worker i names folders[i]);
    what each raised (None where it returned). Every worker must have
    taken part in `rounds` all-reduces."""
    tasks = [Task("worker", i, f"127.0.0.1:{2000 + i}")
             for i in range(len(folders))]
    sums = _Sums(len(folders))
    errors = [None] * len(folders)

    def worker(i):
        try:
            shared_folder.check(folders[i], "workdir", tasks=tasks, this=i,
                                sum_fn=sums.fn(i), sleep=lambda s: None,
                                **kwargs)
        except Exception as e:  # noqa: BLE001 (the test looks at it)
            errors[i] = e

    threads = [threading.Thread(target=worker, args=(i,))
               for i in range(len(folders))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sums.calls == [rounds] * len(folders)
    return errors


def test_a_shared_folder_passes_and_is_left_as_it_was(tmp_path):
    (tmp_path / "ckpt").write_text("mine")
    assert _run([str(tmp_path)] * 3) == [None, None, None]
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


def test_a_worker_with_its_own_folder_stops_every_worker(tmp_path):
    folders = [str(tmp_path / "host0"), str(tmp_path / "host0"),
               str(tmp_path / "host2")]
    for f in folders:
        os.makedirs(f, exist_ok=True)
    errors = _run(folders, token=12345)
    assert all(isinstance(e, UsageError) for e in errors)
    # Every worker says the same, naming the folder as it names it.
    texts = {str(e).replace(f, "F") for e, f in zip(errors, folders)}
    assert len(texts) == 1
    text = texts.pop()
    assert text.startswith("worker 2 (127.0.0.1:2002) does not see the files "
                           "the chief (worker 0 (127.0.0.1:2000)) writes")
    assert "worker 1" not in text.split(" does not see")[0]
    assert "one shared folder (e.g. gs://" in text
    assert os.listdir(folders[0]) == [] and os.listdir(folders[2]) == []


def test_every_worker_of_its_own_is_named(tmp_path):
    folders = [str(tmp_path / f"host{i}") for i in range(3)]
    for f in folders:
        os.makedirs(f)
    errors = _run(folders)
    assert str(errors[0]).startswith(
        "worker 1 (127.0.0.1:2001), worker 2 (127.0.0.1:2002) do not see")


def test_a_chief_that_cannot_write_stops_every_worker(tmp_path):
    missing = str(tmp_path / "no" / "such")  # GFile makes no parents
    errors = _run([missing, missing], rounds=1)
    assert all(isinstance(e, UsageError) for e in errors)
    assert str(errors[0]).startswith(
        "The chief (worker 0 (127.0.0.1:2000)) could not write into the "
        f"workdir {missing}: ")
    assert str(errors[1]) == (
        "The chief (worker 0 (127.0.0.1:2000)) could not write into the "
        f"workdir {missing}. Check the path and its permissions on "
        "worker 0 (127.0.0.1:2000).")


def test_a_worker_looks_again_before_it_says_no(tmp_path, monkeypatch):
    """A file a network file system shows late: found on the 2nd look."""
    looks = []
    real = shared_folder.tf.io.gfile.exists

    def exists(path):
        looks.append(path)
        return len(looks) > 1 and real(path)

    monkeypatch.setattr(shared_folder.tf.io.gfile, "exists", exists)
    assert _run([str(tmp_path)] * 2) == [None, None]
    assert len(looks) == 2


@pytest.mark.parametrize("replicas", [1, 2])
def test_sum_over_workers_counts_each_worker_once(replicas):
    """One worker, `replicas` local CPU replicas of a MirroredStrategy:
    the sum over workers is the worker's own values."""
    import tensorflow as tf

    from keras_vit.training import distribute

    devices = tf.config.list_logical_devices("CPU")
    if len(devices) < replicas:
        pytest.skip("needs logical CPU devices")
    strategy = tf.distribute.MirroredStrategy(
        [d.name for d in devices[:replicas]])
    assert distribute.sum_over_workers(strategy, [12345.0, 1.0]) == [
        12345.0, 1.0]

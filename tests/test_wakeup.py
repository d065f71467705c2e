"""keras_vit.wakeup: the thread that sees each signal as it arrives, under
the training loop's StopRequest and the commands' Ctrl-C watcher."""

import os
import signal
import threading
import time

import pytest

from keras_vit import wakeup

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGUSR1"), reason="needs POSIX signals")


def _wait_for(condition, seconds=5.0):
    end = time.monotonic() + seconds
    while not condition() and time.monotonic() < end:
        time.sleep(0.01)
    return condition()


@pytest.fixture
def usr1_handled():
    """SIGUSR1 handled by Python (a no-op), so that it only wakes."""
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    yield
    signal.signal(signal.SIGUSR1, previous)


def test_each_signal_reaches_the_callback_and_stop_gives_the_fd_back(
        usr1_handled):
    seen = []
    watcher = wakeup.Wakeup(lambda data, now: seen.append((data, now)),
                            "test-wakeup")
    before = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(before)
    assert watcher.start() and watcher.running
    thread = watcher._thread
    assert watcher.start() and watcher._thread is thread  # once
    os.kill(os.getpid(), signal.SIGUSR1)
    assert _wait_for(lambda: seen), "the callback never ran"
    data, now = seen[0]
    assert signal.SIGUSR1 in data
    assert 0 < now <= time.monotonic()
    thread = watcher._thread
    watcher.stop()
    assert not watcher.running and not thread.is_alive()
    # The descriptor it found is the one in place again.
    assert signal.set_wakeup_fd(before) == before
    watcher.stop()  # a second stop is a no-op


def test_it_gives_the_descriptor_back_to_one_started_before(usr1_handled):
    """Nested (a command's watcher around a training loop's): the inner
    one's stop puts the outer one's descriptor back, and the outer one
    sees signals again."""
    outer_seen, inner_seen = [], []
    outer = wakeup.Wakeup(lambda d, n: outer_seen.append(d), "outer")
    inner = wakeup.Wakeup(lambda d, n: inner_seen.append(d), "inner")
    assert outer.start()
    try:
        assert inner.start()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert _wait_for(lambda: inner_seen)
        inner.stop()
        assert outer_seen == []
        os.kill(os.getpid(), signal.SIGUSR1)
        assert _wait_for(lambda: outer_seen)
    finally:
        inner.stop()
        outer.stop()


def test_outside_the_main_thread_it_does_not_watch_and_does_not_raise():
    result = []
    watcher = wakeup.Wakeup(lambda d, n: None, "test-wakeup")
    thread = threading.Thread(target=lambda: result.append(watcher.start()))
    thread.start()
    thread.join()
    assert result == [False] and not watcher.running
    watcher.stop()

"""Multi-worker runs as processes: forming the cluster in bounded time,
naming a lost worker, and ending every worker together (a data set's
preparation on the chief first: `keras_vit.training.data_turn`).

TensorFlow forms a MultiWorkerMirroredStrategy cluster (and connects to a
remote TPU) inside C++ calls that hold Python's global lock and have no
timeout, and while it waits its own SIGTERM notifier replaces Python's
handler: neither a scheduler's SIGTERM nor a timeout reaches the program.
So `wait_for_workers` first waits in Python, where the clock and SIGTERM
work, until every worker of TF_CONFIG answers at its address (a worker
that waits there listens on its own address, so that the others see it);
TensorFlow then forms the cluster in about a second, under `run_guarded`:
SIGTERM at its default action and a C-level timer that end the process
even while TensorFlow holds the lock.

The other pieces: `lost_worker_message` turns the error a collective raises
when a peer dies into one line that names it, and `finish` stops the
PreemptionCheckpointHandler's watcher threads and waits for every worker,
so that none exits while another still needs the cluster (which
TensorFlow's coordination service would report as a crash).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import faulthandler
import json
import os
import re
import signal
import socket
import threading
import time
import traceback
from typing import Callable, List, Optional, Sequence

import tensorflow as tf
from absl import logging

from keras_vit import config as config_lib
from keras_vit.errors import SetupError  # defined there, named here too
from keras_vit.training import exit_barrier

# How a shell reports a process ended by SIGTERM (128 + 15): a stop asked
# for before training started, with nothing to save.
TERMINATED_EXIT_CODE = 128 + signal.SIGTERM
# Seconds between the lines that a long wait for workers logs.
LOG_EVERY_S = 30.0
# The first such line: a cluster whose workers start together forms
# within this time without a word.
FIRST_LOG_S = 5.0
# TensorFlow's PreemptionCheckpointHandler threads (TF 2.21 names).
_WATCHER_THREADS = ("PeerTerminationWatcher", "WorkerTerminationSignalWatcher")


@dataclasses.dataclass(frozen=True)
class Task:
    """One task of TF_CONFIG's cluster."""

    job: str
    index: int
    address: str

    def __str__(self) -> str:
        return f"{self.job} {self.index} ({self.address})"


def connect_timeout(connect_timeout_s: Optional[float]) -> float:
    """`connect_timeout_s`, or config.trainer.connect_timeout_s's default when
    None."""
    if connect_timeout_s is None:
        return float(config_lib.base_config().trainer.connect_timeout_s)
    return float(connect_timeout_s)


def cluster_tasks() -> tuple:
    """(every chief and worker task of TF_CONFIG in the coordination
    service's order, this task or None); ([], None) without TF_CONFIG."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return [], None
    spec = json.loads(raw)
    tasks = [
        Task(job, i, address)
        for job in ("chief", "worker")
        for i, address in enumerate(spec["cluster"].get(job, []))
    ]
    me = spec.get("task", {})
    this = next(
        (t for t in tasks if t.job == me.get("type")
         and t.index == int(me.get("index", -1))),
        None,
    )
    return tasks, this


def _host_port(address: str) -> tuple:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def reachable(address: str, timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections at `address` (host:port)."""
    try:
        with socket.create_connection(_host_port(address), timeout_s):
            return True
    except (OSError, ValueError):
        return False


def unreachable(tasks: Sequence[Task]) -> List[Task]:
    """The tasks of `tasks` whose address accepts no connection (probed
    together, so a large cluster answers in one probe's time)."""
    if not tasks:
        return []
    with concurrent.futures.ThreadPoolExecutor(min(32, len(tasks))) as pool:
        answers = list(pool.map(lambda t: reachable(t.address), tasks))
    return [t for t, ok in zip(tasks, answers) if not ok]


def _listen(task: Task) -> socket.socket:
    """Listens on this task's port (where TensorFlow's server will), so that
    the other workers see this one while it waits for them."""
    _, port = _host_port(task.address)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # As the gRPC server binds: every interface, address reuse allowed (a
    # port in TIME_WAIT is free to it).
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("0.0.0.0", port))
    except OSError as e:
        listener.close()
        raise SetupError(
            f"Port {port} of this worker ({task}, from TF_CONFIG) is in use "
            f"({e.strerror}): stop the process that holds it (an earlier run "
            "still alive?) or give this worker a free port in TF_CONFIG on "
            "every worker."
        ) from None
    listener.listen(64)
    listener.setblocking(False)
    return listener


def _answer(listener: socket.socket) -> None:
    """Accepts and closes the probes waiting on `listener`."""
    while True:
        try:
            connection, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        connection.close()


def describe(tasks: Sequence[Task]) -> str:
    """'worker 1 (host:port)' or 'worker 1 (a:1), worker 2 (b:2)'."""
    return ", ".join(str(t) for t in tasks)


def wait_for_workers(timeout_s: float) -> None:
    """Waits until every other worker of TF_CONFIG answers at its address.

    Logs the missing ones after FIRST_LOG_S seconds and then every
    LOG_EVERY_S; meanwhile this worker listens on its own address.

    Args:
        timeout_s: float. Give up after this many seconds; 0: never.

    Raises:
        SetupError: this worker's port is taken; the time is up (naming the
            missing workers); SIGTERM (exit code TERMINATED_EXIT_CODE).
    """
    tasks, me = cluster_tasks()
    peers = [t for t in tasks if t != me]
    listener = _listen(me)
    signals = []
    main = threading.current_thread() is threading.main_thread()
    previous = None
    if main:
        previous = signal.signal(
            signal.SIGTERM, lambda signum, frame: signals.append(signum)
        )
    start = time.monotonic()
    next_log = start + FIRST_LOG_S
    try:
        while True:
            _answer(listener)
            missing = unreachable(peers)
            if not missing:
                return
            elapsed = time.monotonic() - start
            if signals:
                raise SetupError(
                    "SIGTERM while waiting for the workers of TF_CONFIG "
                    f"({describe(missing)} not up yet): stopped before "
                    "training started, nothing to save.",
                    TERMINATED_EXIT_CODE,
                )
            if timeout_s and elapsed > timeout_s:
                raise SetupError(
                    f"{describe(missing)} of TF_CONFIG did not come up "
                    f"within {timeout_s:.0f} s "
                    "(config.trainer.connect_timeout_s): "
                    "start the same command on every worker of TF_CONFIG, "
                    "check that their addresses are reachable from here, or "
                    "raise config.trainer.connect_timeout_s."
                )
            if time.monotonic() >= next_log:
                logging.info(
                    "Waiting for the workers of TF_CONFIG: %s not up after "
                    "%.0f s; giving up after %.0f s "
                    "(config.trainer.connect_timeout_s).",
                    describe(missing), elapsed, timeout_s,
                )
                next_log += LOG_EVERY_S
            time.sleep(0.2)
    finally:
        listener.close()
        if main:
            signal.signal(signal.SIGTERM, previous)


_devnull = None


def run_guarded(setup: Callable[[], object], timeout_s: float):
    """Calls `setup()`, a TensorFlow call that can block while holding
    Python's global lock, so that the process still ends on SIGTERM (at
    its default action, until TensorFlow installs its own notifier) and
    after `timeout_s` seconds (faulthandler's C-level timer: exit status
    1, its traceback dump discarded). 0: no time limit.

    Returns what `setup` returns; SIGTERM's handler is restored after.
    """
    global _devnull
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL) if main else None
    if timeout_s:
        if _devnull is None:
            _devnull = open(os.devnull, "w")
        faulthandler.dump_traceback_later(timeout_s, exit=True,
                                          file=_devnull)
    try:
        return setup()
    finally:
        if timeout_s:
            faulthandler.cancel_dump_traceback_later()
        if main:
            signal.signal(signal.SIGTERM, previous)


# ------------------------------------------------------------ lost peers
_TASK_NAME = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")
# What TensorFlow says when a peer is gone (TF 2.21): the coordination
# service's missing heartbeats, the leader gone, a broken connection.
_PEER_LOSS = re.compile(
    r"unhealthy|coordination service|Socket closed|Connection reset|"
    r"failed to connect|Connection refused|heartbeat",
    re.IGNORECASE,
)


def is_peer_loss(error: BaseException) -> bool:
    """Whether a multi-worker run's error means that a worker is gone."""
    if isinstance(error, (tf.errors.UnavailableError,
                          tf.errors.AbortedError)):
        return True
    return isinstance(error, tf.errors.OpError) and bool(
        _PEER_LOSS.search(str(error))
    )


def lost_workers(error: BaseException) -> List[Task]:
    """The workers that `error` (see is_peer_loss) says are gone; else those
    that no longer accept connections; else []."""
    tasks, me = cluster_tasks()
    by_name = {(t.job, t.index): t for t in tasks}
    text = str(error)
    named = []
    unhealthy = re.search(r"unhealthy[^:]*:(.*?)(?:The tasks have|$)", text,
                          re.DOTALL)
    if unhealthy:
        named = _TASK_NAME.findall(unhealthy.group(1))
    elif re.search(r"leader task", text) and tasks:
        # The coordination service lives on the first task (chief, else
        # worker 0): its leader.
        named = [(tasks[0].job, str(tasks[0].index))]
    else:
        target = re.search(r"remote target (/job:\w+/replica:\d+/task:\d+)",
                           text)
        if target:
            named = _TASK_NAME.findall(target.group(1))
    lost = [by_name[(job, int(i))] for job, i in named
            if (job, int(i)) in by_name and by_name[(job, int(i))] != me]
    if lost:
        return list(dict.fromkeys(lost))
    return unreachable([t for t in tasks if t != me])


def lost_worker_message(error: BaseException, step: int,
                        checkpoint: Optional[str]) -> str:
    """One line for a peer that died: who, when, and how to resume."""
    lost = lost_workers(error)
    who = describe(lost) if lost else "a worker"
    count = len(cluster_tasks()[0])
    resume = (
        f"resume from {checkpoint}" if checkpoint
        else "start again (no checkpoint was complete yet)"
    )
    return (
        f"Lost {who} at step {step}: it stopped responding (killed, crashed "
        f"or preempted without notice), so this worker stops too. Restart "
        f"all {count} workers with the same command to {resume}."
    )


# ------------------------------------------------------------ the end
def stop_watchers(handler) -> None:
    """Stops a PreemptionCheckpointHandler's watcher threads, as TensorFlow
    does itself only on a preemption (or in __del__, which may never run):
    left running, the peer watcher dies with a traceback when the cluster
    goes away."""
    if handler is None:
        return
    for name in ("_stop_poll_termination_signal_thread",
                 "_stop_cluster_wise_termination_watcher_thread"):
        stop = getattr(handler, name, None)
        if stop is not None:
            stop()


def finish(all_reduce: Callable[[], object], handler,
           finished: Optional[Callable[[], bool]] = None) -> None:
    """Ends a multi-worker run on this worker once every worker got here.

    SIGTERM ends the process at once from here on (the run is complete or
    saved). The watcher threads stop, then an all-reduce waits for every
    worker: a worker that exits while another still needs the cluster is
    reported as crashed by TensorFlow's coordination service. Where all
    got here, each also waits for the others when its process exits
    (`exit_barrier`).

    Args:
        all_reduce: a collective over all workers (e.g. `any_worker`).
        handler: the run's PreemptionCheckpointHandler, or None.
        finished: whether the chief finished the run (metrics.json),
            asked where the collective fails: where not, a SetupError (it
            failed after the final evaluation); None: a stopped run.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        stop_watchers(handler)
        all_reduce()
        exit_barrier.wait_at_exit()
    except tf.errors.OpError as e:
        if finished is not None and not finished():
            raise SetupError(
                f"The chief left before it finished the run "
                f"({first_line(e)}): its log says why; run the same "
                "command on every worker again to finish it.") from None
        # The run's results are saved; a worker that left early changes
        # nothing about them.
        logging.warning(
            "Not every worker reached the end of the run (%s); this one's "
            "work is complete.", first_line(e),
        )


def first_line(error: BaseException) -> str:
    text = getattr(error, "message", None) or str(error)
    lines = text.strip().splitlines() or [""]
    return f"{type(error).__name__}: {lines[0][:300]}"


_quiet_hook_installed = False


def quiet_watcher_errors() -> None:
    """Logs in one line (the traceback at debug level) an error that ends a
    PreemptionCheckpointHandler watcher thread, which happens when a peer
    goes away; other threads' errors keep Python's usual report."""
    global _quiet_hook_installed
    if _quiet_hook_installed:
        return
    previous = threading.excepthook

    def hook(args):
        name = getattr(args.thread, "name", "") or ""
        if name.startswith(_WATCHER_THREADS) and isinstance(
            args.exc_value, tf.errors.OpError
        ):
            logging.info("%s stopped: %s", name, first_line(args.exc_value))
            logging.debug("%s", "".join(traceback.format_exception(
                args.exc_type, args.exc_value, args.exc_traceback)))
            return
        previous(args)

    threading.excepthook = hook
    _quiet_hook_installed = True

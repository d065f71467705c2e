"""The error classes of this project's own checks and stops.

`UsageError`: what a user gave (a flag, a config field, a config's
argument, a file, an image, a model option, a call the caller can fix)
cannot be used, and the message names the fix. The project's checks of
user input raise it, except a missing file (FileNotFoundError), a run
that cannot go on (`TrainingError`) and a strategy set-up that failed
(`SetupError`); an export that disagrees with its model raises
RuntimeError (a fault, not input).
The command lines print such an error as one line and exit 1 (the
traceback follows with --verbose); any other exception, a ValueError
from inside Keras or TensorFlow included, keeps its traceback.

`UsageError` is a `ValueError`, so code that caught ValueError still does.

`one_line(error)`: an exception's message on one line (TensorFlow's span
several; `flat_text`), for a UsageError that names its cause;
`failed_allocation(error)`: what an out-of-memory error failed to
allocate; `is_disk_full(error)`: whether it is a full disk instead.

`Preempted`: a run stopped on SIGTERM or Ctrl-C after saving a checkpoint;
every command then exits with PREEMPTED_EXIT_CODE, and the same command
resumes. A second Ctrl-C stops at once, with INTERRUPTED_EXIT_CODE.
`signals_after()`: Ctrl-C and SIGTERM held back while a block runs, then
delivered; `import_module(name)` imports under it the first time.
"""

import contextlib
import errno
import importlib
import os
import re
import signal
import sys
import threading
import time
from typing import Callable

# TensorFlow's restart status (PreemptionCheckpointHandler's exit off Google
# Cloud), for the job scheduler to restart the job.
PREEMPTED_EXIT_CODE = 42
# A process stopped at once by Ctrl-C (128 + SIGINT, as a shell reports
# one that Ctrl-C ended).
INTERRUPTED_EXIT_CODE = 130
# Where a stored file holds a field this version does not know.
NEWER_VERSION = ("a file of a newer keras_vit? Upgrade: pip install -U "
                 "keras-vision-transformer")


class UsageError(ValueError):
    """Bad input that the user can fix; the message says how."""


class TrainingError(RuntimeError):
    """A run cannot go on (non-finite loss, mismatched workdir, ...)."""


class SetupError(ValueError):
    """A strategy set-up that failed or was stopped, in one line that names
    the fix.

    Attributes:
        exit_code: int. The status the process should end with.
    """

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class Preempted(Exception):
    """A run stopped on SIGTERM or Ctrl-C after saving a checkpoint (every
    worker at the same step, under a PreemptionCheckpointHandler): it
    should end; the commands exit with PREEMPTED_EXIT_CODE and the same
    command resumes.

    Attributes:
        kind: str. How the commands' one line calls it: "preempted"
            (SIGTERM) or "stopped" (Ctrl-C).
        saved: bool. Whether a checkpoint was saved (False: the stop came
            before the first step).
    """

    def __init__(self, message: str = "", kind: str = "preempted",
                 saved: bool = True):
        super().__init__(message)
        self.kind = kind
        self.saved = saved


# The exception a command's Ctrl-C or SIGTERM handler raised, until the
# command catches it (`stop_seen`). Python drops an exception raised in a
# garbage-collection callback or a __del__ (JAX registers such a
# callback): such a stop never reaches the command, which would go on to
# write its results; `check_stop` raises it again.
_RAISED_STOP: list = []


def stop_raised(error: BaseException) -> BaseException:
    """Records `error`, the exception a stop signal's handler raises
    (`raise stop_raised(KeyboardInterrupt())`), and returns it."""
    _RAISED_STOP[:] = [error]
    return error


def stop_seen() -> None:
    """The command caught its stop (or ended): nothing is pending."""
    _RAISED_STOP.clear()


def take_stop():
    """The stop whose exception something swallowed, now handed to the
    caller (a training loop's own stop handling), or None."""
    return _RAISED_STOP.pop() if _RAISED_STOP else None


def quiet_unraisable(previous: Callable) -> Callable:
    """A `sys.unraisablehook` that prints nothing of a stop Python could
    not raise (the signal came inside a garbage-collection callback or a
    `__del__`, which swallow what they raise): `check_stop` raises it
    again where the command unwinds. Anything else goes to `previous`."""
    def hook(unraisable) -> None:
        if not any(unraisable.exc_value is stop for stop in _RAISED_STOP):
            previous(unraisable)
    return hook


def check_stop() -> None:
    """Raises again a stop whose exception something swallowed: before a
    file is published, between units of long work and when a command
    ends. Only in the main thread, and not while an exception unwinds
    (that one may be the stop itself, on its way)."""
    if (_RAISED_STOP and sys.exc_info()[1] is None
            and threading.current_thread() is threading.main_thread()):
        raise _RAISED_STOP.pop()


def is_disk_full(error: BaseException) -> bool:
    """Whether `error` is a full disk: an OSError ENOSPC, or TensorFlow's
    "<file>; No space left on device" (a ResourceExhaustedError too, which
    is no memory to lower)."""
    return (getattr(error, "errno", None) == errno.ENOSPC
            or "No space left on device"
            in str(getattr(error, "message", error)))


def failed_allocation(error: BaseException) -> str:
    """What an out-of-memory error (TensorFlow's ResourceExhaustedError, a
    MemoryError) failed to allocate: TensorFlow's "OOM when allocating
    tensor with shape[...]" without the allocator's report, else its first
    line; for the one-line errors that name the fix."""
    first = (str(getattr(error, "message", error)) or "").strip()
    match = re.search(r"OOM when allocating tensor with shape\s*\[[^\]]*\]",
                      first)
    if match:
        return match.group(0)
    return first.splitlines()[0][:200] if first else type(error).__name__


def one_line(error: BaseException) -> str:
    """`error`'s message on one line (TensorFlow's OpError keeps it in
    `.message`, and spans several lines): `flat_text`, without the name of
    TensorFlow's internal op that a wrapped op's error begins with
    ("{{function_node __wrapped__RestoreV2...}} ")."""
    return flat_text(without_op_name(
        str(getattr(error, "message", None) or error)))


def without_op_name(text: str) -> str:
    """`text` without the "{{function_node ...}} " that TensorFlow begins
    a wrapped op's error with."""
    return re.sub(r"^\s*\{\{function_node [^}]*\}\}\s*", "", text)


def flat_text(text: str) -> str:
    """str. `text` on one line, its runs of white space as one space; an
    indented line is a list item, ended by ";" before the next item and
    by "." before a line that is not one (so "missing: a" and "missing:
    b" read as two items, not one run of words); a line indented deeper
    than the item before it goes on with that item."""
    flat, item_indent = "", None
    for line in text.splitlines():
        words = " ".join(line.split())
        if not words:
            continue
        indent = len(line) - len(line.lstrip())
        if item_indent is not None and indent > item_indent:
            flat += " " + words  # the item's own next line
            continue
        if flat:
            if item_indent is not None and not flat.endswith(
                    (".", ":", ";", ",", "?", "!")):
                flat += ";" if indent else "."
            flat += " "
        flat += words
        item_indent = indent if indent else None
    return flat


def check_options(options, known, who: str, also: str = "") -> None:
    """A UsageError naming the keyword options in `options` that `who`
    does not take (`known`: the names it takes; `also`: others it takes
    outside them, as written in the message)."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UsageError(
            f"{who} got unknown option(s) {', '.join(unknown)}; its options "
            f"are {also}{', '.join(known)}."
        )


def check_tensorflow_backend(backend: str, why: str) -> None:
    """Refuses work that is TensorFlow's (`why`) under another Keras
    backend (`backend`: `keras.backend.backend()`), in one line, rather
    than failing inside its first traced step."""
    if backend != "tensorflow":
        raise UsageError(
            f"This runs on the TensorFlow backend ({why}), and "
            f"KERAS_BACKEND={backend} here: set KERAS_BACKEND=tensorflow "
            "(keras-vit-predict, keras-vit-convert and keras-vit-analysis "
            "also run under JAX).")


def shorten(value, limit: int = 60) -> str:
    """`value` as a message quotes it (a str as it is, anything else its
    repr) on one line, cut to `limit` characters ("..." at the end): a
    message stays short whatever the value holds."""
    text = " ".join((value if isinstance(value, str) else repr(value)).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


# Blocks that hold Ctrl-C and SIGTERM back (`signals_after`, and storage.
# atomic's `signals_deferred`) open now, and (signal, time.monotonic()) of
# each held signal sent again: a second Ctrl-C does not end such a block
# at once, and a signal sent again is no press (commands.second_press).
_HOLDING = [0]
_SENT_AGAIN: list = []
# Seconds a signal sent again waits to be taken (`take_sent_again`).
SENT_AGAIN_S = 5.0


@contextlib.contextmanager
def holding_signals():
    """Within: signals are held back (`signals_held` says so)."""
    _HOLDING[0] += 1
    try:
        yield
    finally:
        _HOLDING[0] -= 1


def signals_held() -> bool:
    return _HOLDING[0] > 0


def send_again(signum: int) -> None:
    """Delivers a held signal to its handler now, noted for
    `take_sent_again`."""
    _SENT_AGAIN.append((signum, time.monotonic()))
    signal.raise_signal(signum)


def take_sent_again(signum: int, now: float) -> bool:
    """Whether a `signum` that arrived at `now` (or a little before) is
    one `send_again` sent (taken: told once); one sent more than
    SENT_AGAIN_S before is forgotten (no watcher read it)."""
    _SENT_AGAIN[:] = [(s, t) for s, t in _SENT_AGAIN
                      if now - t < SENT_AGAIN_S]
    for index, (sent, _) in enumerate(_SENT_AGAIN):
        if sent == signum:
            del _SENT_AGAIN[index]
            return True
    return False


def sent_again_clear() -> None:
    _SENT_AGAIN.clear()


@contextlib.contextmanager
def signals_after():
    """Within, in the main thread: Ctrl-C and SIGTERM are recorded, not
    delivered; on leaving, the handlers are back and each recorded signal
    is delivered to them. Around an import (a command's first load of
    TensorFlow, seconds long): the stop comes after it, not inside it,
    where it would leave a half-made module or be swallowed by one of
    TensorFlow's callbacks."""
    seen = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(signum)
            if handler is None:  # not installed from Python: left as is
                continue
            previous[signum] = handler
            signal.signal(signum, lambda n, f: seen.append(n))
    try:
        with holding_signals():
            yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(seen):
            send_again(signum)


def import_module(name: str):
    """Module `name`; its first import (TensorFlow's takes seconds) under
    `signals_after`: Ctrl-C or SIGTERM comes after it, to the command's
    own handlers."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    with signals_after():
        try:
            return importlib.import_module(name)
        except (ValueError, ImportError) as error:
            line = backend_refusal(error)
            if line is None:
                raise
            raise UsageError(line) from error


# Keras's backends, each named as the library it imports
# (keras/src/backend).
_BACKENDS = ("tensorflow", "jax", "torch", "numpy", "openvino")


def backend_refusal(error: BaseException):
    """One line for Keras failing to load its backend (KERAS_BACKEND, else
    ~/.keras/keras.json): a name it does not know, or a backend whose
    library is not installed; None for any other error."""
    given = os.environ.get("KERAS_BACKEND")
    named = (f"KERAS_BACKEND={given}" if given else
             "the backend of ~/.keras/keras.json")
    fix = "set KERAS_BACKEND=tensorflow (or jax, with the jax extra)"
    if isinstance(error, ValueError) and str(error).startswith(
            "Unable to import backend"):
        return (f"{named}: Keras has no such backend (it has "
                f"{', '.join(_BACKENDS)}): {fix}.")
    missing = getattr(error, "name", None)
    if isinstance(error, ModuleNotFoundError) and missing and (
            given in _BACKENDS
            and missing.split(".")[0] == given != "tensorflow"):
        return (f"{named} needs {missing.split('.')[0]}, which is not "
                f"installed: install it, or {fix}.")
    return None

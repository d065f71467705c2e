"""Hides TensorFlow's start-up notices from the commands (and from a
user's program at `import keras_vit`: `library_import`).

TensorFlow's C++ libraries print notices to stderr while they load, before
TF_CPP_MIN_LOG_LEVEL applies (oneDNN, CPU features), and on a machine
without an NVIDIA driver two CUDA lines (no CUDA driver; cuInit failed)
when the devices are listed. `hold` sends stderr to a temporary file while
TensorFlow loads; `release` lists its devices, then writes back everything
except those notices (`quiet_tensorflow_start` does both around a block).

The commands (the keras-vit-* console scripts, `python -m
keras_vit.commands.NAME`, the repository's train.py and evaluate.py) start
holding when `import keras_vit` runs (`console_script_start`), and
`keras_vit.commands.runner.run` releases before the command's work. A
command loads TensorFlow when its work needs it (not at `import
keras_vit`): while it runs, `filter_stderr` (which `runner.run` starts
unless `--verbose`) keeps off stderr, at the descriptor, TensorFlow's
start-up notices whenever they come, and the notices TensorFlow's C++
code and libjpeg print about an image file the command names itself
(`RUN_NOTICES`: a truncated or corrupt JPEG), LiteRT's notice of its CPU
delegate and oneDNN's of its int64 kernels; every other line passes.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile

# Printed on every machine, whatever TF_CPP_MIN_LOG_LEVEL says.
_NOTICES = (
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called "
    r"are written to STDERR$",
    r"port\.cc:\d+\] oneDNN custom operations are on",
    r"cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized",
    r"^To enable the following instructions: .* in other operations, "
    r"rebuild TensorFlow",
)
# Printed where there is no NVIDIA driver, i.e. on a CPU-only machine.
_NO_GPU = (
    r"cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine",
    r"cuda_platform\.cc:\d+\] failed call to cuInit",
)


# Printed while a command runs, by TensorFlow's C++ decoder (jpeg_mem.cc)
# or by libjpeg itself, about an image file that the command reports in its
# own words (a skipped or refused file) or that decodes all the same; and
# LiteRT's delegate notice.
RUN_NOTICES = (
    r"jpeg_mem\.cc:\d+\] (Premature end of JPEG|Corrupt JPEG data)",
    # (Anywhere in a line: a progress line without its line end, such as
    # keras-vit-predict's, may come first; the fragment goes with it.)
    r"(^|\r|images)(Corrupt JPEG data|Premature end of JPEG (file|data))\b",
    # libjpeg, when a JPEG ends inside its header (the decoder's error
    # names the file's fault).
    r"(^|\r|images)Improper call to JPEG library in state \d+$",
    # libjpeg, when a JPEG's markers are followed by no image data.
    r"(^|\r|images)Input file read error$",
    # LiteRT's interpreter, on every .tflite it runs (export's check,
    # predict): a notice about its CPU kernels, not about the run.
    r"^INFO: Created TensorFlow Lite XNNPACK delegate for CPU\.$",
    # oneDNN, on a CPU without AVX-512, at the first int64 op it is given
    # (an MPP model's corruption inputs): its choice of kernels.
    r"util\.cc:\d+\] oneDNN supports DT_INT64 only on platforms with "
    r"AVX-512",
)


def _has_nvidia_driver() -> bool:
    return os.path.exists("/proc/driver/nvidia/version")


def noise(line: str, cpu_only: bool) -> bool:
    """Whether `line` is one of the start-up notices hidden."""
    patterns = _NOTICES + (_NO_GPU if cpu_only else ())
    return any(re.search(p, line) for p in patterns)


_VERBOSE = r"--verbose(=(true|t|1|yes))?"
# The arguments that ask a command for its help.
HELP_ARGS = ("-h", "--help", "--helpshort", "--helpfull", "-?")
# The commands' package, run as `python -m keras_vit.commands.NAME`.
COMMANDS_PACKAGE = "keras_vit.commands"
# (saved stderr descriptor, temporary file) while stderr is held.
_held = []


def verbose(argv) -> bool:
    """Whether `argv` (the arguments, without the program) asks for
    --verbose, in every spelling absl takes."""
    return any(re.fullmatch(_VERBOSE, str(a), re.I) for a in argv)


def hold(argv=None, log_level: bool = True) -> bool:
    """Sends stderr (the descriptor) to a temporary file until `release`,
    unless `argv` asks for --verbose or it is held already; whether it
    started holding. `log_level`: TF_CPP_MIN_LOG_LEVEL defaults to 2."""
    if log_level:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if _held or verbose(sys.argv if argv is None else argv):
        return False
    sys.stderr.flush()
    held = tempfile.TemporaryFile()
    _held.append((os.dup(2), held))
    os.dup2(held.fileno(), 2)
    return True


def release() -> None:
    """Lists TensorFlow's devices (where the CUDA notices come from, when
    it is loaded), gives stderr back and writes to it what was held, less
    the start-up notices. Does nothing when nothing is held."""
    if not _held:
        return
    try:
        tf = sys.modules.get("tensorflow")
        if tf is not None and hasattr(tf, "config"):
            tf.config.list_physical_devices()
    finally:
        saved, held = _held.pop()
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        held.seek(0)
        text = held.read().decode(errors="replace")
        held.close()
        cpu_only = not _has_nvidia_driver()
        kept = [line for line in text.splitlines(keepends=True)
                if not noise(line, cpu_only)]
        sys.stderr.write("".join(kept))
        sys.stderr.flush()


def _command_module(argv, orig_argv) -> bool:
    """Whether this process is `python -m keras_vit.commands.NAME`: while
    `-m` imports the module's packages, sys.argv[0] is "-m" and
    sys.orig_argv names the module after the interpreter's options."""
    if not argv or argv[0] != "-m":
        return False
    for i, arg in enumerate(orig_argv[1:], start=1):
        if arg == "-m":
            module = orig_argv[i + 1] if i + 1 < len(orig_argv) else ""
        elif arg.startswith("-m"):
            module = arg[2:]
        else:
            continue
        return module.startswith(COMMANDS_PACKAGE + ".")
    return False


def is_command(argv=None) -> bool:
    """Whether this process (its `argv`, default sys.argv) is a command: a
    keras-vit-* console script, `python -m keras_vit.commands.NAME` (while
    it starts, and once argv[0] is the module's file), or a script that
    says so (`COMMAND_MARK`: the repository's train.py and evaluate.py)."""
    argv = (sys.argv if argv is None else argv) or [""]
    program = str(argv[0])
    commands = os.path.join(_root(), *COMMANDS_PACKAGE.split("."))
    return (os.path.basename(program).startswith("keras-vit-")
            or _command_module(argv, getattr(sys, "orig_argv", []))
            or (program.endswith(".py")
                and os.path.dirname(os.path.realpath(program)) == commands)
            or bool(getattr(sys.modules.get("__main__"), COMMAND_MARK,
                            False)))


# A script run as a command sets this global before it imports keras_vit.
COMMAND_MARK = "__keras_vit_command__"


def _root() -> str:
    """The folder holding this package (the repository, in a checkout)."""
    return os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


# A process stopped at once by Ctrl-C (keras_vit.errors.INTERRUPTED_EXIT_CODE)
# or by SIGTERM (keras_vit.errors.PREEMPTED_EXIT_CODE).
_INTERRUPTED = 130
_PREEMPTED = 42


def interrupted_line(program: str) -> str:
    """The one line of a command that Ctrl-C stopped at once."""
    return f"{program}: interrupted: stopped at once (Ctrl-C)."


def preempted_line(program: str, again: bool = True) -> str:
    """The one line of a command that SIGTERM stopped at once (`again`:
    with its work left to do)."""
    return (f"{program}: preempted: stopped at once (SIGTERM)"
            + ("; run the same command again." if again else "."))


def _program(argv) -> str:
    """keras-vit-NAME of a command's argv (a console script, or the module
    file of `python -m keras_vit.commands.NAME`)."""
    name = os.path.basename(str(argv[0])) if argv else ""
    if not name.startswith("keras-vit-"):
        name = "keras-vit-" + os.path.splitext(name)[0]
    return name


def _stop_while_starting(signum, frame) -> None:
    """Ctrl-C or SIGTERM while a command starts (before it has parsed its
    flags or written anything): one line and status 130 (42 for SIGTERM,
    as a preempted command's) at once."""
    del frame
    out = _held[-1][0] if _held else 2
    term = signum == signal.SIGTERM
    line = (preempted_line if term else interrupted_line)(
        _program(sys.argv))
    os.write(out, (line + "\n").encode())
    os._exit(_PREEMPTED if term else _INTERRUPTED)


def started() -> None:
    """The command's own handling of Ctrl-C and SIGTERM begins
    (`runner.run`, before the command's work): Ctrl-C raises
    KeyboardInterrupt (also where the command inherited it ignored, as a
    background job of a script does: Ctrl-C stops every command), and
    SIGTERM has its default until the runner installs its own."""
    if signal.getsignal(signal.SIGINT) is _stop_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) is _stop_while_starting:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


# The folders of this repository's own scripts (`python scripts/NAME.py`,
# `python benchmarks/NAME.py`), beside the package.
SCRIPT_FOLDERS = ("scripts", "benchmarks")


def is_repository_script(argv=None) -> bool:
    """Whether this process (its `argv`, default sys.argv) runs one of the
    repository's own scripts (`SCRIPT_FOLDERS`, beside this package)."""
    argv = (sys.argv if argv is None else argv) or [""]
    program = str(argv[0])
    if not program.endswith(".py"):
        return False
    folder = os.path.dirname(os.path.realpath(program))
    return (os.path.dirname(folder) == _root()
            and os.path.basename(folder) in SCRIPT_FOLDERS)


def script_ready() -> None:
    """`import keras_vit` has loaded the model core (hence Keras and
    TensorFlow): a repository script's held stderr is given back, less
    the start-up notices, so that what it prints next comes as it runs."""
    if is_repository_script():
        release()


def console_script_start() -> None:
    """Holds stderr when this process is a command (`is_command`);
    `release` runs at the latest when the process exits (an error before
    the command started is still shown). Until `started`, Ctrl-C stops
    the command at once with one line. A repository script's stderr is
    held too, until `script_ready` (Ctrl-C as Python has it)."""
    if is_repository_script():
        if hold():
            atexit.register(release)
        return
    if not is_command():
        return
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _stop_while_starting)
    except ValueError:  # not the main thread
        pass
    if hold():
        atexit.register(release)


# The filter: a process that copies its stdin to its stdout (stderr, as the
# command had it) line by line, less the lines matching argv[1]; a line
# left unfinished for 50 ms (a progress bar's) is copied as it is.
_FILTER = r"""
import os, re, select, sys
pattern = re.compile(sys.argv[1])
def emit(data):
    while data:
        data = data[os.write(1, data):]
rest = b""
while True:
    if rest and not select.select([0], [], [], 0.05)[0]:
        emit(rest)
        rest = b""
        continue
    chunk = os.read(0, 65536)
    if not chunk:
        break
    *lines, rest = (rest + chunk).split(b"\n")
    emit(b"".join(line + b"\n" for line in lines
                  if not pattern.search(line.decode("utf-8", "replace"))))
emit(rest)
"""
# (the filter process, saved stderr descriptor) while filtering.
_filtering = []


def command_notices() -> tuple:
    """What a command's stderr leaves out (`filter_stderr`): TensorFlow's
    start-up notices (its CUDA ones on a machine without an NVIDIA driver)
    and `RUN_NOTICES`."""
    cpu_only = not _has_nvidia_driver()
    return _NOTICES + (_NO_GPU if cpu_only else ()) + RUN_NOTICES


def filter_stderr(patterns=None) -> bool:
    """Until the process exits (or `stop_filtering`), the lines written to
    stderr (the descriptor: Python's, TensorFlow's C++ code's, libjpeg's)
    that match one of `patterns` (default `command_notices()`) are left
    out; whether it started (not when filtering already, or when the
    filter process cannot start)."""
    if _filtering:
        return False
    patterns = command_notices() if patterns is None else patterns
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        # Its own session: Ctrl-C stops the command, which then still
        # prints through the filter; it ends when the command's end closes
        # its stdin.
        process = subprocess.Popen(
            [sys.executable, "-S", "-I", "-c", _FILTER, "|".join(patterns)],
            stdin=subprocess.PIPE, stdout=saved, start_new_session=True)
    except OSError:
        os.close(saved)
        return False
    os.dup2(process.stdin.fileno(), 2)
    process.stdin.close()
    _filtering.append((process, saved))
    atexit.register(stop_filtering)
    return True


def stderr_is_terminal() -> bool:
    """Whether stderr as the command was given it is a terminal: the
    descriptor `hold` or `filter_stderr` saved while a file or a pipe is in
    its place."""
    fd = _filtering[-1][1] if _filtering else _held[-1][0] if _held else 2
    try:
        return os.isatty(fd)
    except OSError:
        return False


def stop_filtering(timeout: float = 2.0) -> None:
    """Gives stderr back and waits (at most `timeout` seconds) for the
    filter to copy what it was sent."""
    if not _filtering:
        return
    process, saved = _filtering.pop()
    sys.stderr.flush()
    os.dup2(saved, 2)
    os.close(saved)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass  # a child process still holds the pipe: it ends with it


@contextlib.contextmanager
def quiet_tensorflow_start(argv=None):
    """Within: TensorFlow's start-up notices on stderr are held back (see
    the module doc); on leaving, TensorFlow's devices are listed (where the
    CUDA notices come from) and the rest of what was printed goes to
    stderr."""
    started = hold(argv)
    try:
        yield
    finally:
        if started:
            release()


@contextlib.contextmanager
def library_import():
    """Within, in a user's program (not a command or script, which hold
    from the start): TensorFlow's start-up notices, if it loads, held back
    as a command's are, with TF_CPP_MIN_LOG_LEVEL left as the user set."""
    started = False
    with contextlib.suppress(OSError, AttributeError):  # no stderr: as it is
        started = ("tensorflow" not in sys.modules and not is_command()
                   and not is_repository_script() and os.fstat(2)
                   and sys.stderr is not None and hold(log_level=False))
    try:
        yield
    finally:
        if started:
            release()


console_script_start()  # first in `import keras_vit`: a command starts quiet

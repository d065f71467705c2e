"""Hides TensorFlow's start-up notices from train.py and evaluate.py.

TensorFlow's C++ libraries print notices to stderr while they load, before
TF_CPP_MIN_LOG_LEVEL applies (oneDNN, CPU features), and on a machine
without an NVIDIA driver two CUDA lines (no CUDA driver; cuInit failed)
when the devices are listed. `quiet_tensorflow_start` sends stderr to a
temporary file while TensorFlow loads and lists its devices, then writes
back everything except those notices. `--verbose` on the command line
keeps them all.

This module uses the standard library only: train.py loads it by its path,
before the import of keras_vit loads TensorFlow.
"""

from __future__ import annotations

import contextlib
import os
import re
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


def _has_nvidia_driver() -> bool:
    return os.path.exists("/proc/driver/nvidia/version")


def noise(line: str, cpu_only: bool) -> bool:
    """Whether `line` is one of the start-up notices hidden."""
    patterns = _NOTICES + (_NO_GPU if cpu_only else ())
    return any(re.search(p, line) for p in patterns)


@contextlib.contextmanager
def quiet_tensorflow_start(argv=None):
    """Within: TensorFlow's start-up notices on stderr are held back (see
    the module doc); on leaving, TensorFlow's devices are listed (where the
    CUDA notices come from) and the rest of what was printed goes to
    stderr."""
    argv = sys.argv if argv is None else argv
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if any(re.fullmatch(r"--verbose(=(true|t|1|yes))?", str(a), re.I)
           for a in argv):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
            tf = sys.modules.get("tensorflow")
            if tf is not None:
                tf.config.list_physical_devices()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = held.read().decode(errors="replace")
            cpu_only = not _has_nvidia_driver()
            kept = [line for line in text.splitlines(keepends=True)
                    if not noise(line, cpu_only)]
            sys.stderr.write("".join(kept))
            sys.stderr.flush()

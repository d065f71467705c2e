"""What a TPU VM needs to find its TPU, and why it did not.

The TPU build of TensorFlow (`tensorflow-tpu`) drives the TPU through
libtpu, a separate package. `tensorflow-tpu 2.20.0` asks for
`libtpu~=0.0.14`, an open range, while the package index serves libtpu
releases far newer than the one that build was made with; a mismatched
libtpu is a known cause of "No TPU platform found". So the TPU install
pins the pair (`KERAS_VIT_TENSORFLOW=tensorflow-tpu pip install
".[tpu]"`, setup.py and setup.cfg's `tpu` extra; tests/test_tpu_env.py
checks that they pin `TENSORFLOW_TPU` and `LIBTPU`), start-up warns about
any other pair (`version_problems`), and a failed initialisation says
which of the known causes it finds (`diagnose`): a TensorFlow without TPU
support, no TPU device on this machine, a TPU held by another process,
libtpu switched off, missing or of another release.

TensorFlow turns every initialisation failure of a TPU VM's own TPU into
"TPUs not found in the cluster" (its cause after "Failed in
initialization:"), and libtpu writes the detail into its own log
(/tmp/tpu_logs), hence the checks of the machine here.
"""

from __future__ import annotations

import glob
import importlib.metadata
import os
from typing import List, Optional, Tuple

# The TPU build of TensorFlow this package installs, and the libtpu
# release it was built against (its own requirement's lower bound, the
# release current when TensorFlow 2.20 was made).
TENSORFLOW_TPU = "2.20.0"
LIBTPU = "0.0.14"
PIN = f"pip install tensorflow-tpu=={TENSORFLOW_TPU} libtpu=={LIBTPU}"
INSTALL = 'KERAS_VIT_TENSORFLOW=tensorflow-tpu pip install -e ".[tpu,gcs]"'
# Where libtpu writes its own account of a failure.
LIBTPU_LOGS = "/tmp/tpu_logs"
# The device files of a TPU VM's chips (v4 and later; v2 and v3).
DEVICE_PATTERNS = ("accel*", "vfio/[0-9]*")


def installed(distribution: str) -> Optional[str]:
    """The installed version of `distribution`, or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def version_problems() -> List[Tuple[str, str]]:
    """(problem, fix) for what keeps this install from being the tested
    TPU pair; [] for tensorflow-tpu TENSORFLOW_TPU with libtpu LIBTPU."""
    problems = []
    tf_tpu = installed("tensorflow-tpu")
    if tf_tpu is None:
        others = [f"{name} {installed(name)}" for name in
                  ("tensorflow", "tensorflow-cpu") if installed(name)]
        problems.append((
            f"TensorFlow here is {', '.join(others) or 'not tensorflow-tpu'}"
            ", a build without TPU support",
            f"pip uninstall -y tensorflow tensorflow-cpu, then {INSTALL} "
            f"(or {PIN})",
        ))
    elif tf_tpu != TENSORFLOW_TPU:
        problems.append((
            f"tensorflow-tpu {tf_tpu} is installed; this package is tested "
            f"with tensorflow-tpu {TENSORFLOW_TPU}", PIN,
        ))
    lib = installed("libtpu")
    if lib is None:
        problems.append(("libtpu is not installed", PIN))
    elif lib != LIBTPU:
        problems.append((
            f"libtpu {lib} is installed, but tensorflow-tpu "
            f"{TENSORFLOW_TPU} was built with libtpu {LIBTPU} (another "
            "libtpu is a known cause of \"No TPU platform found\")",
            f"pip install libtpu=={LIBTPU}",
        ))
    if os.environ.get("TPU_LOAD_LIBRARY") == "0":
        problems.append((
            "TPU_LOAD_LIBRARY=0 keeps TensorFlow from loading libtpu",
            "unset TPU_LOAD_LIBRARY",
        ))
    return problems


def tpu_devices(dev: str = "/dev") -> List[str]:
    """The TPU chips' device files on this machine ([] off a TPU VM)."""
    found = []
    for pattern in DEVICE_PATTERNS:
        found.extend(glob.glob(os.path.join(dev, pattern)))
    return sorted(found)


def tpu_holders(devices: List[str], proc: str = "/proc",
                own_pid: Optional[int] = None) -> List[Tuple[int, str]]:
    """(pid, command line) of the other processes that hold one of the
    TPU's `devices` open (a TPU VM's TPU serves one process at a time).
    Processes of other users whose files cannot be read are missed."""
    own_pid = os.getpid() if own_pid is None else own_pid
    wanted = {os.path.realpath(d) for d in devices}
    holders = []
    for fd_dir in glob.glob(os.path.join(proc, "[0-9]*", "fd")):
        pid = int(os.path.basename(os.path.dirname(fd_dir)))
        if pid == own_pid:
            continue
        try:
            targets = {os.readlink(os.path.join(fd_dir, fd))
                       for fd in os.listdir(fd_dir)}
        except OSError:  # gone, or another user's
            continue
        if targets & wanted:
            holders.append((pid, _command_line(proc, pid)))
    return sorted(holders)


def _command_line(proc: str, pid: int) -> str:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return "?"
    return " ".join(w.decode("utf-8", "replace") for w in words if w)[:80]


def diagnose(dev: str = "/dev", proc: str = "/proc") -> Tuple[str, str]:
    """(cause, fix) of a failed initialisation of this machine's own TPU,
    from what the machine shows (see the module docstring)."""
    problems = version_problems()
    if installed("tensorflow-tpu") is None:
        return problems[0]
    devices = tpu_devices(dev)
    if not devices:
        return ("this machine has no TPU device (no /dev/accel* or "
                "/dev/vfio/*): it is not a TPU VM", "")
    holders = tpu_holders(devices, proc)
    if holders:
        who = "; ".join(f"process {pid} ({cmd})" for pid, cmd in holders)
        pids = " ".join(str(pid) for pid, _ in holders)
        return (f"the TPU is in use by {who}, and a TPU VM's TPU serves one "
                "process at a time",
                f"stop it (kill {pids}) or wait for it to end")
    if problems:
        causes, fixes = zip(*problems)
        return "; ".join(causes), "; ".join(fixes)
    return (f"libtpu gave its reason in its log ({LIBTPU_LOGS}, and the "
            "lines above)", "")

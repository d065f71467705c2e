"""Cloud TPU set-up: the standard sequence, bounded in time, and one line
naming the fix for each way it fails.

TPUClusterResolver -> experimental_connect_to_cluster ->
initialize_tpu_system -> TPUStrategy (the connect step skipped for a TPU
VM's own TPU, tpu="local"). It must run at program start, before any op.
A grpc:// address that does not answer fails at once; a connection that
hangs ends the process after connect_timeout_s (`cluster.run_guarded`).

On a TPU VM, start-up first checks the installed TensorFlow and libtpu
against the tested pair and warns with the command that installs it; a
failed initialisation says what was tried, TensorFlow's own reason and
the cause found on the machine (`tpu_env.diagnose`: a TensorFlow without
TPU support, no TPU, a TPU in use, libtpu off, missing or mismatched),
each with its fix.
"""

from __future__ import annotations

import os
from typing import Optional

import tensorflow as tf
from absl import logging

from keras_vit.training import cluster, tpu_env
from keras_vit.training.cluster import SetupError

# The choices a failed TPU set-up names.
_TPU_FIXES = (
    "run on a TPU VM (`tpu`=local), pass `tpu`=NAME (a Cloud TPU's name) or "
    "`tpu`=grpc://HOST:8470, or run without a TPU: `strategy`=auto or "
    "`strategy`=cpu"
)


def tpu_strategy(
    tpu: Optional[str], connect_timeout_s: Optional[float] = None
) -> tf.distribute.TPUStrategy:
    """Connects to a Cloud TPU and returns a TPUStrategy.

    Args:
        tpu: str or None. The TPU name or grpc:// address; "local" on a TPU
            VM (the TPU attached to this host). None: found from the
            environment (e.g. TPU_NAME) by the resolver.
        connect_timeout_s: float or None. Give up connecting after this
            many seconds (None: config.trainer.connect_timeout_s's default).

    Raises:
        SetupError: no TPU, or it cannot be reached; the message names the
            fix.
    """
    if tpu and tpu.startswith("grpc://"):
        address = tpu[len("grpc://"):]
        if not cluster.reachable(address, timeout_s=5.0):
            raise SetupError(
                f"Cannot reach the TPU at `tpu`={tpu}: nothing answers at "
                f"{address}. Check the address (the TPU's IP and port "
                f"8470), or {_TPU_FIXES}."
            )

    if tpu == "local":
        for problem, fix in tpu_env.version_problems():
            logging.warning("TPU install: %s. To fix: %s.", problem, fix)

    def connect():
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        if tpu != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        logging.info("TPU devices: %s", tf.config.list_logical_devices("TPU"))
        return tf.distribute.TPUStrategy(resolver)

    timeout = cluster.connect_timeout(connect_timeout_s)
    logging.info(
        "Connecting to %s (the process ends with status 1 if that takes "
        "more than %.0f s: config.trainer.connect_timeout_s).",
        f"the TPU {tpu}" if tpu else "the TPU", timeout,
    )
    try:
        return cluster.run_guarded(connect, timeout)
    except Exception as e:  # each failure below becomes one line
        raise _tpu_setup_error(tpu, e) from None


def _tpu_setup_error(tpu: Optional[str], error: Exception) -> SetupError:
    text = cluster.first_line(error)
    if "Please provide a TPU Name" in text:
        return SetupError(
            "`strategy`=tpu found no TPU: no `tpu`, no TPU_NAME and no TPU "
            f"attached to this machine. To fix: {_TPU_FIXES}."
        )
    if tpu == "local":
        return local_tpu_error(text)
    named = (f"`tpu`={tpu}" if tpu else
             f"TPU_NAME={os.environ['TPU_NAME']} (no `tpu`)"
             if os.environ.get("TPU_NAME") else "(no `tpu`, no TPU_NAME)")
    if isinstance(error, OSError):  # urllib's URLError: the metadata server
        return SetupError(
            f"Cannot look up the Cloud TPU {named}: its name is "
            "resolved through the Google Cloud metadata server, which does "
            f"not answer here ({text}). Run on a Google Cloud VM of the TPU's "
            f"project and zone, or {_TPU_FIXES}."
        )
    return SetupError(
        f"Cannot set up the TPU {named} ({text}). Check the name and "
        f"that the TPU is ready, or {_TPU_FIXES}."
    )


def local_tpu_error(text: str) -> SetupError:
    """The one line for a failed initialisation of this machine's own TPU:
    what was tried, TensorFlow's reason and the cause found here."""
    reason = text.split("Failed in initialization:", 1)[-1].strip(" .")
    # An op's attributes (a long list) say nothing the cause does not.
    reason = reason.split(" with these attrs: ", 1)[0]
    if len(reason) > 200:  # at a word's end
        reason = reason[:200].rsplit(" ", 1)[0] + " (cut short)"
    cause, fix = tpu_env.diagnose()
    return SetupError(
        "Cannot initialise this machine's TPU (`tpu`=local: "
        "TPUClusterResolver, then initialize_tpu_system); TensorFlow says: "
        f"{reason}. Found: {cause}. To fix: "
        f"{fix + ', or ' if fix else ''}{_TPU_FIXES}."
    )


def find_tpu(tpu: Optional[str], connect_timeout_s: Optional[float]):
    try:
        return tpu_strategy(tpu, connect_timeout_s)
    except SetupError as e:
        # On a machine that looks like a TPU host, falling back to its CPU
        # is a slow surprise: said as a warning.
        log = logging.warning if tpu_in_environment() else logging.info
        log("No TPU found (%s): the run goes on without one.", e)
        return None


def default_tpu() -> Optional[str]:
    """The `tpu` to use when none is given: None where TPU_NAME is set (the
    resolver reads it), "local" on a TPU VM (its TPU is attached)."""
    if os.environ.get("TPU_NAME"):
        return None
    return "local" if tpu_in_environment() else None


def tpu_in_environment() -> bool:
    return bool(
        os.environ.get("TPU_NAME")
        or os.environ.get("TPU_ACCELERATOR_TYPE")
        or os.path.exists("/dev/accel0")
        or os.path.exists("/dev/vfio/0")
    )

"""tf.distribute strategies from command-line flags.

`--strategy` in {auto, tpu, mirrored, multiworker, cpu} and `--tpu` (a TPU
name, a grpc:// address, or "local" on a TPU VM). TPU set-up follows the
standard sequence, which must run at program start, before any op:
TPUClusterResolver -> experimental_connect_to_cluster ->
initialize_tpu_system -> TPUStrategy (the connect step skipped for a
TPU VM's own TPU). Without --tpu, a TPU VM uses its local TPU and TPU_NAME
names a remote one.

Preemption: `SigtermFlag` lets the host loop checkpoint and stop on SIGTERM
(one host, and Cloud TPU VMs); for multi-worker and TPU strategies
`preemption_handler` adds TensorFlow's PreemptionCheckpointHandler, which
makes every worker save at the same step.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Optional

import tensorflow as tf
from absl import logging

STRATEGIES = ("auto", "tpu", "mirrored", "multiworker", "cpu")


def tpu_strategy(tpu: Optional[str]) -> tf.distribute.TPUStrategy:
    """Connects to a Cloud TPU and returns a TPUStrategy.

    Args:
        tpu: str or None. The TPU name or grpc:// address; "local" on a TPU
            VM (the TPU attached to this host). None: found from the
            environment (e.g. TPU_NAME) by the resolver.
    """
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    if tpu != "local":
        tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    logging.info("TPU devices: %s", tf.config.list_logical_devices("TPU"))
    return tf.distribute.TPUStrategy(resolver)


def _find_tpu(tpu: Optional[str]):
    try:
        return tpu_strategy(tpu)
    except (ValueError, RuntimeError, tf.errors.NotFoundError) as e:
        logging.info("No TPU found (%s).", e)
        return None


def create_strategy(
    name: str = "auto", tpu: Optional[str] = None
) -> tf.distribute.Strategy:
    """Builds the strategy named by `--strategy`.

    auto: a TPU if `tpu` is given or one is found, else all local GPUs
    (MirroredStrategy), else the default (one-device) strategy on the CPU.
    multiworker: MultiWorkerMirroredStrategy from the TF_CONFIG environment
    variable.
    """
    if name not in STRATEGIES:
        raise ValueError(
            f"Unknown --strategy {name!r}: use one of {', '.join(STRATEGIES)}."
        )
    if name == "tpu":
        return tpu_strategy(tpu if tpu is not None else _default_tpu())
    if name == "auto":
        if tpu is not None:
            return tpu_strategy(tpu)
        strategy = (
            _find_tpu(_default_tpu()) if _tpu_in_environment() else None
        )
        if strategy is not None:
            return strategy
        gpus = tf.config.list_logical_devices("GPU")
        if gpus:
            return tf.distribute.MirroredStrategy()
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multiworker":
        _check_tf_config()
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.OneDeviceStrategy("/cpu:0")


def _check_tf_config() -> None:
    """A readable error for a malformed TF_CONFIG (TensorFlow's own is a
    JSON traceback deep inside the resolver)."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        logging.warning(
            "--strategy=multiworker without TF_CONFIG: training on this "
            "host only. Set TF_CONFIG to the cluster and this task's place "
            "in it on every worker."
        )
        return
    try:
        spec = json.loads(raw)
        workers = spec["cluster"]["worker"]
        task = spec["task"]
        task["type"], int(task["index"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(
            "TF_CONFIG must be JSON like {\"cluster\": {\"worker\": "
            "[\"host1:port\", \"host2:port\"]}, \"task\": {\"type\": "
            f"\"worker\", \"index\": 0}}}}; got {raw!r} ({e!r})."
        ) from None
    logging.info(
        "MultiWorkerMirroredStrategy: %d workers, this is %s %s.",
        len(workers), task["type"], task["index"],
    )


def _default_tpu() -> Optional[str]:
    """The --tpu to use when none is given: None where TPU_NAME is set (the
    resolver reads it), "local" on a TPU VM (its TPU is attached)."""
    if os.environ.get("TPU_NAME"):
        return None
    return "local" if _tpu_in_environment() else None


def _tpu_in_environment() -> bool:
    return bool(
        os.environ.get("TPU_NAME")
        or os.environ.get("TPU_ACCELERATOR_TYPE")
        or os.path.exists("/dev/accel0")
        or os.path.exists("/dev/vfio/0")
    )


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True on the worker that writes summaries, metrics and exports."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief"):
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and not has_chief


def is_multi_worker(strategy: tf.distribute.Strategy) -> bool:
    """True for a MultiWorkerMirroredStrategy over more than one worker."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return False
    spec = strategy.cluster_resolver.cluster_spec().as_dict()
    return sum(len(tasks) for tasks in spec.values()) > 1


def is_tpu(strategy: tf.distribute.Strategy) -> bool:
    return isinstance(strategy, tf.distribute.TPUStrategy)


def preemption_handler(strategy: tf.distribute.Strategy, manager):
    """TensorFlow's PreemptionCheckpointHandler for the strategies it
    supports (multi-worker MultiWorkerMirroredStrategy, TPUStrategy), else
    None.

    Call `save_checkpoint_if_preempted(checkpoint_number=step)` between host
    loops: when any worker is told to stop, all of them save at the same
    step and the process exits with the platform's restart code (42 off
    Google Cloud). Off Google Cloud it owns SIGTERM; on Cloud TPU VMs it
    does nothing, and `SigtermFlag` does the work.

    Args:
        strategy: tf.distribute.Strategy.
        manager: tf.train.CheckpointManager. Where the checkpoint goes (a
            scratch directory on non-chief workers).
    """
    if not (is_multi_worker(strategy) or is_tpu(strategy)):
        return None
    return tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, manager
    )


def _owned_by_handler(handler) -> bool:
    owner = getattr(handler, "__self__", None)
    return isinstance(
        owner, tf.distribute.experimental.PreemptionCheckpointHandler
    )


class SigtermFlag:
    """Records SIGTERM (what a preempted VM receives) so that the host loop
    can checkpoint and stop at a step boundary.

    A context manager; leaves SIGTERM alone where a PreemptionCheckpointHandler
    already handles it, and outside the main thread.
    """

    def __init__(self):
        self.requested = False
        self.installed = False
        self._previous = None

    def __enter__(self):
        try:
            current = signal.getsignal(signal.SIGTERM)
            if not _owned_by_handler(current):
                self._previous = signal.signal(signal.SIGTERM, self._handle)
                self.installed = True
        except ValueError:  # not the main thread
            pass
        return self

    def _handle(self, signum, frame):
        logging.warning("SIGTERM received: saving a checkpoint and stopping.")
        self.requested = True

    def __exit__(self, *exc):
        if self.installed:
            signal.signal(signal.SIGTERM, self._previous)
            self.installed = False
        return False


def any_worker(strategy: tf.distribute.Strategy, flag: bool) -> bool:
    """True if `flag` is true on any worker (an all-reduce for
    multi-worker strategies; `flag` itself otherwise), so that every worker
    stops at the same step."""
    if not is_multi_worker(strategy):
        return bool(flag)
    fn = _SUM_FNS.get(id(strategy))
    if fn is None:

        @tf.function
        def fn(value):
            per_replica = strategy.run(tf.identity, args=(value,))
            return strategy.reduce("SUM", per_replica, axis=None)

        _SUM_FNS[id(strategy)] = fn
    return bool(fn(tf.constant(1.0 if flag else 0.0)) > 0)


_SUM_FNS = {}

"""tf.distribute strategies from command-line flags.

`--strategy` in {auto, tpu, mirrored, multiworker, cpu} and `--tpu` (a TPU
name, a grpc:// address, or "local" on a TPU VM). TPU set-up follows the
standard sequence, which must run at program start, before any op:
TPUClusterResolver -> experimental_connect_to_cluster ->
initialize_tpu_system -> TPUStrategy.
"""

from __future__ import annotations

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
        return tpu_strategy(tpu)
    if name == "auto":
        if tpu is not None:
            return tpu_strategy(tpu)
        strategy = _find_tpu(None) if _tpu_in_environment() else None
        if strategy is not None:
            return strategy
        gpus = tf.config.list_logical_devices("GPU")
        if gpus:
            return tf.distribute.MirroredStrategy()
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multiworker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.OneDeviceStrategy("/cpu:0")


def _tpu_in_environment() -> bool:
    import os

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

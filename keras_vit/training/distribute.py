"""tf.distribute strategies from command-line flags.

`--strategy` in {auto, tpu, mirrored, multiworker, cpu}, `--tpu` (a TPU
name, a grpc:// address, or "local" on a TPU VM) and `--cpu_devices` (split
the CPU into logical devices for MirroredStrategy). TPU set-up follows the
standard sequence, which must run at program start, before any op:
TPUClusterResolver -> experimental_connect_to_cluster ->
initialize_tpu_system -> TPUStrategy (the connect step skipped for a
TPU VM's own TPU). Without --tpu, a TPU VM uses its local TPU and TPU_NAME
names a remote one.

Set-up that waits on other machines (the workers of TF_CONFIG, a remote
TPU) is bounded by `connect_timeout_s` and ends on SIGTERM
(`cluster.wait_for_workers`, `cluster.run_guarded`); every set-up failure is
a `cluster.SetupError` whose one line names the fix.

Preemption: `keras_vit.training.interrupt.StopRequest` lets the host loop
checkpoint and stop on SIGTERM or Ctrl-C (one host, and Cloud TPU VMs,
whose maintenance events and preemptions send SIGTERM); for multi-worker
strategies `preemption_handler` adds TensorFlow's
PreemptionCheckpointHandler, which makes every worker save at the same
step and then raises `Preempted`. TPUStrategy gets none: on Google Cloud's
TPU VMs TensorFlow's handler does nothing (it logs that TPUs on GCP are
not supported, and `save_checkpoint_if_preempted` returns at once), so
there SIGTERM is what saves the checkpoint.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Callable, List, Optional

import tensorflow as tf
from absl import logging

from keras_vit.data import sources
from keras_vit.errors import (  # noqa: F401 (Preempted: raised here)
    PREEMPTED_EXIT_CODE,
    Preempted,
    UsageError,
)
from keras_vit.training import (
    cluster,
    data_turn,
    exit_barrier,
    shared_folder,
    tf_config,
)
from keras_vit.training import tpu as tpu_lib
from keras_vit.training.cluster import SetupError

STRATEGIES = ("auto", "tpu", "mirrored", "multiworker", "cpu")
# The exit status of every command after a preemption (keras_vit.errors).
RESTART_EXIT_CODE = PREEMPTED_EXIT_CODE


def create_strategy(
    strategy: str = "auto",
    tpu: Optional[str] = None,
    *,
    connect_timeout_s: Optional[float] = None,
    cpu_devices: int = 0,
    training: bool = True,
) -> tf.distribute.Strategy:
    """Builds the strategy named `strategy`.

    auto: a TPU if `tpu` is given or one is found, else all local GPUs
    (MirroredStrategy), else the CPU (its `cpu_devices` logical devices
    mirrored when there are several, else the default one-device
    strategy).
    multiworker: MultiWorkerMirroredStrategy from the TF_CONFIG environment
    variable, once every worker has connected.

    Args:
        strategy: str. One of STRATEGIES.
        tpu: str or None. The TPU's name or grpc:// address; "local" on a
            TPU VM (`tpu_lib.tpu_strategy`).
        connect_timeout_s: float or None. How long to wait for the workers
            of TF_CONFIG or a remote TPU (None:
            config.trainer.connect_timeout_s's default; 0: forever).
        cpu_devices: int. Split the CPU into this many logical devices
            (auto and mirrored without GPUs: one replica each); 0 or 1:
            leave it whole.
        training: bool. The strategy trains (an evaluator task of
            TF_CONFIG may only evaluate).

    Raises:
        SetupError: the strategy cannot be set up; one line names the fix.
    """
    cpu_devices = _check_arguments(strategy, tpu, cpu_devices)
    if strategy in ("mirrored", "cpu") or (strategy == "auto"
                                           and tpu is None):
        _check_no_cluster(strategy, training)
    if cpu_devices > 1:
        if strategy not in ("auto", "mirrored"):
            raise SetupError(
                f"`cpu_devices`={cpu_devices} splits the CPU for "
                f"MirroredStrategy: use it with `strategy`=mirrored (or "
                f"auto), not `strategy`={strategy}."
            )
        _split_cpu(cpu_devices)
    if strategy == "tpu":
        return tpu_lib.tpu_strategy(
            tpu if tpu is not None else tpu_lib.default_tpu(),
            connect_timeout_s,
        )
    if strategy == "auto":
        if tpu is not None:
            return tpu_lib.tpu_strategy(tpu, connect_timeout_s)
        found = (
            tpu_lib.find_tpu(tpu_lib.default_tpu(), connect_timeout_s)
            if tpu_lib.tpu_in_environment() else None
        )
        if found is not None:
            return found
        if tf.config.list_logical_devices("GPU"):
            return tf.distribute.MirroredStrategy()
        if cpu_devices > 1:
            return _cpu_mirrored(cpu_devices)
        return tf.distribute.get_strategy()
    if strategy == "mirrored":
        if cpu_devices > 1 and not tf.config.list_logical_devices("GPU"):
            return _cpu_mirrored(cpu_devices)
        return tf.distribute.MirroredStrategy()
    if strategy == "multiworker":
        return _multi_worker(cluster.connect_timeout(connect_timeout_s))
    return tf.distribute.OneDeviceStrategy("/cpu:0")


def _check_arguments(strategy: str, tpu: Optional[str],
                     cpu_devices) -> int:
    """`cpu_devices` as an int, once the three arguments are known to go
    together (a SetupError naming the one that does not)."""
    if strategy not in STRATEGIES:
        raise SetupError(
            f"Unknown `strategy` {strategy!r}: use one of "
            f"{', '.join(STRATEGIES)}."
        )
    cpu_devices = int(cpu_devices or 0)
    if cpu_devices < 0:
        raise SetupError(f"`cpu_devices`={cpu_devices}: give 2 or more to "
                         "split the CPU, or leave it out.")
    if tpu is not None and strategy not in ("auto", "tpu"):
        raise SetupError(
            f"`tpu`={tpu} names a TPU, which `strategy`={strategy} does not "
            "use: pass `strategy`=tpu (or auto), or leave `tpu` out.")
    return cpu_devices


def _check_no_cluster(strategy: str, training: bool) -> None:
    """A host of a TF_CONFIG cluster (as Vertex AI or a TFJob sets it on
    every host) started with a one-host strategy would run alone and
    write the shared workdir as if it were the chief: refused; so is
    training on its evaluator task, which evaluates only."""
    try:
        spec = json.loads(os.environ.get("TF_CONFIG") or "{}")
        tasks = sum(len(spec["cluster"].get(job, []))
                    for job in ("chief", "worker"))
        role = spec.get("task", {}).get("type")
    except (ValueError, KeyError, TypeError, AttributeError):
        return  # not a cluster this host belongs to
    if tasks > 1 and role in ("chief", "worker"):
        raise SetupError(
            f"TF_CONFIG names a cluster of {tasks} tasks, this one its "
            f"{role}, and `strategy`={strategy} runs on this host alone: "
            "pass --strategy=multiworker to run on the cluster, or unset "
            "TF_CONFIG to run here alone.")
    if role == "evaluator" and training:
        raise SetupError(
            "TF_CONFIG's task is of type 'evaluator': training runs on the "
            "chief and the workers. On an evaluator, evaluate the run with "
            "keras-vit-evaluate --model=<workdir>, or unset TF_CONFIG to "
            "train here alone.")


def _split_cpu(count: int) -> None:
    """Splits the CPU into `count` logical devices (before TensorFlow
    initialises its devices)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu) or []
    if len(current) == count:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * count
        )
    except RuntimeError:
        raise SetupError(
            f"`cpu_devices`={count}: TensorFlow's devices are already "
            f"set up ({len(tf.config.list_logical_devices('CPU'))} CPU "
            "device(s)); "
            "create the strategy before running any TensorFlow op."
        ) from None


def _cpu_mirrored(count: int) -> tf.distribute.MirroredStrategy:
    return tf.distribute.MirroredStrategy(
        [f"/cpu:{i}" for i in range(count)]
    )


def _multi_worker(timeout: float) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy once every worker of TF_CONFIG answers,
    within `timeout` seconds."""
    if not tf_config.check():
        return tf.distribute.MultiWorkerMirroredStrategy()
    tasks, me = cluster.cluster_tasks()
    if me is None:
        raise SetupError(
            f"TF_CONFIG's task {os.environ['TF_CONFIG']!r} is not in its "
            "cluster: give each worker its own type and index (\"worker\", "
            f"0 to {len(tasks) - 1})."
        )
    cluster.wait_for_workers(timeout)
    logging.info(
        "All %d workers answer: forming the cluster (the process ends with "
        "status 1 if that takes more than %.0f s).", len(tasks), timeout,
    )
    return cluster.run_guarded(tf.distribute.MultiWorkerMirroredStrategy,
                               timeout)


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
    return sum(len(spec.get(job, ())) for job in ("chief", "worker")) > 1


def prepare_in_turn(strategy: tf.distribute.Strategy) -> Callable:
    """(prepare, name) -> prepare's result: data set `name`'s download and
    preparation in this run's turn (`data_turn.chief_first`): the chief's
    first in a multi-worker run, at once in any other."""
    return functools.partial(
        data_turn.chief_first, multi_worker=is_multi_worker(strategy),
        chief=is_chief(strategy))


def prepare_input(inp, strategy: tf.distribute.Strategy) -> None:
    """`config.input`'s TFDS data set (`sources.tfds_name`) in a
    multi-worker run: prepared by the chief first, then by the other
    workers (`prepare_in_turn`), so that no two write it at once; any other
    run prepares it where it first reads it (`sources.tfds_builder`)."""
    name = sources.tfds_name(inp)
    if name and is_multi_worker(strategy):
        prepare_in_turn(strategy)(functools.partial(sources.prepare, inp),
                                  name)


def is_tpu(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` runs on TPUs (it then compiles the whole replica
    step with XLA itself: the step is one TPU computation)."""
    return isinstance(strategy, (tf.distribute.TPUStrategy,
                                 tf.distribute.experimental.TPUStrategy))


def preemption_handler(
    strategy: tf.distribute.Strategy, manager, save: Callable[[int], None]
):
    """TensorFlow's PreemptionCheckpointHandler for a multi-worker
    MultiWorkerMirroredStrategy, else None.

    Call `save_checkpoint_if_preempted(checkpoint_number=step)` between host
    loops: when any worker is told to stop, all of them call `save(step)` at
    the same step and then it raises `Preempted` (instead of TensorFlow's
    sys.exit), so that the run can end cleanly. Off Google Cloud it owns
    SIGTERM. TensorFlow's handler does nothing on Google Cloud's TPU VMs
    and CPU VMs (TF 2.20 and 2.21: it logs that they are not supported and
    `save_checkpoint_if_preempted` returns at once), so a TPUStrategy gets
    none: `interrupt.StopRequest` saves on the SIGTERM a TPU VM receives.

    Args:
        strategy: tf.distribute.Strategy.
        manager: tf.train.CheckpointManager. What the handler restores from
            when it starts (its directory is never written: `save` does
            the saving).
        save: step -> None. Saves the checkpoint of that step on this
            worker (see `state.CheckpointWriter.save`).
    """
    if not is_multi_worker(strategy):
        return None
    cluster.quiet_watcher_errors()

    def stop():
        raise Preempted()

    config = tf.distribute.experimental.TerminationConfig(
        exit_fn=stop,
        save_fn=lambda *args, **kwargs: save(kwargs["checkpoint_number"]),
    )
    return tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, manager, termination_config=config
    )


def leave_together(strategy: tf.distribute.Strategy) -> None:
    """A multi-worker run's processes, its work done, end together
    (`exit_barrier`): a worker that ends first is reported as crashed by
    the chief's coordination service. Nothing in any other run."""
    if is_multi_worker(strategy):
        exit_barrier.wait_at_exit()


def any_worker(strategy: tf.distribute.Strategy, flag: bool) -> bool:
    """True if `flag` is true on any worker (an all-reduce for
    multi-worker strategies; `flag` itself otherwise), so that every worker
    stops at the same step."""
    if not is_multi_worker(strategy):
        return bool(flag)
    return sum_over_workers(strategy, [1.0 if flag else 0.0])[0] > 0


def sum_over_workers(strategy: tf.distribute.Strategy,
                     values: List[float]) -> List[float]:
    """The element-wise sum over the workers of the whole numbers
    `values` each worker passes (an all-reduce; each worker counted once,
    whatever its number of replicas): rounded, as a worker's share of
    1/replicas is not exact in float32 (3, 5, 6 or 7 of them). Exact
    while every sum stays below 2 ** 24."""
    fn = _VECTOR_SUMS.get(id(strategy))
    if fn is None:
        share = 1.0 / len(strategy.extended.worker_devices)

        @tf.function
        def fn(value):
            per_replica = strategy.run(lambda v: v * share, args=(value,))
            return strategy.reduce("SUM", per_replica, axis=None)

        _VECTOR_SUMS[id(strategy)] = fn
    return [float(round(v))
            for v in fn(tf.constant(values, tf.float32)).numpy()]


_VECTOR_SUMS = {}


def check_shared(folder: str, what: str,
                 strategy: tf.distribute.Strategy) -> None:
    """In a multi-worker run, a UsageError on every worker alike where
    some worker does not see the files the chief writes into `folder`
    (`shared_folder.check`); nothing in any other run."""
    if not is_multi_worker(strategy):
        return
    tasks, this = cluster.cluster_tasks()
    if this is None:
        return
    shared_folder.check(folder, what, tasks=tasks, this=tasks.index(this),
                        sum_fn=functools.partial(sum_over_workers, strategy))

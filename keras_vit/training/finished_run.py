"""Whether a training run's workdir holds a finished run, decided once
for every worker of a cluster.

A finished run started again trains nothing: the command says so and
exits with status 0. Each worker reads the workdir on its own, so in a
cluster the workers vote (one all-reduce) before any acts on what it
read: where one found the run finished and another did not, or one could
not read it, one worker would otherwise train alone while the other
left, or wait in a collective for a worker that had gone.
"""

from __future__ import annotations

import os
from typing import Dict, Optional

import tensorflow as tf
from absl import logging

from keras_vit import errors
from keras_vit.errors import UsageError
from keras_vit.storage import checkpoint_list
from keras_vit.storage import workdir as wd
from keras_vit.training import (
    distribute,
    exit_barrier,
    model_init,
    same_settings,
)


def finished_before(config, workdir: str, length: str,
                    strategy) -> Optional[Dict]:
    """The metrics of the run in `workdir` when it finished its steps
    already, said in one line (to train on, raise config.trainer.`length`,
    the field its length is given in); else None, once the workdir is
    found writable (a finished run is also read where it is not). The
    workers of a cluster then leave together (`exit_barrier`)."""
    total = int(config.trainer.total_steps)
    if distribute.is_multi_worker(strategy):
        same_settings.check(config, strategy)
        finished = _agreed(config, workdir, total, strategy, length)
    else:
        finished = _read(config, workdir, total, length)
    if finished is None:
        return None
    logging.info(
        "The run in %s has finished: step %d of %d (%d asked). Its "
        "results: %s. To train on, raise config.trainer.%s.",
        workdir, finished["steps"], finished["steps"], total,
        os.path.join(workdir, wd.METRICS), length)
    if distribute.is_multi_worker(strategy):
        exit_barrier.wait_at_exit()
    return finished


def _read(config, workdir: str, total: int, length: str
          ) -> Optional[Dict]:
    """`wd.finished_run`, once the config is checked against the run's
    and, for a run to train, the workdir found writable and its last
    checkpoint no later than the `total` steps asked (a run stopped past
    them would end there, its config.json and metrics.json disagreeing
    on its length): else a UsageError naming the field, `length`."""
    finished = wd.finished_run(workdir, total)
    model_init.check_workdir_config(config, workdir,
                                    finished=finished is not None)
    if finished is None:
        wd.check_writable(workdir)
        latest = checkpoint_list.latest(os.path.join(workdir,
                                                     wd.CHECKPOINTS))
        step = checkpoint_list.step_of(latest)
        if step is not None and step > total:
            asked = (f"config.trainer.total_steps={total}" if length ==
                     "total_steps" else f"{total} steps (config.trainer."
                     f"{length}={config.trainer[length]})")
            raise UsageError(
                f"The run in {workdir} has trained {step} steps (its latest "
                f"checkpoint, {latest}), more than the {asked} asked: ask for "
                f"{step} steps or more to resume it, or use a new --workdir.")
        if length == "epochs":
            _say_recounted(config, workdir)
    return finished


def _say_recounted(config, workdir: str) -> None:
    """Warns where the run in `workdir` to resume, counted in the same
    epochs of the same split at the same batch, counted other steps when
    it last ran: its training split changed size (images added or
    removed), and it trains to the new count; the fix keeps its own."""
    old = wd.resumable_config(workdir)
    same = ("trainer.epochs", "input.batch_size", "input.train_split",
            "input.train_examples_per_class")
    if old is None or old.trainer.total_steps == config.trainer.total_steps \
            or any(old[k] != config[k] for k in same):
        return
    logging.warning(
        "config.trainer.epochs=%g is %d steps of the training split now, "
        "where the run in %s counted %d when it last ran: the split has "
        "changed size since, and the run goes by the new count. "
        "--config.trainer.total_steps=%d in place of epochs keeps its own.",
        config.trainer.epochs, config.trainer.total_steps, workdir,
        old.trainer.total_steps, old.trainer.total_steps)


def _agreed(config, workdir: str, total: int, strategy, length: str
            ) -> Optional[Dict]:
    """`_read` on this worker where every worker of the cluster read the
    same. Every worker reaches the vote (an all-reduce) before any
    raises: this worker's own error after it, and where another worker's
    read failed, or some found the run finished and some did not, a
    UsageError on every worker alike."""
    finished = error = None
    try:
        finished = _read(config, workdir, total, length)
    except Exception as caught:  # noqa: BLE001 (raised after the vote)
        error = caught
    found, failed, workers = distribute.sum_over_workers(strategy, [
        float(finished is not None), float(error is not None), 1.0])
    unreadable = (f"{failed:.0f} of {workers:.0f} workers could not read "
                  f"the run in {workdir}")
    fix = ("check the folder and its permissions on every worker, then "
           "run the same command on every worker again.")
    if isinstance(error, (OSError, tf.errors.OpError)):
        raise UsageError(f"{unreadable} (this one: "
                         f"{errors.one_line(error)[:200]}): {fix}")
    if error is not None:
        raise error
    if failed:
        raise UsageError(f"{unreadable} (their logs say why): {fix}")
    if 0 < found < workers:
        raise UsageError(
            f"The workers read the run in {workdir} differently: "
            f"{found:.0f} of {workers:.0f} found it finished "
            f"({wd.METRICS} and its last checkpoint), the others not (a "
            "read that failed, or files changing): run the same command on "
            "every worker again once nothing else writes there.")
    return finished

"""Who writes a run's training state (model, optimizer, input position)
to checkpoints, and where.

The chief writes the run's checkpoints into <workdir>/checkpoints with a
tf.train.CheckpointManager; every worker restores from there. The other
workers of a multi-worker run write nothing, unless saving needs them:
reading a sync-on-read variable (one whose value is summed or averaged over
the replicas) is an all-reduce that every worker must join, so with such a
variable in the checkpoint they save too, into a scratch folder that is
emptied right after each save. That folder has a fixed name per workdir and
task, so the next start removes what a crash left behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from typing import Dict, Iterable, Optional

import tensorflow as tf
from absl import logging

from keras_vit.errors import UsageError
from keras_vit.storage import checkpoint_list, run_lock
from keras_vit.storage import workdir as wd
from keras_vit.training import distribute, reporting


def scratch_dir(workdir: str, task: str) -> str:
    """The local scratch folder of a non-chief worker (`task`, e.g.
    "worker1") of the run in `workdir`."""
    digest = hashlib.sha1(workdir.encode()).hexdigest()[:12]
    return os.path.join(
        tempfile.gettempdir(), f"keras_vit_worker_ckpt_{digest}_{task}"
    )


def saving_needs_every_worker(variables: Iterable) -> bool:
    """Whether a checkpoint of `variables` holds a sync-on-read variable,
    whose value every worker must help to read."""
    for variable in variables:
        sync = str(getattr(variable, "synchronization", "")).lower()
        if sync.endswith("on_read"):
            return True
    return False


class CheckpointWriter:
    """Saves a run's checkpoints as this worker's role asks.

    Args:
        checkpoint: tf.train.Checkpoint. What is saved.
        ckpt_dir: str. The run's checkpoint folder (<workdir>/checkpoints).
        scratch: str. This worker's scratch folder (`scratch_dir`); removed
            now if a crash left it behind, and by `close`.
        chief: bool. This worker writes the run's checkpoints.
        save_here: bool. A non-chief worker must save too
            (`saving_needs_every_worker`).
        keep: int. Checkpoints kept in `ckpt_dir`.
        step_counter: tf.Variable. The optimizer's step counter.
    """

    def __init__(self, checkpoint, ckpt_dir: str, scratch: str, *,
                 chief: bool, save_here: bool, keep: int, step_counter):
        self.ckpt_dir = ckpt_dir
        self.scratch = scratch
        self.chief = chief
        self.save_here = chief or save_here
        self._remove_scratch(left_by="an earlier run")
        directory = ckpt_dir if chief else scratch
        if chief:  # a state file a copy left out: listed again
            checkpoint_list.relist(ckpt_dir)
            checkpoint_list.remove_partial(ckpt_dir)
        self.manager = tf.train.CheckpointManager(
            checkpoint, directory, max_to_keep=keep if chief else 1,
            step_counter=step_counter,
        )
        # What TensorFlow's PreemptionCheckpointHandler restores from when
        # it starts: nothing, on every worker alike (the run is restored
        # already, and its count of calls must start equal everywhere).
        self.handler_manager = tf.train.CheckpointManager(
            checkpoint, scratch, max_to_keep=1, step_counter=step_counter
        )

    def leave_out(self, name: str) -> None:
        """The checkpoints hold no `name` from now on."""
        delattr(self.manager.checkpoint, name)

    def save(self, step: int) -> Optional[str]:
        """Saves the checkpoint of `step` where this worker saves; the path
        in the run's folder (None on other workers). Weights that are not
        finite are refused on every worker alike, before any is written
        (`reporting.check_weights`)."""
        model = getattr(self.manager.checkpoint, "model", None)
        if model is not None:
            reporting.check_weights(model, step, self.latest)
        if not self.save_here:
            return None
        try:
            path = self.manager.save(checkpoint_number=step)
        finally:
            # The ckpt-N_temp folder of this step goes either way: a save
            # cut short mid-way (a full disk, a kill) would hold the space
            # until a later start's clean-up, and a killed earlier save's
            # (a file TensorFlow's merge does not know keeps it) outlives
            # the merge of this one.
            checkpoint_list.remove_save(self.manager.directory, step)
        if not self.chief:
            self._remove_scratch()
            return None
        return path

    def latest(self) -> Optional[str]:
        """The run's newest complete checkpoint (on every worker)."""
        return checkpoint_list.latest(self.ckpt_dir)

    def close(self) -> None:
        """Removes this worker's scratch folder."""
        self._remove_scratch()

    def _remove_scratch(self, left_by: str = "") -> None:
        if self.chief or not tf.io.gfile.exists(self.scratch):
            return
        if left_by:
            logging.info("Removing %s, left by %s.", self.scratch, left_by)
        tf.io.gfile.rmtree(self.scratch)


def run_writer(workdir: str, strategy, items: Dict, chief: bool,
               keep: int, folder: str = "") -> CheckpointWriter:
    """The writer of the run's checkpoints of `items` (the model, its
    optimizer and maybe the training iterator), keeping `keep`, in
    <workdir>/[<folder>/]checkpoints."""
    model, optimizer = items["model"], items["optimizer"]
    task = task_name(strategy) + (f"_{folder}" if folder else "")
    return CheckpointWriter(
        tf.train.Checkpoint(**items),
        os.path.join(workdir, folder, wd.CHECKPOINTS),
        scratch_dir(workdir, task), chief=chief,
        save_here=saving_needs_every_worker(
            list(model.variables) + list(optimizer.variables)
        ),
        keep=keep, step_counter=optimizer.iterations,
    )


def task_name(strategy) -> str:
    """This worker's task ("worker1", "chief0"; "single" on one host)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None)
    if task_type is None:
        return "single"
    return f"{task_type}{resolver.task_id}"


@contextlib.contextmanager
def held_run(folder: str, strategy, what: str = "training run",
             elsewhere: str = "give this run another folder"):
    """The lock of `folder` (`run_lock.held`: a run's workdir, or the
    output folder of a `what` run), taken by the chief; refused on every
    worker of a cluster alike, not on the chief alone."""
    with contextlib.ExitStack() as stack:
        refused = None
        if distribute.is_chief(strategy):
            try:
                stack.enter_context(run_lock.held(folder, what, elsewhere))
            except UsageError as error:
                refused = error
        if distribute.any_worker(strategy, refused is not None):
            raise refused or UsageError(
                f"The chief cannot hold {folder} for the {what}: another "
                "process holds it (the chief's log says more).")
        yield

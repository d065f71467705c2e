"""The host loop of a training run.

It calls `Trainer.train` for `steps_per_loop` steps at a time and, between
calls, logs, writes TensorBoard summaries, evaluates, checkpoints and reacts
to SIGTERM (what a preempted TPU VM receives) by saving at the next step
boundary and stopping. In a multi-worker run, a worker that dies stops the
others with one line naming it (`WorkerLost`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any, Callable, Dict, Optional, Tuple

import tensorflow as tf
from absl import logging

from keras_vit import progress
from keras_vit.storage import workdir as wd
from keras_vit.training import cluster, distribute
from keras_vit.training.resume import TrainingError

# Records SIGTERM so the loop can checkpoint and stop cleanly (a name of
# its own here so that tests can stand in for a signal).
_Preemption = distribute.SigtermFlag


def _boundary(step: int, every: int) -> bool:
    return bool(every) and step % every == 0


def _next_stop(step: int, total: int, steps_per_loop: int, *everys) -> int:
    stop = min(total, step + steps_per_loop)
    for every in everys:
        if every:
            stop = min(stop, (step // every + 1) * every)
    return stop


class WorkerLost(TrainingError):
    """A worker of a multi-worker run is gone (killed, crashed, preempted
    without notice); the message names it and the checkpoint to resume
    from."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the host loop takes of a run's config: its `trainer` steps,
    its `log` and `checkpoints` periods and its accuracy evaluators (name,
    entry of `evals`)."""

    total_steps: int
    steps_per_loop: int
    log_every: int
    checkpoint_every: int
    evaluators: Tuple[Tuple[str, Any], ...]

    @classmethod
    def of(cls, trainer_config, log, checkpoints, evals) -> "Plan":
        """The plan of a run's `trainer`, `log`, `checkpoints` and `evals`
        sections."""
        return cls(
            int(trainer_config.total_steps),
            int(trainer_config.steps_per_loop),
            int(log.every_steps), int(checkpoints.every_steps),
            tuple((name, entry) for name, entry in evals.items()
                  if entry.type == "accuracy"))


@dataclasses.dataclass
class Run:
    """The parts of one training run the host loop drives.

    Attributes:
        workdir: str.
        strategy: tf.distribute.Strategy.
        trainer: Trainer (or MppTrainer).
        train_iter: the distributed training iterator.
        eval_fn: (evaluator entry, split) -> distributed evaluation data.
        writer: state.CheckpointWriter. Saves this worker's part of each
            checkpoint.
        handler: PreemptionCheckpointHandler or None.
        chief: bool. This worker writes the run's files.
        info: the data source's DatasetInfo (class names).
        batch: int. Images per optimizer update.
        on_finish: (model, class names) -> dict or None, on the chief after
            the final evaluation.
        explained: () -> context manager turning input-pipeline failures
            into clear errors (`data.checks.explained_errors`).
    """

    workdir: str
    strategy: Any
    trainer: Any
    train_iter: Any
    eval_fn: Callable
    writer: Any
    handler: Any
    chief: bool
    info: Any
    batch: int
    on_finish: Optional[Callable]
    explained: Callable


def run(plan: Plan, r: Run) -> Dict[str, float]:
    """Trains to `plan.total_steps`, then evaluates every accuracy
    evaluator on its split ("test" gives the reported test_* metrics).

    Returns the final metrics, or {"preempted": True, "step": S} after a
    SIGTERM ("restart": True when every worker saved for a restart).

    Raises:
        WorkerLost: a peer of a multi-worker run is gone.
    """
    loop = _HostLoop(plan, r)
    try:
        return loop.run()
    except tf.errors.OpError as e:
        if not (distribute.is_multi_worker(r.strategy)
                and cluster.is_peer_loss(e)):
            raise
        raise WorkerLost(cluster.lost_worker_message(
            e, loop.step, r.writer.latest()
        )) from e
    finally:
        loop.close()


class _HostLoop:
    """One training run's host loop (see `run`): its state between train
    calls."""

    def __init__(self, plan: Plan, r: Run):
        self.plan, self.r = plan, r
        self.step = self.start_step = r.trainer.step
        self.train_time, self.timed_steps = 0.0, 0  # after the first call
        # The whole host loop (the train call, logging, summaries,
        # preemption checks) after the first call, without evaluations and
        # checkpoint saves.
        self.loop_time = 0.0
        self.skipped = 0
        self.t_start = time.time()
        self._reset_window()
        # TensorBoard summaries (the chief's): closed when the run ends, so
        # that a process running many trainings (VTAB) keeps no file open.
        self.writers = {}
        if r.chief:
            self.writers = {
                name: tf.summary.create_file_writer(
                    os.path.join(r.workdir, name))
                for name in ("train", "eval")
            }

    def close(self) -> None:
        for summary_writer in self.writers.values():
            summary_writer.close()

    def _reset_window(self) -> None:
        self.window = {"loss": 0.0, "accuracy": 0.0, "grad_norm": 0.0,
                       "steps": 0, "applied": 0}
        self.window_time = 0.0

    def run(self) -> Dict[str, float]:
        with _Preemption() as preemption:
            while self.step < self.plan.total_steps:
                stopped = self._one_call(preemption)
                if stopped is not None:
                    return stopped
        return self._finish()

    def _one_call(self, preemption) -> Optional[Dict[str, Any]]:
        """One train call up to the next boundary, then what falls due
        there; the preemption result when the run stops."""
        plan, r = self.plan, self.r
        stop = _next_stop(self.step, plan.total_steps, plan.steps_per_loop,
                          plan.log_every, plan.checkpoint_every,
                          *(e.every_steps for _, e in plan.evaluators))
        t0 = time.time()
        with r.explained():
            metrics = r.trainer.train(r.train_iter, stop - self.step)
        dt = time.time() - t0
        timed = self.step > self.start_step
        self._count(metrics, stop, dt, timed)
        scheduled = self._periodic_evaluations()
        saved = _boundary(self.step, plan.checkpoint_every) or (
            self.step == plan.total_steps)
        if saved:
            t1 = time.time()
            r.writer.save(self.step)
            scheduled += time.time() - t1
        stopped = self._preempted(preemption, saved)
        if stopped is None and timed:
            self.loop_time += time.time() - t0 - scheduled
        return stopped

    def _count(self, metrics, stop: int, dt: float, timed: bool) -> None:
        """Checks and accumulates one train call's metrics, and logs them
        at a log boundary (and after the first, compiling call)."""
        trainer = self.r.trainer
        bad = metrics["nonfinite_steps"]
        if not trainer.skip_nonfinite and (
            bad or not math.isfinite(metrics["loss"])
        ):
            # Raised before any save: no checkpoint holds these steps.
            last = self.r.writer.latest() or "none (no checkpoint yet)"
            first = self.step + (metrics["first_nonfinite_step"] or 1)
            raise TrainingError(
                f"Non-finite loss or gradient (loss {metrics['loss']}, "
                f"gradient norm {metrics['grad_norm']}; first at step "
                f"{first}) in steps {self.step + 1}-{stop}. Last good "
                f"checkpoint: {last}. Lower the learning rate, check the "
                "input data, or set config.trainer.skip_nonfinite=True to "
                "skip such steps."
            )
        if bad:
            self.skipped += bad
            logging.warning(
                "Skipped %d non-finite step(s) in steps %d-%d (first: "
                "step %d); weights and optimizer state unchanged.",
                bad, self.step + 1, stop,
                self.step + metrics["first_nonfinite_step"],
            )
        n = stop - self.step
        if timed:
            self.train_time += dt
            self.timed_steps += n
        self.step = stop
        applied = n - bad if trainer.skip_nonfinite else n
        if applied:
            for key in ("loss", "accuracy", "grad_norm"):
                self.window[key] += metrics[key] * applied
        self.window["steps"] += n
        self.window["applied"] += applied
        self.window_time += dt
        # The first call too: it holds the tracing and compilation, and
        # shows that training runs long before the first log_every.
        if (_boundary(self.step, self.plan.log_every)
                or self.step == self.plan.total_steps or not timed):
            _log_train(
                trainer, self.writers, self.step, self.plan.total_steps,
                self.window, self.window_time, self.r.batch,
                "" if timed else " (first call: with tracing and "
                "compilation)",
            )
            self._reset_window()

    def _periodic_evaluations(self) -> float:
        """Evaluates the evaluators whose period ends at this step (not
        the last); returns the seconds it took."""
        if self.step >= self.plan.total_steps:
            return 0.0
        t1 = time.time()
        for _, entry in self.plan.evaluators:
            if not _boundary(self.step, int(entry.every_steps)):
                continue
            split = entry.val_split or entry.split
            with self.r.explained():
                results = self.r.trainer.evaluate(self.r.eval_fn(entry,
                                                                 split))
            _log_eval(self.writers, self.step, split, results,
                      self.r.trainer.accuracy_name)
        return time.time() - t1

    def _preempted(self, preemption, saved: bool
                   ) -> Optional[Dict[str, Any]]:
        r, step = self.r, self.step
        if r.handler is not None:
            try:  # every worker saves at this step if one was told to
                r.handler.save_checkpoint_if_preempted(
                    checkpoint_number=step
                )
            except distribute.Preempted:
                logging.warning(
                    "Stopped at step %d: a worker was told to stop "
                    "(SIGTERM); every worker saved this step. Run the "
                    "same command on every worker to resume.", step,
                )
                return {"preempted": True, "step": step, "restart": True}
        if distribute.any_worker(r.strategy, preemption.requested):
            if not saved:
                r.writer.save(step)
            logging.warning(
                "Stopped at step %d after SIGTERM; checkpoint saved. "
                "Run the same command to resume.", step,
            )
            return {"preempted": True, "step": step}
        return None

    def _finish(self) -> Dict[str, float]:
        """The final evaluations, metrics.json, and `on_finish`."""
        r, trainer = self.r, self.r.trainer
        final: Dict[str, Any] = {}
        for name, entry in self.plan.evaluators:
            with r.explained():
                results = trainer.evaluate(r.eval_fn(entry, entry.split))
            _log_eval(self.writers, self.step, entry.split, results,
                      trainer.accuracy_name)
            final.update(_final_metrics(name, entry.split, results,
                                        trainer.accuracy_name))
        trained = self.step - self.start_step
        final.update({
            "steps": self.step,
            "steps_this_run": trained,
            "skipped_steps_this_run": self.skipped,
            # Throughput of the train calls alone, and of the whole host
            # loop around them; both leave out the first (compiling) call.
            "images_per_sec": (self.timed_steps * r.batch / self.train_time)
            if self.train_time and self.timed_steps else None,
            "loop_images_per_sec": (
                self.timed_steps * r.batch / self.loop_time)
            if self.loop_time and self.timed_steps else None,
            "wall_time_s": time.time() - self.t_start,
            "ema": trainer.has_ema,
            "num_parameters": trainer.model.count_params(),
        })
        if r.chief:
            wd.write_json(os.path.join(r.workdir, wd.METRICS), final)
        logging.info("Final %s metrics: %s", final.get("eval_split"),
                     progress.short_metrics(final))
        if r.chief and r.on_finish is not None:
            # The model as it is evaluated: with the EMA weights if kept.
            if trainer.has_ema:
                trainer.swap_ema_weights()
            try:
                final.update(r.on_finish(trainer.model,
                                         r.info.class_names) or {})
            finally:
                if trainer.has_ema:
                    trainer.swap_ema_weights()
        return final


def _final_metrics(name: str, split: str, results, accuracy_name: str
                   ) -> Dict[str, Any]:
    """metrics.json's fields of one accuracy evaluator: the one named
    "test" gives test_accuracy, test_loss, ... and eval_split ("test_mpp_
    accuracy" for masked patch prediction), another NAME_accuracy, ... and
    NAME_split."""
    out = {
        f"{name}_{accuracy_name}": results["accuracy"],
        f"{name}_top5_{accuracy_name}": results["top5_accuracy"],
        f"{name}_loss": results["loss"],
        f"{name}_examples": results["num_examples"],
    }
    out["eval_split" if name == "test" else f"{name}_split"] = split
    return out


def _log_train(trainer, writers, step, total, window, seconds, batch,
               note=""):
    steps = max(window["steps"], 1)
    applied = window.get("applied", steps)  # skipped steps excluded
    loss = window["loss"] / applied if applied else float("nan")
    accuracy = window["accuracy"] / applied if applied else float("nan")
    grad_norm = window["grad_norm"] / applied if applied else float("nan")
    images_per_sec = steps * batch / seconds if seconds else 0.0
    lr = trainer.learning_rate()
    name = trainer.accuracy_name
    logging.info(
        "step %d/%d: loss %.4f %s %.4f lr %.3g grad_norm %.3g "
        "images/s %.1f%s", step, total, loss, name, accuracy, lr, grad_norm,
        images_per_sec, note,
    )
    if "train" in writers:
        with writers["train"].as_default(step=step):
            tf.summary.scalar("loss", loss)
            tf.summary.scalar(name, accuracy)
            tf.summary.scalar("learning_rate", lr)
            tf.summary.scalar("grad_norm", grad_norm)
            tf.summary.scalar("images_per_sec", images_per_sec)
            tf.summary.scalar("step_time_s", seconds / steps)
        writers["train"].flush()


def _log_eval(writers, step, split, results, name="accuracy"):
    logging.info(
        "eval %s at step %d: %s %.4f top5 %.4f loss %.4f (%d examples)",
        split, step, name, results["accuracy"], results["top5_accuracy"],
        results["loss"], results["num_examples"],
    )
    if "eval" in writers:
        with writers["eval"].as_default(step=step):
            for key in ("accuracy", "top5_accuracy", "loss"):
                tf.summary.scalar(key.replace("accuracy", name),
                                  results[key])
        writers["eval"].flush()

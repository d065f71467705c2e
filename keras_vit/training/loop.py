"""The host loop of a training run.

It trains up to the next boundary (at most `steps_per_loop` steps, in
train calls of a few seconds each: `pacing`) and, at boundaries, logs,
writes TensorBoard summaries, evaluates and checkpoints. SIGTERM (what a
preempted TPU VM receives) and Ctrl-C end the train call in flight after
its step; the loop then saves and stops (`interrupt`). In a multi-worker
run, a worker that dies stops the others with one line naming it
(`WorkerLost`).
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Dict, Optional

import tensorflow as tf
from absl import logging

from keras_vit import progress
from keras_vit.storage import workdir as wd
from keras_vit.training import (
    cluster,
    distribute,
    interrupt,
    pacing,
    records,
    reporting,
)
from keras_vit.training.pacing import Plan
from keras_vit.training.resume import TrainingError
from keras_vit.training.run_parts import Run

_Preemption = interrupt.StopRequest  # (tests stand in for a signal)


class WorkerLost(TrainingError):
    """A worker of a multi-worker run is gone (killed, crashed, preempted
    without notice); the message names it and the checkpoint to resume
    from."""


def run(plan: Plan, r: Run) -> Dict[str, float]:
    """Trains to `plan.total_steps`, then evaluates every accuracy
    evaluator on its split ("test" gives the reported test_* metrics).
    Returns the final metrics, or {"preempted": True, "step": S, ...}
    after a SIGTERM ("restart": True when every worker saved to restart).

    Raises:
        WorkerLost: a peer of a multi-worker run is gone (a TrainingError,
            as are a non-finite loss and non-finite weights: `reporting`).
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
    """One training run's host loop (see `run`): its state between calls."""

    def __init__(self, plan: Plan, r: Run):
        self.plan, self.r = plan, r
        self.step = self.start_step = self.saved_step = r.trainer.step
        self.train_time, self.timed_steps = 0.0, 0  # after the first call
        # The host loop after the first call, but evaluations and saves.
        self.loop_time = 0.0
        self.skipped = 0
        self.t_start = time.time()
        self.pacer = pacing.Pacer(r.trainer)
        self.compiled = False
        self.alone = not distribute.is_multi_worker(r.strategy)
        self.rate = progress.Rate(plan.total_steps, "step",
                                  plan.progress_every_s, images=r.batch)
        self._reset_window()
        # TensorBoard summaries (the chief's): closed when the run ends, so
        # that a process running many trainings (VTAB) keeps no file open.
        self.writers = {}
        if r.chief:
            self.writers = {
                name: tf.summary.create_file_writer(
                    os.path.join(r.workdir, name))
                for name in wd.SUMMARIES
            }

    def close(self) -> None:
        for summary_writer in self.writers.values():
            summary_writer.close()
        if self.r.records is not None:
            self.r.records.close()

    def _reset_window(self) -> None:
        self.window = {"loss": 0.0, "accuracy": 0.0, "grad_norm": 0.0,
                       "steps": 0, "applied": 0}
        self.window_time = 0.0

    def run(self) -> Dict[str, float]:
        with _Preemption() as preemption:
            # The request reaches the step in flight (`interrupt`).
            preemption.on_signal = self.r.trainer.request_stop
            if self.step < self.plan.total_steps:
                redo = self._unrecorded()  # (one host only)
                if redo:
                    self._periodic_evaluations(redo, preemption)
                    if (stopped := self._preempted(preemption)) is not None:
                        return stopped
                logging.info("Tracing and compiling the training step "
                             "(the first train call).")
                preemption.says = ("stopping at the next step, which saves "
                                   "a checkpoint if a step has trained")
            while self.step < self.plan.total_steps:
                stopped = self._one_call(preemption)
                if stopped is not None:
                    return stopped
            preemption.says = (  # (the step's checkpoint is saved)
                "leaving the final evaluation, then stopping" if self.alone
                else "the workers finish the final evaluation and the run")
            try:
                final = self._evaluations(self.plan.evaluators, preemption,
                                          final=True)
            except interrupt.EvaluationStopped:
                final = None
            if self.alone and preemption.requested:  # (or after its end)
                return self._stopped(preemption, True, final=True)
        return self._finish(final)

    def _one_call(self, preemption) -> Optional[Dict[str, Any]]:
        """One train call up to the next boundary, then what falls due
        there; the preemption result when the run stops."""
        plan, r = self.plan, self.r
        stop = pacing.next_stop(
            self.step, plan.total_steps, plan.steps_per_loop, plan.log_every,
            plan.checkpoint_every, *(e.every_steps for _, e in plan.evaluators))
        t0 = time.time()
        with r.explained(training=True):
            metrics = self.pacer.train(r.train_iter, stop - self.step,
                                       self._after_call)
        preemption.says = interrupt.SAVE_AND_STOP  # (a step has compiled)
        dt = time.time() - t0
        timed = self.step > self.start_step
        self._count(metrics, self.step + metrics["steps"], dt, timed)
        due = self._due()  # told to stop: the checkpoint, not these (TF's
        # handler saves at the call after the one that learns of it)
        for _ in range((1 + (r.handler is not None)) if due else 0):
            if (stopped := self._preempted(preemption)) is not None:
                return stopped
        scheduled = self._periodic_evaluations(due, preemption)
        if pacing.boundary(self.step, plan.checkpoint_every) or (
                self.step == plan.total_steps):
            t1 = time.time()
            self._save()
            scheduled += time.time() - t1
        stopped = self._preempted(preemption)
        if stopped is None and timed:
            self.loop_time += time.time() - t0 - scheduled
        return stopped

    def _after_call(self, done: int, metrics, seconds: float) -> None:
        """After each train call: `done` steps of the current request,
        the call's metrics and its seconds."""
        del metrics
        if not self.compiled:
            self.compiled = True
            logging.info("Compiled: the first train call took %.1f s; %s.",
                         seconds, "stopping" if
                         self.r.trainer.stop_requested() else "training")
        line = self.rate.update(self.step + done)
        if line:
            logging.info("train: %s", line)

    def _count(self, metrics, stop: int, dt: float, timed: bool) -> None:
        """Checks and accumulates one train call's metrics, and logs them
        at a log boundary (and after the first, compiling call)."""
        trainer = self.r.trainer
        if stop == self.step:
            return  # stopped before a step
        bad = metrics["nonfinite_steps"]
        if not trainer.skip_nonfinite and (
            bad or not math.isfinite(metrics["loss"])
        ):
            # Raised before any save: no checkpoint holds these steps.
            raise reporting.nonfinite_error(metrics, self.step, stop,
                                            self.r.writer.latest())
        if bad:  # weights made non-finite would be skipped for good
            reporting.check_weights(trainer.model, stop,
                                    self.r.writer.latest)
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
        if (pacing.boundary(self.step, self.plan.log_every)
                or self.step == self.plan.total_steps or not timed):
            self._log_window("" if timed else " (first call: with tracing "
                             "and compilation)")

    def _log_window(self, note: str = "") -> None:
        """Logs the steps since the last logged row (a row of history.csv,
        TensorBoard), and starts a new window."""
        logged = reporting.log_train(
            self.r.trainer, self.writers, self.step, self.plan.total_steps,
            self.window, self.window_time, self.r.batch, note)
        if self.r.records is not None:
            self.r.records.train_row(self.step, logged)
        self._reset_window()

    def _log_stop(self) -> None:
        """At a stop: logs the steps its checkpoint holds since the last row."""
        if self.window["steps"]:
            self._log_window(" (stopping)")

    def _due(self) -> list:
        """The evaluators whose period ends at this step (not the last)."""
        if self.step >= self.plan.total_steps:
            return []
        return [(name, entry) for name, entry in self.plan.evaluators
                if pacing.boundary(self.step, int(entry.every_steps))]

    def _unrecorded(self) -> list:
        """At a resumed run's start, on one host: the evaluations due at
        its step that history.csv lacks (a stop left them unfinished)."""
        r = self.r
        if not self.step or r.records is None or not self.alone:
            return []
        due = [(name, entry) for name, entry in self._due()
               if not r.records.evaluated(self.step,
                                          records.compared_split(entry))]
        if due:
            logging.info("Evaluating at step %d first: history.csv has no "
                         "evaluation of it (a stop left it unfinished).",
                         self.step)
        return due

    def _periodic_evaluations(self, due: list, preemption) -> float:
        """Evaluates the evaluators `due`; returns the seconds it took. On
        one worker, a stop request leaves an evaluation unfinished (the
        workers of a multi-worker run evaluate together: they finish)."""
        t1 = time.time()
        try:
            self._evaluations(due, preemption)
        except interrupt.EvaluationStopped:
            logging.warning("The evaluation at step %d was left unfinished "
                            "at the stop (not recorded).", self.step)
        return time.time() - t1

    def _evaluations(self, due: list, preemption, final: bool = False
                     ) -> Dict[str, Any]:
        """Evaluates the evaluators `due` (each on its validation split,
        or on its own when `final`), logged and recorded; their final
        metrics. On one worker, a stop request leaves an evaluation
        unfinished (EvaluationStopped); the workers of a multi-worker run
        evaluate together: they finish."""
        r, accuracy = self.r, self.r.trainer.accuracy_name
        metrics, stop = {}, preemption if self.alone else None
        for name, entry in due:
            compared = records.compared_split(entry)
            split = entry.split if final else compared
            if final and split != compared and records.validates_at_end(
                    r.records, name, due, self.step, self.alone):
                # The last step's validation too (once): a best candidate.
                self._evaluate(name, entry, compared, True, stop=stop)
            results = self._evaluate(name, entry, split, split == compared,
                                     stop=stop)
            metrics.update(reporting.final_metrics(name, split, results,
                                                   accuracy))
        return metrics

    def _evaluate(self, name: str, entry, split: str, compared: bool,
                  stop=None) -> Dict[str, Any]:
        """One evaluation of accuracy evaluator `name` on `split`, its
        progress told every `plan.progress_every_s` seconds; logged and
        recorded (and `compared` for the best checkpoint); left at a `stop`
        request."""
        r = self.r
        on_batch = r.eval_progress(entry, split, self.plan.progress_every_s
                                   ) if r.eval_progress else None
        if stop is not None:
            on_batch = interrupt.stopping(on_batch, stop)
        # Out of memory, it saves this step first (one worker alone).
        with reporting.evaluation_memory(
                name, entry, split, self.step,
                self.step >= self.plan.total_steps,
                self._save_logged if self.alone else None), r.explained():
            results = r.trainer.evaluate(r.eval_fn(entry, split),
                                         on_batch=on_batch)
        reporting.log_eval(self.writers, self.step, split, results,
                           r.trainer.accuracy_name)
        if r.records is not None:
            r.records.evaluation(name, self.step, split, results, compared)
        return results

    def _save(self) -> None:
        """Saves this step once (a stop before the first saves none)."""
        if self.step != self.saved_step:  # (its weights checked first)
            self.r.writer.save(self.step)
            self.saved_step = self.step

    def _save_logged(self) -> None:
        """Saves this step and logs the steps its checkpoint holds."""
        self._log_stop()
        self._save()

    def _preempted(self, preemption) -> Optional[Dict[str, Any]]:
        r, step = self.r, self.step
        if r.handler is not None:
            try:  # every worker saves at this step if one was told to
                r.handler.save_checkpoint_if_preempted(checkpoint_number=step)
            except distribute.Preempted:
                self._log_stop()
                logging.warning(
                    "Stopped at step %d: a worker was told to stop "
                    "(SIGTERM); every worker saved this step. Run the "
                    "same command on every worker to resume.", step,
                )
                return {"preempted": True, "step": step, "restart": True}
        if distribute.any_worker(r.strategy, preemption.requested):
            self._save()
            return self._stopped(preemption, saved=step != self.start_step)
        return None

    def _stopped(self, preemption, saved: bool, final: bool = False
                 ) -> Dict:
        """Logs a stop at this step (`final`: in the final evaluation);
        its result."""
        self._log_stop()
        name = getattr(preemption, "name", "") or "SIGTERM"
        logging.warning(
            "Stopped at step %d after %s%s; %s. Run the same command to %s.",
            self.step, name if getattr(preemption, "requested", True)
            else "another worker's stop", " in its final evaluation" * final,
            "checkpoint saved" if saved else "nothing trained, nothing saved",
            "evaluate again and finish" if final else "resume" if self.step
            else "start")
        return {"preempted": True, "step": self.step, "signal": name,
                "saved": saved, **({"final": True} if final else {})}

    def _finish(self, final: Dict[str, Any]) -> Dict[str, float]:
        """The final metrics (`final`, the evaluations'; each loss finite),
        `on_finish`, and metrics.json."""
        reporting.check_final_losses(final, self.step, self.skipped)
        r, trainer = self.r, self.r.trainer
        trained = self.step - self.start_step
        final.update({
            "steps": self.step,
            "steps_this_run": trained,
            "skipped_steps_this_run": self.skipped,
            # The train calls', the host loop's; not the first call's.
            "images_per_sec": (self.timed_steps * r.batch / self.train_time)
            if self.train_time and self.timed_steps else None,
            "loop_images_per_sec": (
                self.timed_steps * r.batch / self.loop_time)
            if self.loop_time and self.timed_steps else None,
            "wall_time_s": time.time() - self.t_start,
            "ema": trainer.has_ema,
            "num_parameters": trainer.model.count_params(),
        })
        if r.skipped_images():
            final["skipped_images"] = r.skipped_images()
        if self.skipped:  # each said as it came; their count, once more
            logging.warning(
                "%d of this run's %d steps were skipped for a non-finite "
                "loss or gradient (config.trainer.skip_nonfinite): if many, "
                "lower the learning rate or check the input data.",
                self.skipped, trained)
        logging.info("Final %s metrics: %s", final.get("eval_split"),
                     progress.short_metrics(final))
        if r.chief and r.on_finish is not None:
            with trainer.evaluated_weights() as model:
                names = r.info.class_names
                final.update(r.on_finish(model, names, self.step) or {})
        if r.chief:  # last: it marks the run finished (after its export)
            wd.write_json(os.path.join(r.workdir, wd.METRICS),
                          {**final, "versions": reporting.versions()})
        return final

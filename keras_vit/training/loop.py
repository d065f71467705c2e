"""The host loop of a training run.

It calls `Trainer.train` for `steps_per_loop` steps at a time and, between
calls, logs, writes TensorBoard summaries, evaluates, checkpoints and reacts
to SIGTERM (what a preempted TPU VM receives) by saving at the next step
boundary and stopping. In a multi-worker run, a worker that dies stops the
others with one line naming it (`WorkerLost`).
"""

from __future__ import annotations

import math
import os
import time
from typing import Dict

import tensorflow as tf
from absl import logging

from keras_vit.data import checks as data_checks
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


def run(
    config, workdir, strategy, trainer, train_iter, eval_fn, writer,
    handler, chief, info, batch, on_finish,
) -> Dict[str, float]:
    """Trains to config.total_steps, then evaluates on config.eval_split.

    Args:
        writer: state.CheckpointWriter. Saves this worker's part of
            each checkpoint.
        handler: PreemptionCheckpointHandler or None.

    Returns the final metrics, or {"preempted": True, "step": S} after a
    SIGTERM ("restart": True when every worker saved for a restart).

    Raises:
        WorkerLost: a peer of a multi-worker run is gone.
    """
    progress = {"step": trainer.step}
    # TensorBoard summaries (the chief's): closed when the run ends, so
    # that a process running many trainings (VTAB) keeps no file open.
    writers = {}
    if chief:
        writers = {
            name: tf.summary.create_file_writer(os.path.join(workdir, name))
            for name in ("train", "eval")
        }
    try:
        return _run(
            config, workdir, strategy, trainer, train_iter, eval_fn, writer,
            handler, chief, info, batch, on_finish, progress, writers,
        )
    except tf.errors.OpError as e:
        if not (distribute.is_multi_worker(strategy)
                and cluster.is_peer_loss(e)):
            raise
        raise WorkerLost(cluster.lost_worker_message(
            e, progress["step"], writer.latest()
        )) from e
    finally:
        for summary_writer in writers.values():
            summary_writer.close()


def _run(
    config, workdir, strategy, trainer, train_iter, eval_fn, writer,
    handler, chief, info, batch, on_finish, progress, writers,
) -> Dict[str, float]:
    model = trainer.model
    total = int(config.total_steps)
    steps_per_loop = int(config.steps_per_loop)
    log_every = int(config.log_every_steps)
    eval_every = int(config.eval_every_steps)
    ckpt_every = int(config.checkpoint_every_steps)
    val_split = config.val_split or config.eval_split

    step = trainer.step
    start_step = step
    train_time, timed_steps = 0.0, 0  # excludes the first (compiling) call
    # The whole host loop (the train call, logging, summaries, preemption
    # checks) after the first call, without evaluations and checkpoint saves.
    loop_time = 0.0
    t_start = time.time()
    window = {"loss": 0.0, "accuracy": 0.0, "grad_norm": 0.0, "steps": 0,
              "applied": 0}
    window_time = 0.0
    skipped = 0
    with _Preemption() as preemption:
        while step < total:
            stop = _next_stop(
                step, total, steps_per_loop, log_every, eval_every, ckpt_every
            )
            t0 = time.time()
            scheduled = 0.0  # evaluation and checkpoint time, not the loop's
            with data_checks.explained_errors(config):
                metrics = trainer.train(train_iter, stop - step)
            dt = time.time() - t0
            timed = step > start_step
            bad = metrics["nonfinite_steps"]
            if not trainer.skip_nonfinite and (
                bad or not math.isfinite(metrics["loss"])
            ):
                # Raised before any save: no checkpoint holds these steps.
                last = writer.latest() or "none (no checkpoint yet)"
                first = step + (metrics["first_nonfinite_step"] or 1)
                raise TrainingError(
                    f"Non-finite loss or gradient (loss {metrics['loss']}, "
                    f"gradient norm {metrics['grad_norm']}; first at step "
                    f"{first}) in steps {step + 1}-{stop}. Last good "
                    f"checkpoint: {last}. Lower the learning rate, check the "
                    "input data, or set config.skip_nonfinite=True to skip "
                    "such steps."
                )
            if bad:
                skipped += bad
                logging.warning(
                    "Skipped %d non-finite step(s) in steps %d-%d (first: "
                    "step %d); weights and optimizer state unchanged.",
                    bad, step + 1, stop,
                    step + metrics["first_nonfinite_step"],
                )
            n = stop - step
            if timed:
                train_time += dt
                timed_steps += n
            step = stop
            progress["step"] = step
            applied = n - bad if trainer.skip_nonfinite else n
            if applied:
                for key in ("loss", "accuracy", "grad_norm"):
                    window[key] += metrics[key] * applied
            window["steps"] += n
            window["applied"] += applied
            window_time += dt
            # The first call too: it holds the tracing and compilation, and
            # shows that training runs long before the first log_every.
            if _boundary(step, log_every) or step == total or not timed:
                _log_train(
                    trainer, writers, step, total, window, window_time,
                    batch, "" if timed else " (first call: with tracing and "
                    "compilation)",
                )
                window = {k: 0.0 for k in window}
                window_time = 0.0
            if _boundary(step, eval_every) and step < total:
                t1 = time.time()
                with data_checks.explained_errors(config):
                    results = trainer.evaluate(eval_fn(val_split))
                _log_eval(writers, step, val_split, results,
                          trainer.accuracy_name)
                scheduled += time.time() - t1
            saved = _boundary(step, ckpt_every) or step == total
            if saved:
                t1 = time.time()
                writer.save(step)
                scheduled += time.time() - t1
            if handler is not None:
                try:  # every worker saves at this step if one was told to
                    handler.save_checkpoint_if_preempted(
                        checkpoint_number=step
                    )
                except distribute.Preempted:
                    logging.warning(
                        "Stopped at step %d: a worker was told to stop "
                        "(SIGTERM); every worker saved this step. Run the "
                        "same command on every worker to resume.", step,
                    )
                    return {"preempted": True, "step": step, "restart": True}
            if distribute.any_worker(strategy, preemption.requested):
                if not saved:
                    writer.save(step)
                logging.warning(
                    "Stopped at step %d after SIGTERM; checkpoint saved. "
                    "Run the same command to resume.", step,
                )
                return {"preempted": True, "step": step}
            if timed:
                loop_time += time.time() - t0 - scheduled

    eval_split = config.eval_split
    with data_checks.explained_errors(config):
        results = trainer.evaluate(eval_fn(eval_split))
    _log_eval(writers, step, eval_split, results, trainer.accuracy_name)
    trained = step - start_step
    final = {
        "eval_split": eval_split,
        # "test_mpp_accuracy" for masked patch prediction.
        f"test_{trainer.accuracy_name}": results["accuracy"],
        f"test_top5_{trainer.accuracy_name}": results["top5_accuracy"],
        "test_loss": results["loss"],
        "test_examples": results["num_examples"],
        "steps": step,
        "steps_this_run": trained,
        "skipped_steps_this_run": skipped,
        # Throughput of the train calls alone, and of the whole host loop
        # around them; both leave out the first (compiling) call.
        "images_per_sec": (timed_steps * batch / train_time)
        if train_time and timed_steps
        else None,
        "loop_images_per_sec": (timed_steps * batch / loop_time)
        if loop_time and timed_steps
        else None,
        "wall_time_s": time.time() - t_start,
        "ema": trainer.has_ema,
        "num_parameters": model.count_params(),
    }
    if chief:
        wd.write_json(os.path.join(workdir, wd.METRICS), final)
    logging.info("Final %s metrics: %s", eval_split, final)
    if chief and on_finish is not None:
        # The model as it is evaluated: with the EMA weights if kept.
        if trainer.has_ema:
            trainer.swap_ema_weights()
        try:
            final.update(on_finish(model, info.class_names) or {})
        finally:
            if trainer.has_ema:
                trainer.swap_ema_weights()
    return final


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

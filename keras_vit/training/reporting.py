"""What the host loop tells: its log lines, TensorBoard summaries and the
fields of metrics.json."""

from __future__ import annotations

import contextlib
import math
import numbers
from typing import Any, Callable, Dict, Optional

import keras
import tensorflow as tf
from absl import logging

from keras_vit.errors import failed_allocation, is_disk_full
from keras_vit.training.resume import TrainingError
from keras_vit.version import __version__


def final_metrics(name: str, split: str, results, accuracy_name: str
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


def versions() -> Dict[str, str]:
    """metrics.json's `versions`: what computed the run's numbers."""
    return {"keras_vit": __version__, "keras": keras.__version__,
            "tensorflow": tf.__version__}


def log_train(trainer, writers, step, total, window, seconds, batch,
               note=""):
    steps = max(window["steps"], 1)
    applied = window.get("applied", steps)  # skipped steps excluded
    loss = window["loss"] / applied if applied else float("nan")
    accuracy = window["accuracy"] / applied if applied else float("nan")
    grad_norm = window["grad_norm"] / applied if applied else float("nan")
    images_per_sec = steps * batch / seconds if seconds else 0.0
    lr = trainer.learning_rate(applied=True)  # the logged steps' last
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
    return {"loss": loss, "accuracy": accuracy, "learning_rate": lr,
            "grad_norm": grad_norm, "images_per_sec": images_per_sec,
            "steps": window["steps"]}


def nonfinite_error(metrics, step, stop, last) -> TrainingError:
    """The error of a train call from `step` to `stop` that met a
    non-finite loss or gradient; `last`, the last checkpoint (or None)."""
    first = step + (metrics["first_nonfinite_step"] or 1)
    return TrainingError(
        f"Non-finite loss or gradient (loss {metrics['loss']}, gradient "
        f"norm {metrics['grad_norm']}; first at step {first}) in steps "
        f"{step + 1}-{stop}. Last good checkpoint: "
        f"{last or 'none (no checkpoint yet)'}. Lower the learning rate, "
        "check the input data, or set config.trainer.skip_nonfinite=True "
        "to skip such steps."
    )


@contextlib.contextmanager
def evaluation_memory(name: str, entry, split: str, step: int, final: bool,
                      save: Optional[Callable[[], None]]):
    """A context in which evaluator `name` (`entry`, of config.evals)
    evaluates `split` at `step` (`final`: the final evaluation): out of
    memory, it calls `save` (where given: the steps since the last
    checkpoint are not lost) and raises `evaluation_oom_error`."""
    try:
        yield
    except tf.errors.ResourceExhaustedError as error:
        if is_disk_full(error):
            raise  # (commands.exhausted names the disk)
        saved = save is not None
        try:
            if saved:
                save()
        except Exception as failed:  # noqa: BLE001 (the OOM is the news)
            logging.warning("Could not save step %d: %s", step, failed)
            saved = False
        raise evaluation_oom_error(name, entry, split, step, error, saved,
                                   final) from error


def evaluation_oom_error(name: str, entry, split: str, step: int,
                         error: BaseException, saved: bool,
                         final: bool) -> TrainingError:
    """The error of evaluator `name` (`entry`, of config.evals) out of
    memory on `split` at `step`: the allocation, the field to lower, and
    what resumes; `saved`: whether the checkpoint of `step` is saved (else
    the last one is kept), `final`: in the final evaluation."""
    batch = (f"{entry.batch_size} now" if entry.batch_size else
             "unset: the training micro-batch now")
    then = ("the last checkpoint is kept; the same command with it "
            "resumes there" if not saved else
            f"the checkpoint of step {step} is saved; the same command with "
            "it " + ("evaluates it again and finishes" if final else
                     f"evaluates step {step} first and trains on"))
    what = failed_allocation(error)
    ran_out = ("Out of memory" if what.startswith("OOM ")
               else "Resources exhausted")
    return TrainingError(
        f"{ran_out} in the {name!r} evaluation on {split} at step "
        f"{step} ({what}): lower "
        f"config.evals.{name}.batch_size ({batch}); {then}.")


def check_weights(model, step: int,
                  latest: Callable[[], Optional[str]]) -> None:
    """Raises where a trainable weight of `model` holds a NaN or an
    infinity after `step` (an update too large for float32 may make them
    so from a finite loss and gradient): no checkpoint is written of it,
    and a run that skips non-finite steps would skip every later one.
    One read back to the host; `latest()` (the last checkpoint, for the
    message) only on failure."""
    variables = model.trainable_variables
    finite = [tf.reduce_all(tf.math.is_finite(v)) for v in variables]
    if not finite or bool(tf.reduce_all(tf.stack(finite))):
        return
    first = next(v.path for v, ok in zip(variables, finite) if not bool(ok))
    last = latest()
    raise TrainingError(
        f"The weights became non-finite by step {step} (first: {first}), "
        "though the loss and gradient were: an update too large (the "
        "learning rate?). Last good checkpoint: "
        f"{last or 'none (no checkpoint yet)'}. Lower the learning rate, "
        "or clip the gradients (config.trainer.grad_clip_norm).")


def check_final_losses(final: Dict[str, Any], step: int,
                       skipped: int) -> None:
    """Raises where a final evaluation's loss (`final`'s NAME_loss) is
    not finite: the model's outputs overflow (weights grown too large by
    a step that `skip_nonfinite` let through, whose later steps it then
    skipped: `skipped`), so its scores mean nothing; the run is not marked
    finished, and nothing is exported."""
    bad = [f"{key} {value}" for key, value in sorted(final.items())
           if key.endswith("_loss") and isinstance(value, numbers.Real)
           and not math.isfinite(value)]
    if bad:
        note = (f"; {skipped} step(s) of this run were skipped as "
                "non-finite" if skipped else "")
        raise TrainingError(
            f"The final evaluation's loss is not finite ({', '.join(bad)} "
            f"at step {step}{note}): the model's outputs overflow, and its "
            "scores mean nothing, so the run is not marked finished. Lower the "
            "learning rate (config.schedule.lr) or clip the gradients "
            "(config.trainer.grad_clip_norm), and train again in a new "
            "workdir.")


def log_eval(writers, step, split, results, name="accuracy"):
    """One evaluation's log line and summaries; a top-5 accuracy of None
    (masked patch prediction of pixels: nothing to rank) is left out."""
    top5 = results["top5_accuracy"]
    logging.info(
        "eval %s at step %d: %s %.4f%s loss %.4f (%d examples)",
        split, step, name, results["accuracy"],
        "" if top5 is None else f" top5 {top5:.4f}",
        results["loss"], results["num_examples"],
    )
    if "eval" in writers:
        with writers["eval"].as_default(step=step):
            for key in ("accuracy", "top5_accuracy", "loss"):
                if results[key] is not None:
                    tf.summary.scalar(key.replace("accuracy", name),
                                      results[key])
        writers["eval"].flush()

"""train.py's work: build everything from a config, train, evaluate, save.

The host loop calls `Trainer.train` for `steps_per_loop` steps at a time and,
between calls, logs, writes TensorBoard summaries, evaluates, checkpoints and
reacts to SIGTERM (what a preempted TPU VM receives). Restarting with the same
workdir resumes from the latest complete checkpoint.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from typing import Dict, Optional

import keras
import tensorflow as tf
from absl import logging

from keras_vit.build import MODEL_KEYS, build_model, build_optimizer
from keras_vit.checkpoint import loader
from keras_vit.checkpoint import workdir as wd
from keras_vit.data import checks as data_checks
from keras_vit.data import pipeline as input_pipeline
from keras_vit.training import distribute
from keras_vit.training.resume import TrainingError, restore_latest
from keras_vit.training.trainer import Trainer

__all__ = ["TrainingError", "build_trainer", "train_and_evaluate"]

def num_classes_of(config) -> int:
    """The head width of a run of `config`: config.num_classes, else the
    data source's class count."""
    if config.num_classes:
        return int(config.num_classes)
    return input_pipeline.dataset_info(config).num_classes


def build_trainer(config, model, optimizer, strategy, num_classes: int):
    """The `Trainer` of `config` (batch, accumulation, clipping, loss, XLA)
    for a model and optimizer created under `strategy.scope()`."""
    return Trainer(
        model,
        optimizer,
        strategy,
        num_classes=num_classes,
        global_batch_size=int(config.batch_size),
        accumulation_steps=int(config.accumulation_steps),
        grad_clip_norm=config.grad_clip_norm,
        loss=config.loss,
        label_smoothing=float(config.label_smoothing),
        jit_compile=bool(config.jit_compile),
        skip_nonfinite=bool(config.skip_nonfinite),
    )


def _model_signature(config) -> dict:
    sig = {k: config.model[k] for k in MODEL_KEYS}
    sig["image_size"] = config.image_size
    sig["num_classes"] = config.num_classes
    # As the saved file holds it (tuples as lists).
    return json.loads(json.dumps(sig))


def _check_workdir_config(config, workdir: str) -> None:
    """A workdir holds one run: resuming with another model is an error."""
    if not tf.io.gfile.exists(os.path.join(workdir, wd.CONFIG)):
        return
    # Fields the saved config predates take their defaults.
    old = wd.read_config(workdir)
    if _model_signature(old) != _model_signature(config):
        raise TrainingError(
            f"The workdir {workdir} holds a run with a different model "
            f"config ({_model_signature(old)}) than this one "
            f"({_model_signature(config)}). Use a new --workdir, or the "
            "same config to resume."
        )


def _initialise_from(config, model: keras.Model) -> None:
    """Fine-tuning: weights from a released .npz, a .keras file or another
    run's workdir (`loader.initialise`). The head is kept only if its shape
    fits (else it starts at zero); position embeddings are resized to this
    model's grid."""
    init = config.init
    chosen = [k for k in ("npz", "keras_model", "workdir") if init[k]]
    if len(chosen) > 1:
        raise ValueError(
            f"config.init sets {' and '.join(chosen)}: initialise from one "
            f"source; clear the others (e.g. --config.init.{chosen[0]}=)."
        )
    if not chosen:
        return
    source = loader.Source(**{chosen[0]: init[chosen[0]]})
    report = loader.initialise(
        model, source, keep_pre_logits=bool(init.keep_pre_logits)
    )
    logging.info("Initialised from %s: %s", source.path, report)


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


def train_and_evaluate(
    config, workdir: str, strategy: Optional[tf.distribute.Strategy] = None
) -> Dict[str, float]:
    """Trains `config` into `workdir` and evaluates on the eval split.

    Returns the final metrics (also written to workdir/metrics.json).
    """
    strategy = strategy or tf.distribute.get_strategy()
    chief = distribute.is_chief(strategy)
    total = int(config.total_steps)
    if total <= 0:
        raise ValueError(f"total_steps must be positive, got {total}.")
    batch = int(config.batch_size)
    if batch <= 0:
        raise ValueError(f"batch_size must be positive, got {batch}.")
    try:
        tf.io.gfile.makedirs(workdir)
    except tf.errors.OpError as e:
        raise TrainingError(
            f"Cannot use --workdir {workdir}: {e.message.splitlines()[0]}. "
            "Check the path and your credentials; gs:// paths need "
            "TensorFlow's GCS file system: pip install -e '.[gcs]' in a "
            "checkout, or pip install 'keras-vision-transformer[gcs]'."
        ) from None
    _check_workdir_config(config, workdir)
    keras.utils.set_random_seed(int(config.seed))

    info = input_pipeline.dataset_info(config)
    if config.synthetic_data:
        logging.warning(
            "synthetic_data=True: every step trains on the same first batch "
            "(a benchmark of the loop, not a training run)."
        )
    data_checks.check_splits(config)  # now, not after training
    num_classes = int(config.num_classes or info.num_classes)

    with strategy.scope():
        model = build_model(config, num_classes)
        optimizer = build_optimizer(config)
    logging.info(
        "Model %s: %s parameters, %d replicas.",
        model.name, f"{model.count_params():,}", strategy.num_replicas_in_sync,
    )
    trainer = build_trainer(config, model, optimizer, strategy, num_classes)
    micro_batch = batch // trainer.accumulation_steps

    def eval_fn(split):
        eval_batch = int(config.eval_batch_size or micro_batch)
        return strategy.distribute_datasets_from_function(
            lambda ctx: input_pipeline.eval_dataset(
                config, split, eval_batch, ctx
            )
        )

    checkpointable = []

    def make_iterator(start_step):
        def dataset_fn(ctx):
            ds = input_pipeline.train_dataset(
                config, batch, ctx, start_step=start_step
            )
            checkpointable.append(input_pipeline.is_checkpointable(ds))
            return ds

        return iter(strategy.distribute_datasets_from_function(dataset_fn))

    items = dict(model=model, optimizer=optimizer)
    train_iter = None
    if config.checkpoint_iterator:
        train_iter = make_iterator(0)
        if not isinstance(train_iter, tf.__internal__.tracking.Trackable):
            logging.warning(
                "The %s input iterator cannot be checkpointed: a resumed run "
                "draws a new data order.", type(strategy).__name__,
            )
        elif not all(checkpointable):
            logging.warning(
                "The input pipeline reads from Python (a generator or "
                "py_function), whose state cannot be checkpointed: a resumed "
                "run draws a new data order."
            )
        else:
            items["iterator"] = train_iter
    ckpt = tf.train.Checkpoint(**items)
    ckpt_dir = os.path.join(workdir, wd.CHECKPOINTS)
    scratch = None
    if not chief:
        # Every worker saves (saving may need collectives), but only the
        # chief's checkpoints are kept; all workers restore from them.
        scratch = tempfile.mkdtemp(prefix="keras_vit_worker_ckpt_")
    manager = tf.train.CheckpointManager(
        ckpt,
        scratch or ckpt_dir,
        max_to_keep=int(config.keep_checkpoints),
        step_counter=optimizer.iterations,
    )
    latest = restore_latest(items, ckpt_dir)
    if latest:
        logging.info(
            "Resumed from %s at step %d (learning rate %.3g); data order %s.",
            latest, trainer.step, trainer.learning_rate(),
            "restored" if "iterator" in items else "drawn anew",
        )
    else:
        _initialise_from(config, model)
    # Only now: a workdir whose checkpoints do not fit keeps its config.
    if chief:
        wd.write_json(os.path.join(workdir, wd.CONFIG), config.to_dict())
        # Numbers stand in for names the data lacks: the file records the
        # head width for whoever reads the run back.
        wd.write_class_names(
            workdir,
            info.class_names or [str(i) for i in range(num_classes)],
        )
    if "iterator" not in items:
        train_iter = make_iterator(trainer.step)
    handler = distribute.preemption_handler(strategy, manager)
    if handler is not None:
        logging.info(
            "Preemption: PreemptionCheckpointHandler saves a checkpoint on "
            "every worker at the same step and exits (code 42 off Google "
            "Cloud) when any worker is told to stop."
        )
    try:
        return _train_loop(
            config, workdir, strategy, trainer, train_iter, eval_fn, manager,
            handler, chief, info, batch,
        )
    finally:
        if scratch:
            tf.io.gfile.rmtree(scratch)


def _train_loop(
    config, workdir, strategy, trainer, train_iter, eval_fn, manager,
    handler, chief, info, batch,
) -> Dict[str, float]:
    model = trainer.model
    total = int(config.total_steps)
    writers = {}
    if chief:
        writers = {
            name: tf.summary.create_file_writer(os.path.join(workdir, name))
            for name in ("train", "eval")
        }
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
                last = manager.latest_checkpoint or "none (no checkpoint yet)"
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
            applied = n - bad if trainer.skip_nonfinite else n
            if applied:
                for key in ("loss", "accuracy", "grad_norm"):
                    window[key] += metrics[key] * applied
            window["steps"] += n
            window["applied"] += applied
            window_time += dt
            if _boundary(step, log_every) or step == total:
                _log_train(
                    trainer, writers, step, total, window, window_time,
                    batch,
                )
                window = {k: 0.0 for k in window}
                window_time = 0.0
            if _boundary(step, eval_every) and step < total:
                t1 = time.time()
                with data_checks.explained_errors(config):
                    results = trainer.evaluate(eval_fn(val_split))
                _log_eval(writers, step, val_split, results)
                scheduled += time.time() - t1
            saved = _boundary(step, ckpt_every) or step == total
            if saved:
                t1 = time.time()
                manager.save(checkpoint_number=step)
                scheduled += time.time() - t1
            if handler is not None:  # saves and exits if preempted
                handler.save_checkpoint_if_preempted(checkpoint_number=step)
            if distribute.any_worker(strategy, preemption.requested):
                if not saved:
                    manager.save(checkpoint_number=step)
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
    _log_eval(writers, step, eval_split, results)
    trained = step - start_step
    final = {
        "eval_split": eval_split,
        "test_accuracy": results["accuracy"],
        "test_top5_accuracy": results["top5_accuracy"],
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
    export = config.export
    if chief and export.enabled:
        from keras_vit.export import saved_model as export_lib

        if trainer.has_ema:
            trainer.swap_ema_weights()
        path = export_lib.export_model(
            model,
            export.export_dir or os.path.join(workdir, "export"),
            model_name=export.model_name,
            class_names=info.class_names,
            # Serve with the run's own evaluation preprocessing.
            resize_size=config.pp.eval_resize_size,
        )
        if trainer.has_ema:
            trainer.swap_ema_weights()
        final["export_path"] = path
        logging.info("Exported SavedModel to %s", path)
    return final


def _log_train(trainer, writers, step, total, window, seconds, batch):
    steps = max(window["steps"], 1)
    applied = window.get("applied", steps)  # skipped steps excluded
    loss = window["loss"] / applied if applied else float("nan")
    accuracy = window["accuracy"] / applied if applied else float("nan")
    grad_norm = window["grad_norm"] / applied if applied else float("nan")
    images_per_sec = steps * batch / seconds if seconds else 0.0
    lr = trainer.learning_rate()
    logging.info(
        "step %d/%d: loss %.4f accuracy %.4f lr %.3g grad_norm %.3g "
        "images/s %.1f", step, total, loss, accuracy, lr, grad_norm,
        images_per_sec,
    )
    if "train" in writers:
        with writers["train"].as_default(step=step):
            tf.summary.scalar("loss", loss)
            tf.summary.scalar("accuracy", accuracy)
            tf.summary.scalar("learning_rate", lr)
            tf.summary.scalar("grad_norm", grad_norm)
            tf.summary.scalar("images_per_sec", images_per_sec)
            tf.summary.scalar("step_time_s", seconds / steps)
        writers["train"].flush()


def _log_eval(writers, step, split, results):
    logging.info(
        "eval %s at step %d: accuracy %.4f top5 %.4f loss %.4f (%d examples)",
        split, step, results["accuracy"], results["top5_accuracy"],
        results["loss"], results["num_examples"],
    )
    if "eval" in writers:
        with writers["eval"].as_default(step=step):
            for key in ("accuracy", "top5_accuracy", "loss"):
                tf.summary.scalar(key, results[key])
        writers["eval"].flush()

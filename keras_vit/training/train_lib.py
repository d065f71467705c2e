"""train.py's work: build everything from a config, train, evaluate, save.

`train_and_evaluate` builds the model, optimizer, trainer, data and
checkpoints of a config, resumes from the workdir's latest complete
checkpoint (or initialises from `config.init`), and hands over to the host
loop in `keras_vit.training.loop`."""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Callable, Dict, Optional, Tuple

import keras
import tensorflow as tf
from absl import logging

from keras_vit import config as config_lib
from keras_vit import config_limits, errors, remat
from keras_vit.build import build_run, check_mpp, checked_architecture
from keras_vit.checkpoint import sources as checkpoint_sources
from keras_vit.checkpoint import weights
from keras_vit.config_schema import SCRATCH_IMAGE_SIZE
from keras_vit.data import checks as data_checks
from keras_vit.data import folder_classes, image_files, overlaps, sources
from keras_vit.errors import UsageError
from keras_vit.storage import atomic, checkpoint_list, history
from keras_vit.storage import workdir as wd
from keras_vit.training import (
    cluster,
    data_fit,
    distribute,
    loop,
    model_init,
    records,
    run_data,
    run_parts,
    state,
)
from keras_vit.training.finished_run import finished_before
from keras_vit.training.mpp_trainer import MppTrainer
from keras_vit.training.resume import (
    TrainingError,
    check_same_classes,
    restore_latest,
)
from keras_vit.training.trainer import Trainer

__all__ = ["TrainingError", "build_trainer", "run_input", "train_and_evaluate"]
# What the input pipeline takes of a run besides `config.input`.
run_input = run_data.run_input
num_classes_of = data_fit.num_classes_of

# An MPP run's encoder in the official .npz layout, in its workdir.
ENCODER_NPZ = "encoder.npz"


def build_trainer(trainer_config, objective, model, optimizer, strategy, *,
                  num_classes: int, global_batch: int):
    """The `Trainer` of a run's `config.trainer` (accumulation, clipping,
    XLA, non-finite steps) and `config.objective` (loss, label smoothing)
    for a model and optimizer created under `strategy.scope()`, at
    `global_batch` images per update; an `MppTrainer` (what the model's
    head predicts) with `objective.mpp.enabled`."""
    common = dict(
        global_batch_size=int(global_batch),
        accumulation_steps=int(trainer_config.accumulation_steps),
        grad_clip_norm=trainer_config.grad_clip_norm,
        jit_compile=bool(trainer_config.jit_compile),
        skip_nonfinite=bool(trainer_config.skip_nonfinite),
    )
    if objective.mpp.enabled:
        return MppTrainer(model, optimizer, strategy, **common)
    return Trainer(
        model, optimizer, strategy, num_classes=num_classes,
        loss=objective.loss,
        label_smoothing=float(objective.label_smoothing), **common,
    )


def _save_encoder(workdir: str, model, class_names, step) -> dict:
    """Writes an MPP run's encoder (the parameters it shares with a
    classifier) as an official-layout .npz in its workdir."""
    del class_names, step
    path = os.path.join(workdir, ENCODER_NPZ)
    weights.save_npz(model, path)
    logging.info("Wrote the MPP encoder to %s", path)
    return {"encoder_npz": path}


def _mpp_checked(config):
    """An MPP run's config (`objective.mpp.enabled`), its options checked
    and an image_size of 0 the schema's default size (pre-training sets
    its own size, as it sets its own architecture: `init_architecture`
    is a fine-tuning run's); any other config as it is."""
    if not config.objective.mpp.enabled:
        return config
    if config.model.image_size == 0:
        config = config_lib.replace(
            config, model={"image_size": SCRATCH_IMAGE_SIZE})
    check_mpp(config.objective.mpp, config.model)
    return config


def _finisher(mpp_config, export, workdir: str, on_finish):
    """What runs after the final evaluation: an MPP run writes its
    encoder; an export needs the train command's `on_finish`."""
    if mpp_config.enabled:
        if export.enabled:
            raise UsageError(
                "config.export.enabled with config.objective.mpp.enabled: an "
                "MPP encoder has no classifier to serve. Fine-tune it first "
                "(config.init.model=<this run>) and export that run, or "
                "set config.export.enabled=False."
            )
        return functools.partial(_save_encoder, workdir)
    if export.enabled and on_finish is None:
        raise UsageError(
            "config.export.enabled asks for an export at the end of the run, "
            "which the train command does: use train.py (or "
            "keras_vit.commands.train.run) instead of "
            "train_lib.train_and_evaluate, or set it to False."
        )
    return run_parts.taking_step(on_finish)


@contextlib.contextmanager
def _made_workdir(workdir: str, strategy):
    """Makes `workdir` for the block, the run, held by this process (the
    chief for a cluster: `run_lock`): where the block raises and
    this call made the folder, it is removed again (with the parents made
    for it) if it holds no file
    (the run was refused before it wrote anything: a bad input found at
    set-up, a starting checkpoint that does not fit). Not for the workers
    of a cluster, which share theirs. An exported SavedModel's folder is
    refused: the run's files would go beside what TF Serving loads."""
    if checkpoint_sources.is_saved_model(workdir):
        raise UsageError(
            f"{workdir} is an exported SavedModel (saved_model.pb or its "
            "version folders), not a training workdir: pass a new "
            "--workdir (a folder of its own for each run).")
    created = wd.make_workdir(workdir)
    if distribute.is_multi_worker(strategy) or distribute.is_tpu(strategy):
        created = None
    # A cluster's workers must see one folder (before any reads it).
    distribute.check_shared(workdir, "workdir", strategy)
    with state.held_run(workdir, strategy), atomic.removed_if_refused(
            workdir, created):  # (refused the lock: the folder stays)
        yield


def train_and_evaluate(
    config,
    workdir: str,
    strategy: Optional[tf.distribute.Strategy] = None,
    *,
    on_finish: Optional[Callable[..., Optional[dict]]] = None,
    on_end: Optional[Callable[[Dict], dict]] = None,
) -> Dict[str, float]:
    """Trains `config` into `workdir` and evaluates its accuracy
    evaluators; each component gets its section of the config.

    Args:
        config: ConfigDict. A run config (see keras_vit/config_schema.py);
            not changed (fine-tuning's architecture goes into a copy).
        workdir: str. The run directory; an existing run there resumes.
        strategy: tf.distribute.Strategy or None (the default strategy).
        on_finish: called on the chief after the final evaluation with the
            model (EMA weights swapped in when kept), class names, step;
            its dict joins the final metrics (the train command's export).
        on_end: called on the chief with the final metrics of a run that
            trained to its end, before the workers of a cluster part; its
            dict joins the returned metrics (the train command's curves).

    Returns the final metrics (also written to workdir/metrics.json); those
    of metrics.json with "finished_before": True when the workdir holds the
    run finished already (nothing is trained or measured again); or, when
    the run stopped on SIGTERM or Ctrl-C, {"preempted": True, "step": S,
    "signal": "SIGTERM" or "Ctrl-C", "saved": False where it stopped before
    its first step, "final": True where it stopped in its final evaluation}
    ("restart": True when every worker of a multi-worker or TPU run saved
    that step); the commands then exit with `distribute.RESTART_EXIT_CODE`.
    """
    on_finish = _finisher(config.objective.mpp, config.export, workdir,
                          on_finish)
    config = _mpp_checked(config)
    strategy = strategy or tf.distribute.get_strategy()
    distribute.prepare_input(config.input, strategy)
    length = "total_steps" if int(config.trainer.total_steps) else "epochs"
    config = config_lib.replace(config, **data_fit.fit(
        config.input, config.trainer, config.schedule, config.log,
        config.checkpoints, config.evals))
    config_limits.check_limits(config)
    _check_backend(config.model.remat)
    batch = data_fit.global_batch(config.trainer, config.input,
                                  strategy.num_replicas_in_sync)
    if not config.objective.mpp.enabled:
        config = _started_architecture(config, workdir)
    if config.model.image_size:  # an unknown size: before the workdir
        checked_architecture(config.model)
    image_files.check_workdir_apart(config, workdir)
    with _made_workdir(workdir, strategy):  # removed if refused
        finished = finished_before(config, workdir, length, strategy)
        if finished is not None:
            return finished
        best = records.best_evaluator(config.checkpoints, config.evals)
        keras.utils.set_random_seed(int(config.seed))
        logging.info("Reading the data: %s.", config.input.vtab_task
                     or config.input.dataset)
        info, splits, resumed = _check_data(config.input, config.evals,
                                            config.objective, workdir)
        num_classes = num_classes_of(config.model, config.input)
        model, optimizer = _built(config, strategy, num_classes)
        trainer = build_trainer(
            config.trainer, config.objective, model, optimizer, strategy,
            num_classes=num_classes, global_batch=batch)
        data = run_data.RunData(
            config.input, run_input(config.seed, config.model,
                                    config.objective.mpp),
            strategy, batch, batch // trainer.accumulation_steps, splits)
        data.check_eval_batches(config.evals)
        run, items = _host_run(workdir, trainer, data, config.checkpoints, best,
                               info, on_finish, resumed)
        plan = loop.Plan.of(config.trainer, config.log, config.checkpoints,
                            config.evals)
        try:
            return _resume_and_run(config.to_dict(), config.init, plan, run,
                                   items, data, num_classes, on_end)
        finally:
            run.writer.close()


def _started_architecture(config, workdir: str):
    """`config` with the architecture of the model it starts from
    (`model_init.init_architecture`); a resumed fine-tune's recorded one."""
    resumed = wd.resumable_config(workdir) if config.init.model else None
    return config_lib.replace(config, model=model_init.init_architecture(
        config.init, config.model, resumed))


def _check_backend(policy: str) -> None:
    """Refuses a backend other than TensorFlow, and remat="dots"."""
    errors.check_tensorflow_backend(keras.backend.backend(),
                                    "the training loop is tf.distribute's")
    remat.check_backend(policy)


def _part(run: run_parts.Run, on_end, final: Dict) -> Dict:
    """`final`, once the chief's `on_end` ran (where the run trained to its
    end) and, in a multi-worker run, every worker got here."""
    try:
        if run.chief and on_end is not None and not final.get("preempted"):
            final.update(on_end(final) or {})
    finally:
        if distribute.is_multi_worker(run.strategy):
            cluster.finish(
                lambda: distribute.any_worker(run.strategy, False),
                run.handler, None if final.get("preempted") else lambda:
                wd.finished_run(run.workdir, final["steps"]) is not None)
    return final


def _built(config, strategy, num_classes: int):
    """(model, optimizer) of the run, in the strategy's scope, said in the
    log."""
    logging.info("Building the model and its optimizer.")
    with strategy.scope():
        model, optimizer = build_run(config, num_classes)
    replicas = strategy.num_replicas_in_sync
    logging.info("Model %s: %s parameters, %d replica%s.", model.name,
                 f"{model.count_params():,}", replicas,
                 "" if replicas == 1 else "s")
    return model, optimizer


def _host_run(workdir: str, trainer, data: run_data.RunData, checkpoints,
              best: Optional[Tuple[str, str]], info, on_finish,
              resumed: bool):
    """(the run_parts.Run of a run, what its checkpoints hold): its checkpoint
    writer (`config.checkpoints`), history and best checkpoint (`best`:
    the evaluator whose best accuracy is kept and the split it is compared
    on, or None); `resumed`: whether the workdir held a checkpoint at the
    start."""
    strategy = data.strategy
    items, train_iter = run_data.checkpoint_items(
        trainer.model, trainer.optimizer, data, bool(checkpoints.iterator))
    chief = distribute.is_chief(strategy)
    if not resumed:
        records.set_earlier_run_aside(workdir, chief)
    writer = state.run_writer(workdir, strategy, items, chief,
                              int(checkpoints.keep))
    keeper = None
    if best is not None:
        name, split = best
        if resumed:  # before the best checkpoint's writer looks there
            records.keep_other_best_apart(workdir, name, split, chief)
        weights_only = {k: items[k] for k in ("model", "optimizer")}
        keeper = records.BestKeeper(name, split, workdir, state.run_writer(
            workdir, strategy, weights_only, chief, 1, folder=records.BEST),
            resumed=resumed)
    run = run_parts.Run(
        workdir=workdir, strategy=strategy, trainer=trainer,
        train_iter=train_iter, eval_fn=data.eval_fn, writer=writer,
        handler=None, chief=chief, info=info, batch=data.batch,
        on_finish=on_finish, explained=data.explained,
        eval_progress=data.eval_progress,
        skipped_images=data.skipped_images,
        records=records.RunRecords(history.HistoryWriter(workdir, chief),
                                   keeper),
    )
    return run, items


def _check_data(inp, evals, objective, workdir: str):
    """(dataset info, the splits the run reads, whether `workdir` holds a
    checkpoint: the run resumes) of `config.input`, those splits (and,
    where the run learns them, its classes: not masked patch prediction)
    checked now rather than after training. Whether it resumes is read
    once, before the best checkpoint's keeper looks there."""
    info = sources.dataset_info(inp)
    if inp.synthetic_data:
        logging.warning(
            "synthetic_data=True: every step trains on the same first batch "
            "(a benchmark of the loop, not a training run)."
        )
    splits = data_checks.run_splits(inp, evals)
    data_checks.check_splits(inp, splits)
    overlaps.warn_overlaps(inp, [(f"config.{f}", s) for f, s in splits])
    folder_classes.check_training_classes(inp, not objective.mpp.enabled)
    resumed = bool(checkpoint_list.listed(os.path.join(workdir,
                                                       wd.CHECKPOINTS)))
    folder_classes.check_held_out_read(inp, splits, resumed=resumed)
    folder_classes.warn_unevaluated_classes(inp, splits,
                                         not objective.mpp.enabled)
    data_checks.check_evaluation_images(inp, splits)
    return info, splits, resumed


def _resume_and_run(saved_config: Dict, init, plan: loop.Plan,
                    run: run_parts.Run, items: Dict, data: run_data.RunData,
                    num_classes: int, on_end) -> Dict[str, float]:
    """Resumes from the latest checkpoint (or initialises from `init`),
    records the run's config and class names, runs the host loop, then
    `_part`."""
    trainer, writer = run.trainer, run.writer
    # An MPP run reads no labels: its head predicts colours, not classes.
    mpp = saved_config.get("objective", {}).get("mpp", {}).get("enabled")
    class_names = None if mpp else run.info.class_names
    check_same_classes(run.workdir, writer.ckpt_dir, class_names)
    had_iterator = "iterator" in items
    latest = restore_latest(items, writer.ckpt_dir)
    if latest:
        data.restored_iterator = latest if "iterator" in items else None
        logging.info(
            "Resumed from %s at step %d (learning rate %.3g); data order %s.",
            latest, trainer.step, trainer.learning_rate(),
            "restored" if "iterator" in items else "drawn anew",
        )
    else:
        model_init.initialise_from(init, trainer.model, class_names)
    # Only now: a workdir whose checkpoints do not fit keeps its config.
    if run.chief:
        records.keep_earlier_config(run.workdir, saved_config,
                             trainer.step if latest else None)
        wd.write_json(os.path.join(run.workdir, wd.CONFIG), saved_config)
        # Numbers stand in for names the data lacks: the file records the
        # head width for whoever reads the run back. A resumed run keeps
        # its file (its classes are the data's, checked above).
        if not latest or not wd.read_class_names(run.workdir):
            wd.write_class_names(
                run.workdir,
                run.info.class_names or [str(i) for i in range(num_classes)],
            )
    if "iterator" not in items:
        run.train_iter = data.make_iterator(trainer.step)
        if had_iterator:
            # The checkpoint held none. This iterator's pipeline is seeded
            # by its start step, and a resumed run's is built at step 0:
            # later checkpoints hold none either, each resume drawing anew.
            writer.leave_out("iterator")
    run.handler = distribute.preemption_handler(
        run.strategy, writer.handler_manager, writer.save
    )
    if run.handler is not None:
        logging.info(
            "Preemption: PreemptionCheckpointHandler saves a checkpoint on "
            "every worker at the same step and stops the run (the commands "
            "exit with status %d) when any worker is told to stop; where it "
            "does not watch (Google Cloud CPU VMs), SIGTERM does the same.",
            distribute.RESTART_EXIT_CODE,
        )
    elif distribute.is_tpu(run.strategy):
        logging.info(
            "Preemption: a TPU VM's maintenance event or preemption sends "
            "SIGTERM; training then saves a checkpoint at the next step "
            "boundary and stops (the commands exit with status %d); the "
            "same command resumes.", distribute.RESTART_EXIT_CODE,
        )
    return _part(run, on_end, loop.run(plan, run))

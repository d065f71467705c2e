"""train.py's work: build everything from a config, train, evaluate, save.

`train_and_evaluate` builds the model, optimizer, trainer, data and
checkpoints of a config, resumes from the workdir's latest complete
checkpoint (or initialises from `config.init`), and hands over to the host
loop in `keras_vit.training.loop`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Callable, Dict, Optional

import keras
import tensorflow as tf
from absl import logging

from keras_vit.build import (
    MODEL_KEYS,
    build_model,
    build_optimizer,
    check_mpp,
    config_stride,
)
from keras_vit.checkpoint import loader, weights
from keras_vit.checkpoint import workdir as wd
from keras_vit.data import checks as data_checks
from keras_vit.data import pipeline as input_pipeline
from keras_vit.data import sources
from keras_vit.errors import UsageError
from keras_vit.model import decode_variant
from keras_vit.training import cluster, distribute, loop, state
from keras_vit.training.mpp_trainer import MppTrainer
from keras_vit.training.resume import TrainingError, restore_latest
from keras_vit.training.trainer import Trainer

__all__ = ["TrainingError", "build_trainer", "train_and_evaluate"]

# An MPP run's encoder in the official .npz layout, in its workdir.
ENCODER_NPZ = "encoder.npz"

def num_classes_of(config) -> int:
    """The head width of a run of `config`: config.num_classes, else (None)
    the data source's class count."""
    if config.num_classes is not None:
        if int(config.num_classes) < 1:
            raise UsageError(
                f"config.num_classes={config.num_classes}: a run's head "
                "needs a positive class count; leave it None to read it "
                "from the data."
            )
        return int(config.num_classes)
    return sources.dataset_info(config).num_classes


def build_trainer(config, model, optimizer, strategy, num_classes: int):
    """The `Trainer` of `config` (batch, accumulation, clipping, loss, XLA)
    for a model and optimizer created under `strategy.scope()`; an
    `MppTrainer` with `config.mpp.enabled`."""
    common = dict(
        global_batch_size=int(config.batch_size),
        accumulation_steps=int(config.accumulation_steps),
        grad_clip_norm=config.grad_clip_norm,
        jit_compile=bool(config.jit_compile),
        skip_nonfinite=bool(config.skip_nonfinite),
    )
    if config.mpp.enabled:
        return MppTrainer(
            model, optimizer, strategy, target=config.mpp.target,
            stride=config_stride(config),
            colour_bits=int(config.mpp.colour_bits),
            grid_size=int(config.mpp.grid_size), **common,
        )
    return Trainer(
        model,
        optimizer,
        strategy,
        num_classes=num_classes,
        loss=config.loss,
        label_smoothing=float(config.label_smoothing),
        **common,
    )


def _model_signature(config) -> dict:
    # Rematerialisation changes how gradients are computed, not the model:
    # a run may resume with it switched on or off.
    sig = {k: config.model[k] for k in MODEL_KEYS if k != "remat"}
    sig["image_size"] = config.image_size
    sig["num_classes"] = config.num_classes
    # The MPP head's shape (a classifier has none).
    mpp = config.mpp
    sig["mpp"] = [mpp.target, mpp.colour_bits, mpp.grid_size] if (
        mpp.enabled) else None
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
            f"({_model_signature(config)}). Use a new `workdir`, or the "
            "same config to resume."
        )


# The config.model fields that fix the shapes of the parameters.
_SHAPE_FIELDS = ("patch_size", "hidden_size", "num_layers", "num_heads",
                 "mlp_dim", "pooling", "posemb", "resnet_layers",
                 "resnet_width")


def _config_shapes(model) -> Dict:
    """The _SHAPE_FIELDS that `config.model` builds (a variant's sizes
    where the fields leave them to it)."""
    shapes = {k: model[k] for k in _SHAPE_FIELDS}
    if model.variant:
        spec = decode_variant(model.variant)
        named = dict(dataclasses.asdict(spec.size),
                     patch_size=spec.patch_size,
                     resnet_layers=spec.resnet_layers)
        for key, value in named.items():
            if key in shapes and shapes[key] is None:
                shapes[key] = value
    if shapes["resnet_layers"] is not None:
        shapes["resnet_layers"] = tuple(shapes["resnet_layers"])
        shapes["resnet_width"] = shapes["resnet_width"] or 1
    return shapes


def _adopt_init_architecture(config) -> None:
    """Fine-tuning starts from config.init.model's architecture: where the
    shapes of config.model differ from the source's, the source's replace
    them (explicit sizes, no variant), with a warning; the other fields
    (dropout, remat, ...) stay the config's."""
    if not config.init.model or config.mpp.enabled:
        return
    info = loader.describe_source(config.init.model)
    wanted = {k: (tuple(info[k]) if k == "resnet_layers" and info[k]
                  else info[k])
              for k in _SHAPE_FIELDS if info.get(k) is not None}
    have = _config_shapes(config.model)
    differ = {k: (have[k], v) for k, v in wanted.items() if have[k] != v}
    if not differ:
        return
    logging.warning(
        "config.model takes the architecture of %s, the model it starts "
        "from: %s.", config.init.model,
        ", ".join(f"{k} {a} -> {b}" for k, (a, b) in sorted(differ.items())),
    )
    with config.model.ignore_type():
        config.model.variant = None
        for key in _SHAPE_FIELDS:
            config.model[key] = wanted.get(key)
        if config.init.keep_pre_logits:
            config.model.representation_size = info["representation_size"]


def _initialise_from(config, model: keras.Model) -> None:
    """Fine-tuning: weights from a released .npz, a .keras file or another
    run's workdir (`loader.initialise`). The head is kept only if its shape
    fits (else it starts at zero); position embeddings are resized to this
    model's grid."""
    init = config.init
    if not init.model:
        return
    source = loader.resolve(init.model)
    report = loader.initialise(
        model, source, keep_pre_logits=bool(init.keep_pre_logits)
    )
    logging.info("Initialised from %s: %s", source.path, report)


def _save_encoder(workdir: str, model, class_names) -> dict:
    """Writes an MPP run's encoder (the parameters it shares with a
    classifier) as an official-layout .npz in its workdir."""
    del class_names
    path = os.path.join(workdir, ENCODER_NPZ)
    weights.save_npz(model, path)
    logging.info("Wrote the MPP encoder to %s", path)
    return {"encoder_npz": path}


def train_and_evaluate(
    config,
    workdir: str,
    strategy: Optional[tf.distribute.Strategy] = None,
    *,
    on_finish: Optional[Callable[[keras.Model, Optional[list]], dict]] = None,
) -> Dict[str, float]:
    """Trains `config` into `workdir` and evaluates on the eval split.

    Args:
        config: ConfigDict. A run config (see keras_vit/config_schema.py).
        workdir: str. The run directory; an existing run there resumes.
        strategy: tf.distribute.Strategy or None (the default strategy).
        on_finish: called on the chief after the final evaluation with the
            model (EMA weights swapped in when kept) and the class names;
            the dict it returns joins the final metrics. The train command
            exports the SavedModel this way (`keras_vit.commands.train`),
            so training needs nothing from the layers above it.

    Returns the final metrics (also written to workdir/metrics.json), or,
    when the run stopped on SIGTERM with a checkpoint saved,
    {"preempted": True, "step": S} ("restart": True when every worker of a
    multi-worker run saved that step); the commands then exit with
    `distribute.RESTART_EXIT_CODE`.
    """
    if config.mpp.enabled:
        if config.export.enabled:
            raise UsageError(
                "config.export.enabled with config.mpp.enabled: an MPP "
                "encoder has no classifier to serve. Fine-tune it first "
                "(config.init.model=<this run>) and export that run, or "
                "set config.export.enabled=False."
            )
        check_mpp(config)
        on_finish = functools.partial(_save_encoder, workdir)
    if config.export.enabled and on_finish is None:
        raise UsageError(
            "config.export.enabled asks for an export at the end of the run, "
            "which the train command does: use train.py (or "
            "keras_vit.commands.train.run) instead of "
            "train_lib.train_and_evaluate, or set it to False."
        )
    strategy = strategy or tf.distribute.get_strategy()
    chief = distribute.is_chief(strategy)
    total = int(config.total_steps)
    if total <= 0:
        raise UsageError(f"total_steps must be positive, got {total}.")
    batch = int(config.batch_size)
    if batch <= 0:
        raise UsageError(f"batch_size must be positive, got {batch}.")
    try:
        tf.io.gfile.makedirs(workdir)
    except tf.errors.OpError as e:
        raise TrainingError(
            f"Cannot use `workdir` {workdir}: {e.message.splitlines()[0]}. "
            "Check the path and your credentials; gs:// paths need "
            "TensorFlow's GCS file system: pip install -e '.[gcs]' in a "
            "checkout, or pip install 'keras-vision-transformer[gcs]'."
        ) from None
    _adopt_init_architecture(config)
    _check_workdir_config(config, workdir)
    keras.utils.set_random_seed(int(config.seed))

    info = sources.dataset_info(config)
    if config.synthetic_data:
        logging.warning(
            "synthetic_data=True: every step trains on the same first batch "
            "(a benchmark of the loop, not a training run)."
        )
    data_checks.check_splits(config)  # now, not after training
    num_classes = (info.num_classes if config.num_classes is None
                   else num_classes_of(config))

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
                "py_function) or keeps random state in a variable (Keras's "
                "RandAugment, MixUp, CutMix), which cannot be checkpointed: "
                "a resumed run draws a new data order."
            )
        else:
            items["iterator"] = train_iter
    ckpt = tf.train.Checkpoint(**items)
    ckpt_dir = os.path.join(workdir, wd.CHECKPOINTS)
    writer = state.CheckpointWriter(
        ckpt, ckpt_dir, state.scratch_dir(workdir, _task_name(strategy)),
        chief=chief,
        save_here=state.saving_needs_every_worker(
            list(model.variables) + list(optimizer.variables)
        ),
        keep=int(config.keep_checkpoints),
        step_counter=optimizer.iterations,
    )
    try:
        return _resume_and_run(
            config, workdir, strategy, trainer, items, make_iterator,
            train_iter, eval_fn, writer, chief, info, num_classes, batch,
            on_finish,
        )
    finally:
        writer.close()


def _task_name(strategy) -> str:
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None)
    if task_type is None:
        return "single"
    return f"{task_type}{resolver.task_id}"


def _resume_and_run(
    config, workdir, strategy, trainer, items, make_iterator, train_iter,
    eval_fn, writer, chief, info, num_classes, batch, on_finish,
) -> Dict[str, float]:
    latest = restore_latest(items, writer.ckpt_dir)
    if latest:
        logging.info(
            "Resumed from %s at step %d (learning rate %.3g); data order %s.",
            latest, trainer.step, trainer.learning_rate(),
            "restored" if "iterator" in items else "drawn anew",
        )
    else:
        _initialise_from(config, trainer.model)
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
    handler = distribute.preemption_handler(
        strategy, writer.handler_manager, writer.save
    )
    if handler is not None:
        logging.info(
            "Preemption: PreemptionCheckpointHandler saves a checkpoint on "
            "every worker at the same step and stops the run (the commands "
            "exit with status %d) when any worker is told to stop; where it "
            "does not watch (Google Cloud CPU VMs), SIGTERM does the same.",
            distribute.RESTART_EXIT_CODE,
        )
    elif distribute.is_tpu(strategy):
        logging.info(
            "Preemption: a TPU VM's maintenance event or preemption sends "
            "SIGTERM; training then saves a checkpoint at the next step "
            "boundary and stops (the commands exit with status %d); the "
            "same command resumes.", distribute.RESTART_EXIT_CODE,
        )
    final = loop.run(
        config, workdir, strategy, trainer, train_iter, eval_fn, writer,
        handler, chief, info, batch, on_finish,
    )
    if distribute.is_multi_worker(strategy):
        cluster.finish(lambda: distribute.any_worker(strategy, False),
                       handler)
    return final

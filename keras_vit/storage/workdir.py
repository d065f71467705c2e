"""What a training run leaves in its workdir, and how to read it back.

Layout of a workdir (local or gs://):
    config.json      the run's config (checked on resume, which writes
                     the settings it changes; config.step-N.json keeps the
                     config of the steps before N)
    labels.txt       class names, one per line ("0", "1", ... when the
                     data names none), so the head width is known
    checkpoints/     tf.train.CheckpointManager checkpoints (model, optimizer
                     incl. EMA averages, input iterator where supported)
    train/, eval/    TensorBoard summaries
    history.csv      a row per logged step and per evaluation, appended
                     (`keras_vit.storage.history`)
    metrics.json     final metrics (test accuracy, steps, images/s, wall
                     time) and the versions that computed them
    training_curves.png  loss, accuracy and learning rate over the steps
                     (the train command, with matplotlib)
    best/            the best checkpoint, a workdir of its own
                     (config.checkpoints.keep_best)

Every file but history.csv is written with
`keras_vit.storage.atomic.atomic_write` (a temporary name, then a rename),
so a crash never leaves a half-written file behind.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
from typing import Any, List, Optional

import keras
import numpy as np
import tensorflow as tf

from keras_vit import build
from keras_vit import config as config_lib
from keras_vit.errors import UsageError, one_line
from keras_vit.keras_compat import ema_variables
from keras_vit.storage import atomic, checkpoint_graph, checkpoint_list
from keras_vit.storage.atomic import atomic_write
from keras_vit.storage.lines import read_lines  # noqa: F401 (this API)
from keras_vit.storage.run_names import check_folder_name

# What reading a damaged checkpoint raises (`checkpoint_list.damaged`).
DAMAGE = checkpoint_list.DAMAGE

CONFIG = "config.json"


def earlier_config(workdir: str, step: int) -> str:
    """The path that keeps a run's config of the steps before `step`,
    where a run resumed at `step` changed settings."""
    return os.path.join(workdir, f"config.step-{int(step)}.json")


def earlier_configs(workdir: str) -> List[str]:
    """The paths of the configs `earlier_config` kept in `workdir` (not
    those an earlier run's set aside, config.step-S.before-N.json)."""
    return sorted(path for path in tf.io.gfile.glob(
        os.path.join(glob.escape(workdir), "config.step-*.json"))
        if re.fullmatch(r"config\.step-\d+\.json", os.path.basename(path)))

LABELS = "labels.txt"
METRICS = "metrics.json"
CHECKPOINTS = "checkpoints"
# The folders of the run's TensorBoard summaries.
SUMMARIES = ("train", "eval")


def write_json(path: str, obj: Any) -> None:
    """`obj` as JSON (`json_text`), atomically."""
    atomic_write(path, json_text(obj) + "\n")


def json_text(obj: Any, indent: Optional[int] = 2) -> str:
    """str. `obj` as JSON, keys sorted; NaN and infinities (a diverged
    run's loss) as null: Python would write NaN, which is not JSON and
    which other readers (JavaScript's JSON.parse, jq) refuse. `indent`
    None gives one line (a JSON-lines record)."""
    return json.dumps(json_safe(obj), indent=indent, sort_keys=True,
                      allow_nan=False)


def json_safe(obj: Any) -> Any:
    """`obj` with its NaN and infinite floats as None (JSON's null)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def read_json(path: str) -> Any:
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def write_class_names(workdir: str, names: Optional[List[str]]) -> None:
    if names:
        atomic_write(os.path.join(workdir, LABELS), "\n".join(names) + "\n")


def read_class_names(workdir: str) -> Optional[List[str]]:
    """Class names saved with a run, or None."""
    path = os.path.join(workdir, LABELS)
    if not tf.io.gfile.exists(path):
        return None
    return read_lines(path)


def finished_run(workdir: str, total_steps: int) -> Optional[dict]:
    """The final metrics of the run in `workdir` with "finished_before":
    True when it has finished `total_steps` steps or more (metrics.json says
    so and its latest checkpoint is of that step: fewer steps asked of a
    finished run train none), else None."""
    path = os.path.join(workdir, METRICS)
    if not tf.io.gfile.exists(path):
        return None
    try:
        metrics = read_json(path)
    except (ValueError, tf.errors.OpError):
        return None
    latest = checkpoint_list.latest(os.path.join(workdir, CHECKPOINTS))
    steps = metrics.get("steps") if isinstance(metrics, dict) else None
    if not (isinstance(steps, int) and steps >= total_steps
            and latest and latest.endswith(f"-{steps}")):
        return None
    return dict(metrics, finished_before=True)


def read_config(workdir: str):
    """The run's config as a locked ml_collections.ConfigDict: its saved
    values laid over `keras_vit.config.base_config()`, so a field the run
    predates takes its default.

    Raises:
        FileNotFoundError: no config.json in `workdir`.
        ValueError: config.json holds a field the base config does not
            know (named, with the closest real one).
    """
    path = os.path.join(workdir, CONFIG)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(
            f"{path} not found: is {workdir!r} the workdir of a training run?"
        )
    try:
        saved = read_json(path)
    except ValueError as error:  # cut short or not JSON
        raise UsageError(
            f"{path} is not readable JSON ({error}): restore it (the run's "
            "checkpoints are read with it), or use a new workdir.") from None
    if not isinstance(saved, dict):
        raise UsageError(f"{path} holds no run config (a JSON object): "
                         "restore it, or use a new workdir.")
    model = ("a Hugging Face model's" if {"model_type", "architectures"}
             & set(saved) else "a timm model's" if {
                 "architecture", "pretrained_cfg"} & set(saved) else "")
    if model:
        raise UsageError(
            f"{path} is {model} config, not a training run's: the folder "
            "is a model to load (--model, or config.init.model to "
            "fine-tune from it), not a workdir.")
    return config_lib.complete(saved, where=path)


def resumable_config(workdir: str):
    """The config of the run in `workdir` when it holds a checkpoint to
    resume from; None otherwise (no run, or a config.json that does not
    read: `read_config` says why where the run is checked)."""
    if not checkpoint_list.latest(os.path.join(workdir, CHECKPOINTS)):
        return None
    try:
        return read_config(workdir)
    except (OSError, ValueError):  # (UsageError is a ValueError)
        return None


# Where a training checkpoint keeps the weights: the optimizer tracks the
# model's trainable variables as a list, which is their shortest path in the
# checkpoint's object graph, so it names them by position.
_TRAINABLE_KEY = re.compile(
    r"^optimizer/_trainable_variables/(\d+)/\.ATTRIBUTES/VARIABLE_VALUE$"
)


def check_checkpoint(path: str, model, reader=None,
                     labels: Optional[int] = None) -> None:
    """Raises ValueError unless the training checkpoint `path` holds exactly
    the trainable weights of `model` (same number, same shapes, in order).

    A checkpoint restores the optimizer's weight list by position, so one
    from another model could otherwise load silently in part (fewer layers)
    or fail with a bare shape error. A checkpoint without that list was
    not written by a training run: which model it holds cannot be
    checked, so it is refused. `reader`: the
    checkpoint's `checkpoint_graph.open_reader`, where one is open;
    `labels`: the count of labels.txt, where the head's width is taken
    from it (config.json gives none).
    """
    reader = reader or checkpoint_graph.open_reader(path)
    shapes = reader.get_variable_to_shape_map()
    saved = {}
    for key, shape in shapes.items():
        match = _TRAINABLE_KEY.match(key)
        if match:
            saved[int(match.group(1))] = tuple(shape)
    if not saved:
        raise UsageError(
            f"Checkpoint {path} holds no training run's list of weights (the "
            "optimizer's, which every checkpoint keras-vit-train writes "
            "has), so which model it holds cannot be checked against the "
            f"workdir's {CONFIG}: refused (the checkpoints read are those "
            "training runs write). Save the model it holds as a .keras file "
            "(model.save) and use that file.")
    variables = list(model.trainable_variables)
    problem = None
    if len(saved) != len(variables):
        problem = (
            f"it holds {len(saved)} trainable weights, the model "
            f"{len(variables)}"
        )
    for i, var in enumerate(variables):
        if problem:
            break
        if saved.get(i) != tuple(var.shape):
            if labels is not None and var.path.startswith("head/") and (
                    saved.get(i) or (None,))[-1] is not None:
                raise UsageError(
                    f"Checkpoint {path} has a head of {saved[i][-1]} "
                    f"classes, and the run's {LABELS} names {labels}: its "
                    f"{CONFIG} leaves the class count to {LABELS}, which "
                    "must be the run's own (one name per class it trained "
                    f"on, in order). Put back the run's {LABELS}.")
            problem = (
                f"weight #{i} ({var.path}) has shape {tuple(var.shape)} in "
                f"the model but {saved.get(i)} in the checkpoint"
            )
    if problem:
        raise UsageError(
            f"Checkpoint {path} is from a different model than the one "
            f"configured: {problem}. The workdir's config.json no longer "
            "describes its checkpoints: put back the run's own config "
            "(same model fields), or use a new `workdir`."
        )


def num_classes(model_config, workdir: str) -> int:
    """The width of a run's head: its `config.model.num_classes`, else the
    number of class names the run saved.

    Raises:
        ValueError: neither is there (a run directory written before every
            run saved its class names).
    """
    if model_config.num_classes:
        return int(model_config.num_classes)
    names = read_class_names(workdir)
    if names:
        return len(names)
    raise UsageError(
        f"{workdir} does not record its class count: its {CONFIG} has "
        f"no num_classes and there is no {LABELS}. Set it in {CONFIG} "
        '("num_classes": N, as config.model.num_classes=N does for a new run) '
        f"or write {LABELS} with one class name per line."
    )


def restore_model(workdir: str, *, use_ema: bool = True, checkpoint=None):
    """The trained model of a workdir, from its latest checkpoint.

    Args:
        workdir: str. The training run's workdir.
        use_ema: bool. Load the EMA (Polyak) averaged weights when the run
            kept them.
        checkpoint: str or None. A specific checkpoint prefix instead of the
            latest one.

    Returns:
        A float32 `keras.Model` with the checkpoint's weights.

    Raises:
        FileNotFoundError: no config.json or no checkpoint.
        ValueError: the checkpoint holds another model than config.json
            describes (see `check_checkpoint`), or the class count is
            recorded nowhere (see `num_classes`).
    """
    config = read_config(workdir)
    directory = os.path.join(workdir, CHECKPOINTS)
    paths = [checkpoint] if checkpoint else checkpoint_list.listed(directory)
    if not paths:
        finished = tf.io.gfile.exists(os.path.join(workdir, METRICS))
        raise FileNotFoundError(
            f"No checkpoint in {directory}: " + (
                f"the run finished ({METRICS}) and its checkpoints were "
                "removed since (a VTAB-1k task's are, once scored: "
                "config.evals.vtab.keep_checkpoints=True keeps them)."
                if finished else "the run has not saved one yet."))
    model, optimizer = build.build_run(
        config, num_classes(config.model, workdir))
    labels = (None if config.model.num_classes
              else num_classes(config.model, workdir))
    optimizer.build(model.trainable_variables)
    if keras.backend.backend() == "tensorflow":
        ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)

        def read(path):
            check_checkpoint(path, model, labels=labels)
            ckpt.read(path).expect_partial()
    else:  # tf.train.Checkpoint restores TensorFlow objects only

        def read(path):  # one read of the index for both
            reader = checkpoint_graph.open_reader(path)
            check_checkpoint(path, model, reader, labels)
            checkpoint_graph.read_into(path, model, optimizer, reader)
    ema = use_ema and getattr(optimizer, "use_ema", False)

    def use(path):  # None, or why it cannot be used
        try:
            read(path)
            return _nonfinite(ema_variables(optimizer) if ema
                              else model.weights)
        except (*DAMAGE, tf.errors.OpError) as error:
            if not checkpoint_list.damaged(error):
                raise
            return one_line(error)[:300]  # a file cut short, or changed

    chosen, damaged = checkpoint_list.first_usable(
        lambda: paths if checkpoint else checkpoint_list.listed(directory),
        use)
    if chosen is None:
        raise UsageError(
            f"No checkpoint of {workdir} can be used: {'; '.join(damaged)}. "
            "Files damaged or incomplete (a full disk, an interrupted copy): "
            "copy the run's checkpoints again; weights that are not finite: "
            "the run diverged before its first checkpoint (train it again "
            "with a lower learning rate)."
        )
    checkpoint_list.note_read(workdir, chosen)
    if ema:
        for var, avg in zip(
            model.trainable_variables, ema_variables(optimizer)
        ):
            var.assign(avg)
    return model


def _nonfinite(variables) -> Optional[str]:
    """What the first variable holding NaN or an infinity is, or None."""
    for variable in variables:
        value = variable.numpy()
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            return f"{getattr(variable, 'path', variable.name)} holds NaN " \
                "or infinite values"
    return None


REMOTE_FIX = ("Check the path and your credentials; gs:// paths need "
               "TensorFlow's GCS file system: pip install -e '.[gcs]' in a "
               "checkout, or pip install 'keras-vision-transformer[gcs]'.")


def make_workdir(workdir: str) -> Optional[str]:
    """Makes `workdir` where it is missing; the outermost folder this made
    (`workdir`, or a missing parent of a local one), None if none. Whether
    it can be written is `check_writable`'s (a finished run is also read
    where it cannot)."""
    if not str(workdir).strip():
        raise UsageError("`workdir` is empty: name the run's folder (e.g. "
                         "--workdir=/tmp/vit_run).")
    check_folder_name(workdir)
    try:
        return atomic.make_folders(workdir)
    except tf.errors.OpError as e:
        raise UsageError(
            f"Cannot use `workdir` {workdir}: {e.message.splitlines()[0]}. "
            + (REMOTE_FIX if "://" in str(workdir)
               else "Choose a folder you can write.")) from None


def writable(workdir: str) -> bool:
    """Whether this process may write in `workdir` (remote: the storage's
    to say, when written)."""
    return "://" in str(workdir) or os.access(workdir, os.W_OK)


def check_writable(workdir: str) -> None:
    """Refuses a local `workdir` this process cannot write."""
    if not writable(workdir):
        raise UsageError(
            f"Cannot write in `workdir` {workdir} (read-only, or not "
            "yours): choose a folder you can write.")

"""keras-vit-evaluate --mode=eval: accuracy and loss of any model source
on a split of the digits, a TFDS data set or an image folder: the data,
preprocessing and batch of --config, the model's run, or --workdir's
run; --dataset, --split and --data_dir where given."""

from __future__ import annotations

import json
import os
import re
import time
from typing import TYPE_CHECKING, Dict, Optional

from absl import logging

from keras_vit import config as config_lib
from keras_vit.commands import flags as cli
from keras_vit.commands.lazy import lazy_module
from keras_vit.errors import UsageError

if TYPE_CHECKING:  # imported on first use: --help loads no TensorFlow
    from keras_vit.data import checks as data_checks
    from keras_vit.data import folders, sources
    from keras_vit.data import pipeline as input_pipeline
    from keras_vit.evaluation import accuracy
    from keras_vit.storage import atomic
    from keras_vit.storage import workdir as wd
    from keras_vit.training import distribute
else:
    data_checks = lazy_module("keras_vit.data.checks")
    folders = lazy_module("keras_vit.data.folders")
    sources = lazy_module("keras_vit.data.sources")
    input_pipeline = lazy_module("keras_vit.data.pipeline")
    accuracy = lazy_module("keras_vit.evaluation.accuracy")
    atomic = lazy_module("keras_vit.storage.atomic")
    wd = lazy_module("keras_vit.storage.workdir")
    distribute = lazy_module("keras_vit.training.distribute")

# --mode=eval of an .npz or .keras file without a config: its global batch.
EVAL_BATCH = 256
# --mode=eval of an image folder without a run's config: the folder
# config's final split, the first of these the folder has.
FOLDER_TEST = "test|val|validation|valid"


def _write(path: str, text: str) -> None:
    atomic.atomic_write(path, text)
    logging.info("Wrote %s", path)


def run_config(values, source):
    """The config whose data, split, preprocessing and batch --mode=eval
    uses: --config, else the model's run (a workdir), else --workdir's
    (the run whose folder receives the results); None when none is."""
    if values.config is not None:
        return values.config
    run = source.run_config()
    if run is None and values.workdir and values.model:
        if atomic.exists(os.path.join(values.workdir, wd.CONFIG)):
            return wd.read_config(values.workdir)
    if run is None and not values.dataset:
        where = (f"--workdir={values.workdir} holds no {wd.CONFIG}"
                 if values.workdir else f"{source.describe()} is no "
                 "training run")
        raise UsageError(
            f"--mode=eval needs a data source and {where}: pass "
            "--dataset=digits|folder|<TFDS name> (and --split), or "
            "--config=CONFIG (or --workdir=RUN) whose config names one."
        )
    return run


def evaluate(values, source, strategy) -> Dict:
    """--mode=eval: top-1, top-5 and loss of the model `source` on a
    split (printed as JSON, and written where the results go)."""
    run = run_config(values, source)
    with strategy.scope():
        # At the model's own resolution unless --image_size (a config's
        # model.image_size is the run's, not this model's); a model
        # without a classification head is refused by name.
        model = cli.load_flagged_model(values, source, head="evaluate")
    # The model's resolution, square or not.
    image_size = tuple(int(n) for n in model.input_shape[1:3])
    # --resize_size (checked against the model), else without a run's
    # config the model's own (a timm model's crop_pct).
    resize = (cli.resize_size(values, source, model)
              if values.resize_size is not None or run is None else None)
    inp = eval_input(values, run, image_size, resize)
    resize = inp.pp.eval_resize_size
    logging.info("Evaluating at %s x %s (%s).", *image_size,
                 f"resized to {resize}, then the central crop" if resize
                 else "resized to it directly")
    split = values.split or (run.evals.test.split if run else (
        FOLDER_TEST if inp.dataset == sources.FOLDER else "test"))
    if inp.dataset == sources.FOLDER and not inp.vtab_task:
        split = folders.resolve_split(inp.data_dir, split)  # "val|test"
    distribute.prepare_input(inp, strategy)  # a cluster's: chief first
    info = sources.dataset_info(inp)
    width = int(model.output_shape[-1])
    # An image folder's labels follow its sorted class folders: a model
    # that names its classes in another order (or a folder of some of
    # them) is scored by name.
    scored = accuracy.in_folder_order(model, cli.class_names(values, source),
                                      inp)
    if width != info.num_classes and scored is model:
        raise UsageError(
            f"The model predicts {width} classes but {inp.dataset} has "
            f"{info.num_classes}: evaluate it on the data it was trained "
            "or fine-tuned on (--dataset/--split), or fine-tune it first "
            "(a folder of some of the model's classes is scored by name "
            "where the model names them: a run's labels.txt, id2label, or "
            "--class_names_file)."
        )
    # Where the results go, checked now: a file of another model or data
    # folder of the same name is not overwritten after the evaluation.
    location = atomic.absolute(source.path)
    data_dir = atomic.absolute(inp.data_dir) if inp.data_dir else None
    result_path = None
    if output_dir(values):
        result_path = os.path.join(output_dir(values), file_name(
            values, inp.dataset, split, image_size) + ".json")
        check_result_file(result_path, location, data_dir)
    batch = values.batch_size or (
        (run.evals.test.batch_size or run.input.batch_size) if run
        else EVAL_BATCH
    )
    start = time.time()
    metrics = accuracy.evaluate_model(
        scored, inp, input_pipeline.RunInput(image_size=image_size), split,
        int(batch), strategy,
        every_s=(run or config_lib.base_config()).log.every_seconds)
    metrics.update(dataset=inp.dataset, split=split,
                   model=values.name or source.describe(),
                   model_location=location, data_dir=data_dir,
                   image_size=list(image_size),
                   resize_size=inp.pp.eval_resize_size,
                   wall_time_s=time.time() - start)
    if scored is not model:
        metrics["classes_by_name"] = True
    skipped = data_checks.skipped_images(inp).get(split)
    if skipped:  # config.input.skip_bad_images: named in the log
        metrics["skipped_images"] = skipped
    logging.info("eval %s %s: %s", inp.dataset, split, metrics)
    print(json.dumps(metrics, indent=2, sort_keys=True))
    if result_path:
        _write(result_path,
               json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    return metrics


def check_result_file(path: str, location: str,
                      data_dir: Optional[str]) -> None:
    """Refuses to overwrite `path` when it holds the results of another
    model (`location`) or another data folder (`data_dir`; both as
    `atomic.absolute` gives them): the file names carry the model's file
    name only (two runs called `run` share one)."""
    if not atomic.exists(path):
        return
    try:
        held = wd.read_json(path)
    except (ValueError, UnicodeDecodeError):
        return  # not a results file of ours: rewritten
    for field, want, what in (("model_location", location, "model"),
                              ("data_dir", data_dir, "data folder")):
        had = held.get(field) if isinstance(held, dict) else None
        if had is not None and had != want:
            raise UsageError(
                f"{path} holds the results of another {what} ({had}, now "
                f"{want}): pass --name=NAME (the file is named by it) or "
                "another --output_dir, so that they are not overwritten.")


def file_name(values, dataset: str, split: str, image_size) -> str:
    """eval_<data set>_<split>, and the model's name and the size where
    they are not the run's own (--model or --name, --image_size), so
    that one model's results do not overwrite another's in a shared
    folder (--output_dir, or --workdir's run)."""
    parts = ["eval", dataset, split]
    if values.model or values.name:
        parts.append(values.name or os.path.basename(
            os.path.normpath(values.model)))
    if cli.hint(values, "image_size"):
        parts.append("x".join(str(n) for n in image_size))
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", "_".join(map(str, parts)))


def eval_input(values, run, image_size, resize_size=None):
    """The `config.input` section --mode=eval reads: the run's data
    source and evaluation preprocessing (its config, or --workdir's; its
    eval_resize_size scaled from its model.image_size to `image_size`),
    --dataset and --data_dir where given; `resize_size` (--resize_size,
    or without a run the model's own: a timm model's) in place of the
    run's."""
    fields = {}
    if run is not None:
        fields = {k: run.input[k] for k in (
            "dataset", "data_dir", "image_key", "label_key", "vtab_task",
            "skip_bad_images")}
        fields["pp"] = {"eval_resize_size": cli.scaled_resize(
            run.input.pp.eval_resize_size, run.model.image_size,
            image_size)}
    if resize_size:
        fields["pp"] = {"eval_resize_size": resize_size}
    if values.dataset:
        fields.update(dataset=values.dataset, vtab_task=None)
    if values.data_dir:
        fields["data_dir"] = values.data_dir
    return config_lib.complete(fields, "input")


# --mode=eval without --config: its own flags for the data's fields.
_EVAL_FLAG_WORDS = (
    ("set config.input.skip_bad_images=True", "pass --config=folder:"
     "DATA_DIR --config.input.skip_bad_images=True"),
    ("--config.input.data_dir", "--data_dir"),
    ("config.input.data_dir", "--data_dir"),
)


def in_eval_flags(message: str) -> str:
    """A message of the data layer worded in this mode's flags."""
    if folders.SPLIT_FIX in message:  # the config's fields: not here
        message = message.replace(folders.SPLIT_FIX, "").rstrip()
    for field, flag in _EVAL_FLAG_WORDS:
        message = message.replace(field, flag)
    if "has no split" in message or "has none of the splits" in message:
        message += (" Pass --split=<one of them> (of a folder of class "
                    "folders: val, the fifth of each class held out from "
                    "training, or train).")
    return message


def output_dir(values) -> Optional[str]:
    """Where the results go: --output_dir, else --workdir (else none)."""
    return values.output_dir or values.workdir

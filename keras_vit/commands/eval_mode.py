"""keras-vit-evaluate --mode=eval: accuracy and loss of any model source
on a split of the digits, a TFDS data set or an image folder: the data,
preprocessing and batch of --config, the model's run, or --workdir's
run; --dataset, --split and --data_dir where given."""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import time
from typing import TYPE_CHECKING, Dict, Optional

from absl import logging

from keras_vit import config as config_lib
from keras_vit.commands import config_args
from keras_vit.commands import flags as cli
from keras_vit.commands.lazy import lazy_module
from keras_vit.errors import UsageError
from keras_vit.progress import short_metrics

if TYPE_CHECKING:  # imported on first use: --help loads no TensorFlow
    from keras_vit.commands import labels, result_file
    from keras_vit.data import checks as data_checks
    from keras_vit.data import folders, overlaps, sources
    from keras_vit.data import pipeline as input_pipeline
    from keras_vit.evaluation import accuracy
    from keras_vit.storage import atomic, checkpoint_list
    from keras_vit.storage import workdir as wd
    from keras_vit.training import distribute
else:
    labels = lazy_module("keras_vit.commands.labels")
    result_file = lazy_module("keras_vit.commands.result_file")
    data_checks = lazy_module("keras_vit.data.checks")
    folders = lazy_module("keras_vit.data.folders")
    overlaps = lazy_module("keras_vit.data.overlaps")
    sources = lazy_module("keras_vit.data.sources")
    input_pipeline = lazy_module("keras_vit.data.pipeline")
    accuracy = lazy_module("keras_vit.evaluation.accuracy")
    atomic = lazy_module("keras_vit.storage.atomic")
    checkpoint_list = lazy_module("keras_vit.storage.checkpoint_list")
    wd = lazy_module("keras_vit.storage.workdir")
    distribute = lazy_module("keras_vit.training.distribute")

# --mode=eval of an .npz or .keras file without a config: its global batch.
EVAL_BATCH = 256
# The scores of the evaluation's log line (the whole result is printed).
SCORES = ("accuracy", "top5_accuracy", "loss", "num_examples",
          "skipped_images")
# --mode=eval of an image folder without a run's config: the folder
# config's final split, the first of these the folder has.
FOLDER_TEST = "test|val|validation|valid"
# The log's words for eval_keep_aspect without a resize size.
CROP_TO_ASPECT = ("the central crop of its aspect ratio, resized to it, as "
                  "keras-hub's image converter does")


def model_source(values):
    """The Source of the model --model names, or the
    --config.init.model override as --model (a config file's own, or its
    argument's `init=`, names the model a fine-tuning run started from:
    not read), else --workdir's run's."""
    start = config_args.given_start(values, argument=False)
    if start and values.model and start != values.model:
        raise UsageError(
            f"--model={values.model} and config.init.model={start} name two "
            "models to evaluate: keep one.")
    given = values.model or start or values.workdir
    if not given:
        raise UsageError(
            "Name the model to evaluate: --model=SOURCE, or --workdir=RUN "
            "for a training run's."
        )
    return cli.model_source(values, given)


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
    # The model's resolution, square or not (one of any size: where its
    # position embeddings are kept).
    image_size = cli.model_image_size(
        model, source.path, "pass --image_size=N, the resolution to "
        "evaluate at")
    # --resize_size (checked against the model), else without a run's
    # config the model's own (a timm model's crop_pct); --keep_aspect,
    # else the resize's own (the run's, the model's).
    flagged = values.resize_size is not None or run is None
    resize = cli.resize_size(values, source, model) if flagged else None
    keep = (cli.keep_aspect(values, source, resize) if run is None
            else values.keep_aspect)  # None: the run's own
    inp = eval_input(values, run, image_size, resize, keep)
    resize, keep = inp.pp.eval_resize_size, inp.pp.eval_keep_aspect
    logging.info("Evaluating at %s x %s (%s).", *image_size,
                 f"resized to {resize}{' (the shorter side)' * keep}, then "
                 "the central crop" if resize else CROP_TO_ASPECT if keep
                 else "resized to it directly")
    split = values.split or (run.evals.test.split if run else (
        FOLDER_TEST if inp.dataset == sources.FOLDER else "test"))
    # The flag that gave it, named by a refusal of it.
    flag = ("--config.evals.test.split" if values.split is None
            and values.config is not None else "--split")
    if inp.dataset == sources.FOLDER and not inp.vtab_task:
        split = folders.resolve_split(inp.data_dir, split)  # "val|test"
        if (not values.split and split == "val"
                and folders.holds_out(inp.data_dir)):
            _say_held_out(inp.data_dir, split)
    distribute.prepare_input(inp, strategy)  # a cluster's: chief first
    scored = _scored_model(values, source, model, inp, split, flag)
    overlaps.warn_trained_on(inp, source.run_config(), split)  # it exists
    loss = run.objective.loss if run is not None else "softmax_xent"
    facts = _facts(values, source, inp, split, image_size, loss)
    # Where the results go, checked now: a file of another model, data
    # folder, split, resize or weights of the same name is not
    # overwritten after the evaluation.
    result_path = None
    if output_dir(values):
        result_path = os.path.join(output_dir(values), file_name(
            values, inp.dataset, split, image_size) + ".json")
        result_file.check(result_path, facts["model_location"],
                          facts["data_dir"], facts)
    batch = values.batch_size or (
        (run.evals.test.batch_size or run.input.batch_size) if run
        else EVAL_BATCH
    )
    start = time.time()
    with _split_errors(split, flag):
        metrics = accuracy.evaluate_model(
            scored, inp, input_pipeline.RunInput(image_size=image_size),
            split, int(batch), strategy,
            every_s=(run or config_lib.base_config()).log.every_seconds,
            loss=loss)
    metrics.update(facts, wall_time_s=time.time() - start)
    if scored is not model:
        metrics["classes_by_name"] = True
    skipped = data_checks.skipped_images(inp).get(split)
    if skipped:  # config.input.skip_bad_images: named in the log
        metrics["skipped_images"] = skipped
    logging.info("eval %s %s: %s", inp.dataset, split, short_metrics({
        name: "null (not finite)" if isinstance(value, float)
        and not math.isfinite(value) else value  # as the file says it
        for name, value in metrics.items() if name in SCORES}))
    text = wd.json_text(metrics)  # a NaN loss (overflow) as null
    print(text)
    if result_path and distribute.is_chief(strategy):  # one writer
        result_file.write(result_path, text + "\n", facts)
    return metrics


def _facts(values, source, inp, split: str, image_size, loss: str) -> Dict:
    """What a result records beside its metrics: the data, the model and
    how it was scored; `step`: that of the run's checkpoint scored (a run
    still training, or one whose newest checkpoint was damaged)."""
    return dict(
        dataset=inp.dataset, split=split,
        model=values.name or source.describe(),
        model_location=atomic.absolute(source.path),
        data_dir=atomic.absolute(inp.data_dir) if inp.data_dir else None,
        image_size=list(image_size), resize_size=inp.pp.eval_resize_size,
        keep_aspect=inp.pp.eval_keep_aspect,
        use_ema=accuracy.ema_weights(source), loss_kind=loss,
        step=(checkpoint_list.step_read(source.path)
              if source.kind == "workdir" else None))


def _say_held_out(root: str, split: str) -> None:
    """Logs that a folder of class folders alone is scored on its share
    held out of each class, and how to score every image."""
    index, _ = folders.folder_index(root)
    total = sum(len(paths) for paths, _ in index.values())
    logging.info(
        "%s has no split folders: scoring its %s split, the %d%% of each "
        "class that training holds out (%d of %d images); --split=train+val "
        "scores every image.", root, split, round(100 * folders.VAL_SHARE),
        len(index[split][0]) if split in index else 0, total)


def _scored_model(values, source, model, inp, split, flag="--split"):
    """The model as scored on `inp` (`accuracy.in_folder_order`), once
    the split is known to exist and the classes fit."""
    info = sources.dataset_info(inp)
    check_split(inp, split, dict(info.num_examples), flag)
    width = int(model.output_shape[-1])
    names = cli.class_names(values, source)
    if values.class_names_file:  # one name per class, whatever the data
        labels.check_class_count(values, source, names, width)
    # An image folder's labels follow its sorted class folders: a model
    # that names its classes in another order (or a folder of some of
    # them) is scored by name.
    scored = accuracy.in_folder_order(model, names, inp)
    if width != info.num_classes and scored is model:
        raise UsageError(
            f"The model predicts {width} classes but {inp.dataset} has "
            f"{info.num_classes}: evaluate it on the data it was trained "
            "or fine-tuned on (--dataset/--split), or fine-tune it first "
            "(a folder of some of the model's classes is scored by name "
            "where the model names them: a run's labels.txt, id2label, or "
            "--class_names_file)."
        )
    return scored


def check_split(inp, split: str, names=None, flag="--split") -> None:
    """`sources.check_split` of --split (or the `flag` that gave it)."""
    sources.check_split(inp, split, flag, names)


@contextlib.contextmanager
def _split_errors(split: str, flag: str):
    """TFDS's "Unknown split" where it only knows its splits when reading
    (mock data): the same one line."""
    try:
        yield
    except ValueError as error:
        if not str(error).startswith("Unknown split"):
            raise
        raise sources.split_fix(flag, split, str(error)) from None


# What a result file records beside its model and data folder that its
# name may not tell: refused when it differs.
def file_name(values, dataset: str, split: str, image_size) -> str:
    """eval_<data set>_<split>, and the model's name and the size where
    they are not the run's own (--model, --config.init.model or --name,
    --image_size), the resize (--resize_size, --keep_aspect) and noema
    (--no_ema), so that one model's results do not overwrite another's
    in a shared folder (--output_dir, or --workdir's run). A split of
    other characters than letters, digits, `.`, `_` and `-` (a slice:
    train[:100]) is written readably and followed by a short hash of
    itself: two slices never share a file."""
    parts = ["eval", dataset, _split_part(split)]
    model = values.model or config_args.given_start(values, argument=False)
    if model or values.name:  # (--config.init.model names it as --model)
        parts.append(values.name or os.path.basename(
            os.path.normpath(model)))
    if cli.hint(values, "image_size"):
        parts.append("x".join(str(n) for n in image_size))
    if values.resize_size is not None:
        parts.append(f"resize{values.resize_size}")
    if values.keep_aspect is not None:
        parts.append(f"{'' if values.keep_aspect else 'no'}keepaspect")
    if cli.hint(values, "no_ema"):
        parts.append("noema")
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", "_".join(map(str, parts)))


def _split_part(split: str) -> str:
    if re.fullmatch(r"[\w.-]+", split, re.ASCII):
        return split
    readable = re.sub(r"[^A-Za-z0-9.-]+", "_", split).strip("_")
    digest = hashlib.sha256(split.encode()).hexdigest()[:8]
    return f"{readable}-{digest}"


def eval_input(values, run, image_size, resize_size=None, keep_aspect=None):
    """The `config.input` section --mode=eval reads: the run's data
    source and evaluation preprocessing (its config, or --workdir's; its
    eval_resize_size scaled from its model.image_size to `image_size`),
    --dataset, --data_dir and --skip_bad_images where given;
    `resize_size` (--resize_size,
    or without a run the model's own: a timm model's) in place of the
    run's, and `keep_aspect` (None: the run's) in place of its
    eval_keep_aspect."""
    fields = {}
    if run is not None:
        fields = {k: run.input[k] for k in (
            "dataset", "data_dir", "image_key", "label_key", "vtab_task",
            "skip_bad_images")}
        fields["pp"] = {"eval_resize_size": cli.scaled_resize(
            run.input.pp.eval_resize_size, run.model.image_size,
            image_size), "eval_keep_aspect": run.input.pp.eval_keep_aspect}
    if resize_size:  # the run's eval_keep_aspect stays
        fields.setdefault("pp", {})["eval_resize_size"] = resize_size
    if keep_aspect is not None:
        fields.setdefault("pp", {})["eval_keep_aspect"] = bool(keep_aspect)
    if values.dataset:
        if run is not None and not _same_data_kind(run.input,
                                                   values.dataset):
            # The run's data_dir is of its own kind of data (a photo
            # folder is no TFDS data dir): not inherited.
            fields["data_dir"] = None
        fields.update(dataset=values.dataset, vtab_task=None)
    if values.data_dir:
        fields["data_dir"] = values.data_dir
    if values.skip_bad_images is not None:
        fields["skip_bad_images"] = bool(values.skip_bad_images)
    return config_lib.complete(fields, "input")


def _same_data_kind(run_input, dataset: str) -> bool:
    """Whether --dataset reads the same kind of data as the run's
    config.input (both TFDS data sets, both the digits, or both image
    folders), so that the run's data_dir means the same for it."""
    def kind(name, vtab_task=None):
        if name in (sources.DIGITS, sources.FOLDER) and not vtab_task:
            return name
        return "tfds"
    return kind(run_input.dataset, run_input.vtab_task) == kind(dataset)


# --mode=eval without --config: its own flags for the data's fields.
_EVAL_FLAG_WORDS = (
    ("set config.input.skip_bad_images=True", "pass --skip_bad_images"),
    ("--config.input.data_dir", "--data_dir"),
    ("config.input.data_dir", "--data_dir"),
)


def in_eval_flags(message: str) -> str:
    """A message of the data layer worded in this mode's flags."""
    if folders.SPLIT_FIX in message:  # the config's fields: not here
        message = message.replace(folders.SPLIT_FIX, "").rstrip()
    for field, flag in _EVAL_FLAG_WORDS:
        message = message.replace(field, flag)
    message = re.sub(r"^batch_size (\d+) is not divisible",
                     r"--batch_size=\1 is not divisible", message)
    if "has no split" in message or "has none of the splits" in message:
        message += (" Pass --split=<one of them> (of a folder of class "
                    "folders: val, the fifth of each class held out from "
                    "training, or train).")
    return message


def output_dir(values) -> Optional[str]:
    """Where the results go: --output_dir, else --workdir (else none)."""
    return values.output_dir or values.workdir

"""The VTAB-1k protocol of the paper (Appendix B.1.1), task by task.

From a pre-trained model, for every task: a new zero-initialised head,
fine-tuning with SGD (momentum 0.9, LR 0.01, 2,500 steps, batch 512, cosine
decay, no weight decay, gradient clipping at norm 1) at 384 x 384 with the
position embeddings resized, and top-1 accuracy on the test split. Each
training is one call of the `train_fn` the caller passes (the command line
passes `training.train_lib.train_and_evaluate`) on a per-task config
(`task_config`), so every strategy, precision and checkpoint feature of
training applies here; the evaluation layer imports nothing of training.

With `vtab.sweep.enabled`, each (lr, steps) pair is trained on train800 and
scored on val200; the best pair is retrained on train800val200 and scored on
test. Without it, the fixed recipe trains on train800val200 directly.

Layout of the output directory:
    backbone.npz        the pre-trained model without its head
    recipe.json         what of the config makes the scores (a rerun of
                        another is refused: `vtab_protocol.check_recipe`)
    results.jsonl       one line per finished task (a rerun skips them)
    results.csv, results.md, summary.json, tasks.png, groups.png
    runs/<task>/<trial>/  train_lib workdirs (config.json, metrics.json;
                        checkpoints deleted after scoring unless kept)
"""

from __future__ import annotations

import datetime
import functools
import itertools
import os
import shlex
import time
from typing import Callable, Dict, List, Optional, Sequence, Union

import ml_collections
import tensorflow as tf
from absl import logging

from keras_vit import config as config_lib
from keras_vit import grid
from keras_vit.checkpoint import loader as pretrained
from keras_vit.data import sources, vtab
from keras_vit.errors import Preempted, UsageError
from keras_vit.evaluation import accuracy, reports
from keras_vit.evaluation.vtab_protocol import (
    BACKBONE,
    Protocol,
    check_recipe,
    read_folder_json,
    task_config,
    trial_differences,
)
from keras_vit.progress import Progress
from keras_vit.storage import atomic
from keras_vit.storage import workdir as wd

BACKBONE_SOURCE = "backbone.json"
RUNS = "runs"
FINAL = "final"

# (config, workdir, strategy or None) -> metrics dict: one training run
# (`training.train_lib.train_and_evaluate`).
TrainFn = Callable[
    [ml_collections.ConfigDict, str, Optional[tf.distribute.Strategy]], Dict
]


def run_trial(
    config: ml_collections.ConfigDict,
    workdir: str,
    train_fn: TrainFn,
    strategy: Optional[tf.distribute.Strategy] = None,
    keep_checkpoints: bool = False,
) -> Dict:
    """Trains one config with `train_fn` (or reuses its finished
    metrics.json). A workdir that already holds another config is an
    error rather than silently mixed results."""
    config_path = os.path.join(workdir, wd.CONFIG)
    metrics_path = os.path.join(workdir, wd.METRICS)
    if tf.io.gfile.exists(config_path):
        # Laid over the base config: fields added since the trial ran
        # take their defaults.
        saved = wd.read_config(workdir).to_dict()
        differ = trial_differences(saved, config.to_dict())
        if differ:
            raise UsageError(
                f"{workdir} holds a run with another config: {differ}. Use "
                "a new `output_dir`, or delete that directory to redo the "
                "trial."
            )
        if tf.io.gfile.exists(metrics_path):
            logging.info("Reusing the finished trial in %s.", workdir)
            metrics = wd.read_json(metrics_path)
            # (a run stopped before it removed them: removed now)
            _drop_checkpoints(workdir, keep_checkpoints)
            return metrics
    metrics = train_fn(config, workdir, strategy)
    if metrics.get("preempted"):
        ctrl_c = metrics.get("signal") == "Ctrl-C"
        saved = ("checkpoint saved" if metrics.get("saved", True)
                 else "nothing saved")
        raise Preempted(
            f"{'Ctrl-C at' if ctrl_c else 'Stopped at'} step "
            f"{metrics.get('step')} in {workdir}, {saved}: run the same "
            "command again to resume.",
            kind="stopped" if ctrl_c else "preempted",
            saved=metrics.get("saved", True))
    _drop_checkpoints(workdir, keep_checkpoints)
    return metrics


def _drop_checkpoints(workdir: str, keep_checkpoints: bool) -> None:
    """Removes a finished trial's checkpoints unless they are kept."""
    checkpoints = os.path.join(workdir, wd.CHECKPOINTS)
    if not keep_checkpoints and tf.io.gfile.isdir(checkpoints):
        tf.io.gfile.rmtree(checkpoints)


def _trial_name(lr: float, steps: int) -> str:
    return f"lr{lr:g}_steps{int(steps)}"


def run_task(
    config: ml_collections.ConfigDict,
    protocol: Protocol,
    task: vtab.Task,
    model_fields: Dict,
    backbone: str,
    output_dir: str,
    train_fn: TrainFn,
    strategy: Optional[tf.distribute.Strategy] = None,
) -> Dict:
    """Sweep (optional), final training, test score: the task's record."""
    start = time.time()
    keep = protocol.keep_checkpoints
    task_dir = os.path.join(output_dir, RUNS, task.name)
    trials = []
    sweep = protocol.sweep
    if sweep.enabled:
        for lr, steps in itertools.product(sweep.lrs, sweep.steps):
            cfg = task_config(
                config, task, model_fields, backbone, lr=lr, steps=steps,
                train_split=vtab.TRAIN800, eval_split=vtab.VAL200,
            )
            metrics = run_trial(
                cfg, os.path.join(task_dir, _trial_name(lr, steps)),
                train_fn, strategy, keep,
            )
            trials.append(dict(lr=float(lr), steps=int(steps),
                               val_accuracy=metrics["test_accuracy"]))
            logging.info("%s: lr %g, %d steps -> val200 accuracy %.4f",
                         task.name, lr, steps, metrics["test_accuracy"])
        # Ties go to the first pair in sweep order.
        best = max(trials, key=lambda t: t["val_accuracy"])
        lr, steps = best["lr"], best["steps"]
    else:
        lr, steps = protocol.lr, protocol.steps
    cfg = task_config(
        config, task, model_fields, backbone, lr=lr, steps=steps,
        train_split=vtab.TRAIN800VAL200, eval_split=vtab.TEST,
    )
    final = run_trial(cfg, os.path.join(task_dir, FINAL), train_fn,
                      strategy, keep)
    record = dict(
        task=task.name,
        title=task.title,
        group=task.group,
        accuracy=final["test_accuracy"],
        top5_accuracy=final["test_top5_accuracy"],
        loss=final["test_loss"],
        test_examples=final["test_examples"],
        lr=float(lr),
        steps=int(steps),
        batch_size=protocol.batch_size,
        image_size=protocol.image_size,
        sweep=trials,
        wall_time_s=time.time() - start,
        finished=datetime.datetime.now(datetime.timezone.utc).isoformat(),
    )
    logging.info("%s (%s): test top-1 %.2f%% (%d examples).", task.title,
                 task.group, 100 * record["accuracy"], record["test_examples"])
    return record


# What identifies the backbone an output_dir's results come from: its
# source's location and kind and whether the pre-logits were kept (an
# earlier stamp's .npz `variant` is not compared); `files`: the name, size
# and SHA-256 of each file the model is read from (a file replaced at the
# same path is another model, a copy on another worker the same one);
# `use_ema`: a workdir's EMA or raw weights (--no_ema), None for others.
_STAMP_FIELDS = ("source", "kind", "keep_pre_logits", "files", "use_ema")


def prepare_backbone(
    source: pretrained.Source,
    output_dir: str,
    keep_pre_logits: bool = False,
) -> str:
    """Writes (once) the source's headless backbone into output_dir; any
    kind of source (`pretrained.resolve`)."""
    # Absolute: each task's config.json names it, and a run resumed from
    # another folder (or with the folder spelled otherwise) reads it.
    path = os.path.join(atomic.absolute(output_dir), BACKBONE)
    stamp = os.path.join(output_dir, BACKBONE_SOURCE)
    wanted = dict(source=atomic.absolute(source.path), kind=source.kind,
                  keep_pre_logits=keep_pre_logits,
                  files=pretrained.model_files(source),
                  use_ema=accuracy.ema_weights(source))
    if tf.io.gfile.exists(stamp):
        # The stamp decides, with or without the backbone beside it (a
        # deleted backbone.npz is written again for the same model).
        saved = read_folder_json(stamp)
        if all(saved.get(k, wanted[k]) == wanted[k] for k in _STAMP_FIELDS):
            if not tf.io.gfile.exists(path):
                logging.info("Writing the headless backbone of %s to %s "
                             "again.", source.describe(), path)
                pretrained.write_backbone(source, path, keep_pre_logits)
            return path
        differ = ", ".join(
            "its files changed since (their contents)" if k == "files"
            else f"{k} {saved.get(k)!r}, now {wanted[k]!r}"
            for k in _STAMP_FIELDS if saved.get(k, wanted[k]) != wanted[k])
        if _tasks_begun(output_dir):
            raise UsageError(
                f"{output_dir} holds results of another pre-trained model "
                f"({differ}): use a new `output_dir` for "
                f"{source.describe()}.")
        logging.info("%s holds the backbone of another pre-trained model "
                     "(%s) and no task run: written anew.", output_dir,
                     differ)
        # A stop while writing leaves no stamp: never the old one beside
        # the new backbone.
        tf.io.gfile.remove(stamp)
    elif _tasks_begun(output_dir):
        raise UsageError(
            f"{output_dir} holds VTAB runs but no {BACKBONE_SOURCE} "
            "saying which model they are of: the new tasks could be "
            "averaged with another model's. Use a new `output_dir` for "
            f"{source.describe()} (or put back its {BACKBONE_SOURCE}).")
    logging.info("Writing the headless backbone of %s to %s.",
                 source.describe(), path)
    pretrained.write_backbone(source, path, keep_pre_logits)
    wd.write_json(stamp, wanted)
    return path


def _tasks_begun(output_dir: str) -> bool:
    """Whether `output_dir` holds a task's run or a result."""
    runs = os.path.join(output_dir, RUNS)
    return bool((tf.io.gfile.exists(runs) and tf.io.gfile.listdir(runs))
                or reports.read_jsonl(os.path.join(
                    output_dir, reports.RESULTS_JSONL), warn=False))


def run(  # noqa: PLR0913 (the protocol's parts and options)
    config: ml_collections.ConfigDict,
    source: pretrained.Source,
    output_dir: str,
    train_fn: TrainFn,
    strategy: Optional[tf.distribute.Strategy] = None,
    tasks: Union[str, Sequence[str], None] = None,
    model_name: Optional[str] = None,
    chief: bool = True,
    in_turn: Optional[Callable] = None,
) -> Dict:
    """Runs the VTAB-1k protocol on the selected tasks.

    Finished tasks (in results.jsonl, of the same recipe, `check_recipe`,
    and name, `check_name`) are skipped; tasks without data are reported.

    Args:
        config: ConfigDict. configs/vtab.py: its vtab evaluator
            (`config.evals.vtab`) and each task's training.
        source: pretrained.Source. The model to evaluate.
        output_dir: str. Results and per-task runs (local or gs://).
        train_fn: (config, workdir, strategy) -> metrics: one fine-tuning
            run (`training.train_lib.train_and_evaluate`).
        strategy: tf.distribute.Strategy or None (default strategy).
        tasks: task and group names (default `config.evals.vtab.tasks`).
        model_name: str or None. The model's name in reports.
        chief: bool. Whether this worker writes the results.
        in_turn: (prepare, name) -> None: runs a task's download and
            preparation in the cluster's turn (the chief's first,
            `training.distribute.prepare_in_turn`); None: at once.

    Returns:
        {"records": [...], "summary": {...}, "not_run": {task: why},
        "preempted": False or the stop's `Preempted.kind`, "saved": its
        `Preempted.saved`, "files": ...}.
    """
    protocol = Protocol.of(config, config_lib.find_evaluator(config.evals,
                                                            "vtab"))
    strategy = strategy or tf.distribute.get_strategy()
    selected = vtab.select_tasks(tasks if tasks is not None
                                 else protocol.tasks)
    model_name = model_name or source.describe()
    # Patches that do not divide the size, or too many: before any file.
    arch = pretrained.describe_source(source)
    arch.grid(protocol.image_size or None)
    grid.check_tokens(protocol.image_size or arch.image_size, arch.stride)
    tf.io.gfile.makedirs(output_dir)
    results_path = os.path.join(output_dir, reports.RESULTS_JSONL)
    records: List[Dict] = reports.read_jsonl(results_path)
    backbone = prepare_backbone(source, output_dir, protocol.keep_pre_logits)
    check_name(records, model_name, results_path)
    check_recipe(config, output_dir, bool(records), chief)
    model_fields = pretrained.transfer_model_config(
        pretrained.NpzSource(backbone), protocol.model_options)
    todo = _todo(selected, records, results_path)
    not_run: Dict[str, str] = {}
    preempted = False
    progress = Progress(len(todo))
    for task in todo:
        if not sources.prepared_or_skipped(functools.partial(
                vtab.prepare, task, protocol.data_dir, protocol.download,
                protocol.manual_dir), task.name, task.name, in_turn, not_run,
                progress):
            continue
        logging.info("VTAB task %s: %s (%s, %d classes)%s.",
                     progress.start(), task.title, task.group,
                     task.num_classes, progress.eta())
        try:
            record = run_task(config, protocol, task, model_fields,
                              backbone, output_dir, train_fn, strategy)
        except Preempted as e:
            logging.warning("%s", e)
            preempted = e  # its kind and whether it saved a checkpoint
            break
        progress.finish()
        record.update(model=model_name, use_ema=accuracy.ema_weights(source))
        records = _publish(records, record, (results_path, output_dir),
                           (model_name, not_run), chief)
    return _finish(records, not_run, preempted, output_dir, model_name,
                   chief)


def _todo(selected: Sequence[vtab.Task], records: Sequence[Dict],
          results_path: str) -> List[vtab.Task]:
    """The selected tasks without a record, the others said skipped."""
    todo = [t for t in selected if all(r["task"] != t.name for r in records)]
    if len(todo) < len(selected):
        logging.info("%d of %d selected tasks already done (%s): skipped.",
                     len(selected) - len(todo), len(selected), results_path)
    return todo


def check_name(records: Sequence[Dict], model_name: str,
               results_path: str) -> None:
    """Refuses to add tasks under another name to the finished tasks of
    the same model (`prepare_backbone` has checked the model): the
    reports would call them all by the new name, results.jsonl by the
    old one."""
    held = [r["model"] for r in records
            if isinstance(r.get("model"), str) and r["model"] != model_name]
    if held:
        raise UsageError(
            f"{results_path} holds the VTAB results of this model named "
            f"{held[-1]!r}, not {model_name!r}: pass "
            f"--name={shlex.quote(held[-1])} to add to them, or another "
            "--output_dir.")


def _publish(records: List[Dict], record: Dict, paths: tuple,
             names: tuple, chief: bool) -> List[Dict]:
    """`records` with the task's `record`, written with the reports of
    all (`paths`: results.jsonl's and the output_dir; `names`: the model
    name and the tasks not run), together: a stop waits for them."""
    results_path, output_dir = paths
    with atomic.signals_deferred():
        records = _record(records, record, results_path, chief)
        if chief:
            reports.write_vtab_reports(output_dir, records, *names)
    return records


def _record(records: List[Dict], record: Dict, results_path: str,
            chief: bool) -> List[Dict]:
    if chief:
        return reports.append_jsonl(results_path, record)
    return records + [record]


def _finish(records, not_run, preempted, output_dir, model_name,
            chief) -> Dict:
    files = {}
    if chief and records:  # none: no table of n/a (the command says why)
        files = reports.write_vtab_reports(output_dir, records, model_name,
                                           not_run)
        files["jsonl"] = os.path.join(output_dir, reports.RESULTS_JSONL)
    summary = reports.summarize(records)
    for group in vtab.GROUPS + (vtab.ALL,):
        entry = summary[group]
        if entry["mean"] is not None:
            logging.info("%s: %.2f%% over %d/%d tasks.", group,
                         100 * entry["mean"], entry["tasks"], entry["total"])
    return dict(records=records, summary=summary, not_run=not_run,
                preempted=getattr(preempted, "kind", False),
                saved=getattr(preempted, "saved", True), files=files)

"""What a training run keeps besides its rolling checkpoints: its history
(<workdir>/history.csv, `keras_vit.storage.history`) and, where
`config.checkpoints.keep_best` names an accuracy evaluator, the checkpoint
of that evaluator's best accuracy so far in <workdir>/best/.

<workdir>/best/ is a workdir of its own (config.json, labels.txt,
checkpoints/ with the one best checkpoint, best.json: its step, split and
accuracy), so every command that takes a run takes it:
`--model=<workdir>/best`. The rolling `config.checkpoints.keep` never
touches it.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Tuple

import tensorflow as tf
from absl import logging
from tensorflow.core.util import event_pb2

from keras_vit.errors import UsageError
from keras_vit.storage import atomic, checkpoint_list, history
from keras_vit.storage import workdir as wd

BEST = "best"
BEST_JSON = "best.json"


def best_evaluator(checkpoints, evals) -> Optional[Tuple[str, str]]:
    """(the accuracy evaluator `config.checkpoints.keep_best` names, the
    split its best checkpoint is chosen on: `compared_split`); None: keep
    no best checkpoint.

    Raises:
        UsageError: it names no accuracy evaluator of `config.evals`.
    """
    name = checkpoints.keep_best
    if not name:
        return None
    entry = evals.get(name) if name in evals else None
    if entry is None or entry.type != "accuracy":
        names = [n for n, e in evals.items() if e.type == "accuracy"]
        raise UsageError(
            f"config.checkpoints.keep_best={name!r} names no accuracy "
            f"evaluator of config.evals; the run's: "
            f"{', '.join(names) or 'none'}.")
    return name, compared_split(entry)


class BestKeeper:
    """Saves the checkpoint of evaluator `name`'s best accuracy into
    <workdir>/best/ (see the module doc).

    Args:
        name: str. The accuracy evaluator whose evaluations on `split`
            are compared: the periodic ones and the last step's.
        split: str. The split they are compared on (`compared_split`).
        workdir: str. The run's workdir.
        writer: state.CheckpointWriter of <workdir>/best/checkpoints,
            keeping one.
    """

    def __init__(self, name: str, split: str, workdir: str, writer,
                 resumed: bool = True):
        self.name, self.workdir, self.writer = name, workdir, writer
        self.folder = os.path.join(workdir, BEST)
        stored = _stored_best(workdir) if resumed else None
        if stored is None and resumed and writer.latest():
            # A stop fell between the first best checkpoint and its record.
            stored = {"evaluator": name, "split": split, "step": None,
                      "accuracy": None}
        # A resumed run competes with the best of its earlier part chosen
        # alike; a run that starts afresh, or compares another evaluator
        # or split (`keep_other_best_apart`), with none. Every worker
        # decides alike.
        if stored is not None and _chosen_alike(stored, name, split):
            stored = self._mended(stored, split)
            self.best = stored["accuracy"]
        else:
            self.best = None

    def _mended(self, stored: Dict[str, Any], split: str) -> Dict[str, Any]:
        """best.json's record, or, where a stop fell between saving a best
        checkpoint and writing its record, that checkpoint's: its accuracy
        read back from history.csv (written before it was saved), else the
        recorded one, which it beat. Every worker reads the same files, so
        decides alike; the chief writes the record."""
        step = checkpoint_list.step_of(self.writer.latest())
        if step is None or step == stored.get("step"):
            return stored
        accuracies = [row["accuracy"] for row in history.read_history(
            self.workdir) if (row["step"], row["split"]) == (step, split)
            and history.is_evaluation(row) and row["accuracy"] is not None]
        mended = dict(stored, step=step)
        if accuracies:
            mended["accuracy"] = accuracies[-1]
            mended.pop("accuracy_at_least", None)
        elif stored["accuracy"] is None:  # no record, no row: no bound
            logging.warning(
                "The best checkpoint in %s (step %d) has no %s and no row "
                "in history.csv: the next evaluation replaces it.",
                self.folder, step, BEST_JSON)
            return stored
        else:
            mended["accuracy_at_least"] = True
        recorded = (f"{BEST_JSON} records step {stored.get('step')}"
                    if stored.get("step") is not None
                    else f"{BEST_JSON} is missing")
        logging.warning(
            "%s, and the best checkpoint in %s is step %d (a stop fell "
            "between saving it and recording it): recorded again as step "
            "%d, accuracy %s%.4f.", recorded, self.folder, step, step,
            "" if accuracies else "above ", mended["accuracy"])
        if self.writer.chief:
            self._record(mended)
        return mended

    def offer(self, step: int, split: str, accuracy: float) -> None:
        """Keeps this step's weights if `accuracy` beats the best so far."""
        if self.best is not None and not accuracy > self.best:
            return
        self.best = float(accuracy)
        self.writer.save(step)
        if self.writer.chief:
            self._record({"step": int(step), "evaluator": self.name,
                          "split": split, "accuracy": self.best})
            logging.info("Best %s accuracy so far, %.4f at step %d: kept in "
                         "%s.", split, self.best, step, self.folder)

    def _record(self, record: Dict[str, Any]) -> None:
        """The best checkpoint's config.json and labels.txt (copies of the
        run's) and best.json, each whole or not at all."""
        for name in (wd.CONFIG, wd.LABELS):
            source = os.path.join(self.workdir, name)
            if tf.io.gfile.exists(source):  # whole or not at all
                atomic.atomic_write(os.path.join(self.folder, name),
                                    atomic.read_bytes(source))
        wd.write_json(os.path.join(self.folder, BEST_JSON), record)

    def close(self) -> None:
        self.writer.close()


def compared_split(entry) -> str:
    """The split an accuracy evaluator (`entry`, of config.evals) is
    evaluated on every `every_steps`, where its best checkpoint is chosen:
    its val_split, else its split."""
    return entry.val_split or entry.split


def validates_at_end(kept, name: str, due, step: int, alone: bool) -> bool:
    """Whether periodic evaluator `name` of the final evaluations `due`
    ((name, entry) pairs) evaluates its validation split at the last step
    too, with the run's `kept` records: the best checkpoint's evaluator
    (on every worker alike); another on one worker (`alone`) where the
    best's does not evaluate that split; each once (history.csv)."""
    entry = dict(due)[name]
    if kept is None or not entry.every_steps:
        return False
    split = compared_split(entry)
    if not kept.keeps_best(name) and (not alone or any(
            kept.keeps_best(n) and compared_split(e) == split
            for n, e in due)):
        return False
    return not kept.evaluated(step, split)


def _stored_best(workdir: str) -> Optional[Dict[str, Any]]:
    """best.json's record; None where there is none (or the chief has
    just moved it apart: `keep_other_best_apart`)."""
    path = os.path.join(workdir, BEST, BEST_JSON)
    try:
        return wd.read_json(path) if tf.io.gfile.exists(path) else None
    except tf.errors.NotFoundError:
        return None


def _chosen_alike(stored: Dict[str, Any], name: str, split: str) -> bool:
    return (stored.get("evaluator"), stored.get("split")) == (name, split)


def keep_other_best_apart(workdir: str, name: str, split: str,
                          chief: bool) -> None:
    """A resumed run whose best checkpoint is chosen by another evaluator
    or on another split than the earlier steps' keeps their best apart
    (best.before-N/), said in the log: accuracies on two splits are not
    compared."""
    if not chief:
        return
    stored = _stored_best(workdir)
    if stored is None or _chosen_alike(stored, name, split):
        return
    kept = history.kept_apart(os.path.join(workdir, BEST))
    logging.warning(
        "The best checkpoint so far was chosen by the %s evaluator's "
        "accuracy on %s, and this run compares the %s evaluator's on %s: "
        "the earlier one is kept apart in %s, and %s holds the best from "
        "the step this run resumes at.", stored.get("evaluator"),
        stored.get("split"), name, split, kept,
        os.path.join(workdir, BEST))


class RunRecords:
    """The history rows and the best checkpoint of one training run.

    Args:
        history: storage.history.HistoryWriter.
        best: BestKeeper or None.
    """

    def __init__(self, history_writer: history.HistoryWriter,
                 best: Optional[BestKeeper] = None):
        self.history, self.best = history_writer, best

    def train_row(self, step: int, logged: Dict[str, Any]) -> None:
        """The row of one logged training step (`reporting.log_train`'s
        values: the means since the last logged step, its learning rate,
        gradient norm, images/s and the steps it covers)."""
        self.history.add(step, "train", **logged)

    def evaluation(self, name: str, step: int, split: str,
                   results: Dict[str, Any], compared: bool) -> None:
        """One evaluation's row; evaluator `name`'s accuracy goes to the
        best checkpoint's comparison where `compared` (its periodic
        evaluations, and its final one on the same split)."""
        self.history.add(step, split, loss=results["loss"],
                         accuracy=results["accuracy"],
                         top5_accuracy=results["top5_accuracy"])
        if compared and self.best is not None and name == self.best.name:
            self.history.flush()  # the row a best checkpoint is read by
            self.best.offer(step, split, results["accuracy"])

    def keeps_best(self, name: str) -> bool:
        """Whether accuracy evaluator `name` chooses the best checkpoint."""
        return self.best is not None and self.best.name == name

    def evaluated(self, step: int, split: str) -> bool:
        """Whether history.csv holds an evaluation on `split` at `step`."""
        self.history.flush()
        return any(row["step"] == step and row["split"] == split
                   and history.is_evaluation(row)
                   for row in history.read_history(
                       os.path.dirname(self.history.path)))

    def close(self) -> None:
        self.history.flush()
        if self.best is not None:
            self.best.close()


def set_earlier_run_aside(workdir: str, chief: bool) -> None:
    """A run that starts at step 0 where an earlier one logged (its
    checkpoints deleted, or it stopped before its first) keeps that
    run's history, best checkpoint, TensorBoard summaries, final
    metrics and configs apart (history.before-N.csv, best.before-N/,
    train.before-N/, metrics.before-N.json, config.before-N.json), said
    in the log, so that the two runs' rows
    and curves do not mix, the new run's best is its own and its results
    do not overwrite the earlier run's."""
    if not chief:
        return
    for name in wd.SUMMARIES:
        _check_summaries(os.path.join(workdir, name))
    moved = history.set_aside(workdir)
    if moved:
        logging.warning(
            "The workdir %s has no checkpoint but an earlier run's "
            "history: training starts at step 0, and that history is kept "
            "apart in %s.", workdir, moved)
    # The earlier run's files under one number (history.before-N.csv's).
    n = int(moved.rsplit("-", 1)[1].split(".")[0]) if moved else None
    folder = os.path.join(workdir, BEST)
    kept = history.kept_apart(folder, n)
    if kept:
        logging.warning(
            "The earlier run's best checkpoint is kept apart in %s; %s holds "
            "the new run's.", kept, folder)
    # Its TensorBoard summaries (another run beside the new one, not
    # curves drawn over it) and final metrics.
    for name in wd.SUMMARIES:  # nothing to keep: they go
        if _without_summaries(os.path.join(workdir, name)):
            tf.io.gfile.rmtree(os.path.join(workdir, name))
    summaries = [kept for kept in (
        history.kept_apart(os.path.join(workdir, name), n)
        for name in wd.SUMMARIES) if kept]
    if summaries:
        logging.warning("The earlier run's TensorBoard summaries are kept "
                        "apart in %s.", " and ".join(summaries))
    final = history.kept_apart(os.path.join(workdir, wd.METRICS), n)
    if final:
        logging.warning("The earlier run's final metrics are kept apart in "
                        "%s.", final)
    if moved or kept or summaries or final:
        _keep_earlier_configs_apart(workdir, n)


def _keep_earlier_configs_apart(workdir: str, n: Optional[int]) -> None:
    """The earlier run's config.json and the configs of its resumed parts
    (config.step-S.json) go with its history (config.before-N.json,
    config.step-S.before-N.json): the new run writes its own, and a file
    the earlier run left would pass for the new run's record."""
    earlier = [os.path.join(workdir, wd.CONFIG)] + wd.earlier_configs(
        workdir)
    kept = [path for path in (history.kept_apart(p, n) for p in earlier)
            if path]
    if kept:
        logging.warning("The earlier run's config is kept apart in %s.",
                        " and ".join(kept))


def _check_summaries(folder: str) -> None:
    """Refuses a workdir's train/ or eval/ that holds files but no
    TensorBoard event file: no run's summaries (a folder of the user's,
    images perhaps), which setting an earlier run aside would move."""
    try:
        names = sorted(n.rstrip("/") for n in tf.io.gfile.listdir(folder))
    except tf.errors.OpError:  # (none, or unreadable: its move says why)
        return
    # A profiler's plugins/ and hidden files (.DS_Store) are no user's.
    names = [n for n in names if n != "plugins" and not n.startswith(".")]
    if names and not any(n.startswith("events.out.tfevents.")
                         for n in names):
        raise UsageError(
            f"{folder} holds {names[0]} and no TensorBoard event file: it is "
            "no run's summaries, and the run writes its own there. Move it "
            "out of the workdir, or give the run another workdir.")


def _without_summaries(folder: str) -> bool:
    """Whether the TensorBoard folder `folder` holds event files alone,
    none with a summary (a run that failed before its first log writes
    their headers): nothing to keep. False where it cannot tell."""
    try:
        names = tf.io.gfile.listdir(folder)
        return bool(names) and all(
            name.startswith("events.out.tfevents.") and not any(
                event.HasField("summary") for event in
                _events(os.path.join(folder, name)))
            for name in names)
    except Exception:  # noqa: BLE001 (an unreadable record: kept apart)
        return False


def _events(path: str):
    """The Event records of an event file (tf.data's reader:
    `tf.compat.v1.train.summary_iterator` logs a deprecation notice)."""
    for record in tf.data.TFRecordDataset(path):
        yield event_pb2.Event.FromString(record.numpy())


def keep_earlier_config(workdir: str, config: Dict,
                        step: Optional[int]) -> None:
    """A run resumed at `step` with other settings keeps the config of
    its earlier steps (`wd.earlier_config`) before config.json takes
    them."""
    path = os.path.join(workdir, wd.CONFIG)
    kept = None if step is None else wd.earlier_config(workdir, step)
    # A second resume at the same step keeps the first one's record.
    if kept is None or not tf.io.gfile.exists(path) or (
            tf.io.gfile.exists(kept)):
        return
    # Compared as completed (an earlier version's file lacks new fields).
    earlier = json.loads(json.dumps(wd.read_config(workdir).to_dict()))
    if earlier != json.loads(json.dumps(config)):
        wd.write_json(kept, wd.read_json(path))

"""A training run's history: <workdir>/history.csv, one row per logged
training step (each `step N/T: loss ...` line of the log: every
`config.log.every_steps`, the last step, a run's first, compiling
train call and a stop's step) and per evaluation, appended as the run
goes (a resumed run goes on appending; nothing is ever truncated).

Columns (`COLUMNS`): the step after the row's work, the split ("train",
or the evaluated split), the loss, the accuracy (top-1; MPP: of the
corrupted patches), the top-5 accuracy (evaluations), the learning rate,
the gradient norm and the images per second (training rows, means
since the previous training row), the wall time
(seconds since the epoch, as TensorBoard's) and the steps the row covers.
An empty cell is a value the row has not.

The one file of a workdir that is appended instead of replaced whole
(`keras_vit.storage.atomic`): a local file takes each row as it comes; a
remote one (gs://) is rewritten whole, atomically, at most once a minute
and when the run stops. A crash can leave a partial last line, which
`read_history` skips and the next append closes, marked as cut (`CUT`).
After a resume, the steps between the checkpoint and the stop appear
twice; `read_history` keeps the later rows.
"""

from __future__ import annotations

import csv
import io
import math
import os
import time
from typing import Dict, List, Optional

import tensorflow as tf

from keras_vit.storage.atomic import atomic_write, is_remote

FILE = "history.csv"
COLUMNS = ("step", "split", "loss", "accuracy", "top5_accuracy",
           "learning_rate", "grad_norm", "images_per_sec", "wall_time",
           "steps")
# What closes a row a crash cut (so that the next row starts a line): a
# cell more than a row has, so that `read_history` skips it.
CUT = ",cut\n"
# Seconds between rewrites of a remote history.
_REMOTE_FLUSH_S = 60.0


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e9 else f"{value:.3f}"
    return str(value)


class HistoryWriter:
    """Appends rows to a workdir's history.csv (the chief's; others write
    nothing).

    Args:
        workdir: str. Local or gs://.
        write: bool. This worker writes the run's files.
    """

    def __init__(self, workdir: str, write: bool = True):
        self.path = os.path.join(workdir, FILE)
        self.write = write
        self._rows: List[str] = []
        self._flushed = time.time()

    def add(self, step: int, split: str, **values) -> None:
        """Adds one row: `step`, `split` and any of the other COLUMNS by
        name (wall_time defaults to now)."""
        if not self.write:
            return
        unknown = set(values) - set(COLUMNS)
        if unknown:
            raise ValueError(f"Unknown history columns: {sorted(unknown)}")
        values.setdefault("wall_time", time.time())
        row = dict(values, step=int(step), split=split)
        self._rows.append(",".join(_cell(row.get(c)) for c in COLUMNS))
        if not is_remote(self.path) or (
                time.time() - self._flushed > _REMOTE_FLUSH_S):
            self.flush()

    def flush(self) -> None:
        """Writes the rows added since the last flush."""
        if not self._rows:
            return
        text = "\n".join(self._rows) + "\n"
        self._flushed = time.time()
        header = ",".join(COLUMNS) + "\n"
        if is_remote(self.path):
            old = ""
            if tf.io.gfile.exists(self.path):
                with tf.io.gfile.GFile(self.path) as f:
                    old = f.read()
            if old and not old.endswith("\n"):
                old += CUT
            atomic_write(self.path, (old or header) + text)
            self._rows = []  # written (a stop in the write keeps them)
            return
        with open(self.path, "a+", encoding="utf-8") as f:
            size = f.tell()
            if size:
                f.seek(size - 1)
                if f.read(1) != "\n":  # a crash cut the last row
                    text = CUT + text
            else:
                text = header + text
            f.write(text)
            f.flush()
        self._rows = []


def set_aside(workdir: str) -> Optional[str]:
    """Moves the history.csv of a run that starts again from step 0 (its
    checkpoints gone) to history.before-N.csv, the first free N, so that
    the new run's rows do not mix with it; the new path, or None where
    there was none."""
    return kept_apart(os.path.join(workdir, FILE))


def kept_apart(path: str, n: Optional[int] = None) -> Optional[str]:
    """Renames the file or folder `path` to `NAME.before-N[.SUFFIX]` (`n`
    where that is free, else the first free N); the new path, None where
    there is no `path`."""
    if not tf.io.gfile.exists(path):
        return None
    stem, suffix = os.path.splitext(path)
    n = n or 1
    while tf.io.gfile.exists(f"{stem}.before-{n}{suffix}"):
        n += 1
    tf.io.gfile.rename(path, f"{stem}.before-{n}{suffix}")
    return f"{stem}.before-{n}{suffix}"


def read_history(workdir: str) -> List[Dict]:
    """The rows of a workdir's history.csv, in order, as dicts of the
    columns (floats; step and steps ints; split a str; None where empty).
    A row that does not parse (a crash's partial line) is skipped; where
    the steps of a split's training rows or of its evaluations go back (a
    resumed run redid them), the later rows replace the earlier ones from
    that step on. [] without a history."""
    path = os.path.join(workdir, FILE)
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as f:
        text = f.read()
    # Every row ends its line: a last one without its end is a crash's.
    text = text[:text.rfind("\n") + 1]
    rows: List[Dict] = []
    last: Dict[tuple, int] = {}  # the newest step of each series
    for record in csv.DictReader(io.StringIO(text)):
        if None in record or None in record.values():  # a cut row
            continue
        try:
            row = {k: (float(v) if v else None) for k, v in record.items()
                   if k in COLUMNS and k != "split"}
            row["step"] = int(row["step"])
            row["steps"] = int(row["steps"]) if row["steps"] else None
            row["split"] = record["split"] or None
        except (TypeError, ValueError, KeyError):
            continue
        step, key = row["step"], _series(row)
        if row["split"] is None:
            continue
        if step <= last.get(key, -1):
            rows = [r for r in rows if _series(r) != key or r["step"] < step]
        last[key] = step
        rows.append(row)
    return rows


def is_evaluation(row: Dict) -> bool:
    """Whether a `read_history` row is an evaluation's (a training row
    counts its steps), also of an evaluation on the split "train"."""
    return row["steps"] is None


def _series(row: Dict) -> tuple:
    return row["split"], is_evaluation(row)

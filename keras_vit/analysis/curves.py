"""A training run's curves from its history (<workdir>/history.csv):
loss, accuracy and learning rate over the steps, training and evaluation
together, in one PNG (`training_curves.png`). keras-vit-train draws it at
the end of a run when matplotlib is installed; `keras-vit-analysis
--curves=WORKDIR` draws it from any run's workdir."""

from __future__ import annotations

import os
from typing import Dict, List, Optional

import tensorflow as tf

from keras_vit.analysis import plots
from keras_vit.errors import UsageError
from keras_vit.storage import history

FILE = "training_curves.png"


def _series(rows: List[Dict], split: str, key: str):
    points = [(r["step"], r[key]) for r in rows
              if r["split"] == split and r.get(key) is not None]
    return [p[0] for p in points], [p[1] for p in points]


def draw_curves(workdir: str, output_dir: Optional[str] = None) -> str:
    """Draws the curves of the run in `workdir` into
    `output_dir`/training_curves.png (default: the workdir); the path.

    Raises:
        UsageError: `workdir` has no history.csv with a training row, or
            `output_dir` holds a training_curves.png that no analysis drew
            (a run's own, in its workdir, is drawn again).
        ImportError: matplotlib is not installed (named, with the fix).
    """
    if not tf.io.gfile.isdir(workdir):
        raise UsageError(f"{workdir} is not a folder: give the "
                         "workdir of a keras-vit-train run.")
    target = os.path.join(output_dir or workdir, FILE)
    elsewhere = output_dir and os.path.normpath(output_dir) != os.path.normpath(
        workdir)  # (a run's own: drawn again, even unmarked)
    if (elsewhere and tf.io.gfile.exists(target)
            and not plots.drawn_here(target)):
        raise UsageError(
            f"{output_dir} holds {FILE}, which no keras-vit-analysis drew: "
            "not replaced; move it away, or pass another --output_dir.")
    rows = history.read_history(workdir)
    train = [r for r in rows if not history.is_evaluation(r)]
    evals = [r for r in rows if history.is_evaluation(r)]
    if not train:
        raise UsageError(
            f"{workdir} has no {history.FILE} with training rows: give the "
            "workdir of a keras-vit-train run (runs write one since this "
            "version).")
    splits = sorted({r["split"] for r in evals})
    fig = plots._figure(13.5, 3.6)
    panels = fig.subplots(1, 3)
    for ax, key, title in zip(panels, ("loss", "accuracy", "learning_rate"),
                              ("loss", "accuracy (top-1)", "learning rate")):
        steps, values = _series(train, "train", key)
        ax.plot(steps, values, label="train", linewidth=1.0)
        for split in splits if key != "learning_rate" else ():
            steps, values = _series(evals, split, key)
            if steps:  # an evaluation on the training split: its own
                ax.plot(steps, values, marker="o", markersize=3,
                        label=f"{split} (evaluated)" if split == "train"
                        else split)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if key != "learning_rate":
            ax.legend()
    fig.suptitle(os.path.basename(os.path.normpath(workdir)))
    return plots._save(fig, target)

"""Result files of VTAB-1k runs: JSONL, CSV, markdown, charts (few-shot
runs: `keras_vit.evaluation.fewshot_reports`).

Per-task results are JSON lines in `results.jsonl`; the file is rewritten
whole (temporary name + rename) each time a task finishes, so a crash never
leaves half a line, and a rerun reads which tasks are done (a last line
cut short all the same, by a copy, is left out with a warning; a damaged
line before it is refused: `read_jsonl`). From those records come
`results.csv`, `results.md` (the paper's Table 9 layout: tasks under their
group, a mean column per group and the 19-task mean) and bar charts
(`tasks.png`, `groups.png`). Accuracies are stored as fractions and shown
in %.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from typing import Dict, List, Mapping, Optional, Sequence

import tensorflow as tf
from absl import logging

from keras_vit.data import vtab
from keras_vit.errors import UsageError, one_line
from keras_vit.storage import workdir as wd
from keras_vit.storage.atomic import atomic_write

RESULTS_JSONL = "results.jsonl"
RESULTS_CSV = "results.csv"
RESULTS_MD = "results.md"
SUMMARY_JSON = "summary.json"
TASKS_PNG = "tasks.png"
GROUPS_PNG = "groups.png"

GROUP_COLORS = {
    vtab.NATURAL: "#4C72B0",
    vtab.SPECIALIZED: "#DD8452",
    vtab.STRUCTURED: "#55A868",
    vtab.ALL: "#8172B3",
}


# --------------------------------------------------------------- JSONL
def read_jsonl(path: str, warn: bool = True) -> List[dict]:
    """The records of a JSON-lines file ([] if there is none).

    The last line, when it is no whole record (cut short: a copy or a
    disk that stopped mid-line), is left out, with a warning naming it
    (`warn`): its task is run again, and the next record written drops
    it. A damaged line before it is a UsageError naming the file, the
    line and the fix: leaving it out would silently drop a finished
    task's result.
    """
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path, "rb") as f:
        lines = [(n, line) for n, line in enumerate(f.read().split(b"\n"), 1)
                 if line.strip()]
    records = []
    for n, line in lines:
        try:
            record = json.loads(line.decode("utf-8"))
            if not isinstance(record, dict) or "task" not in record:
                raise ValueError("not a record with a task")
        except ValueError as e:
            if n != lines[-1][0]:
                raise UsageError(
                    f"{path}: line {n} is damaged ({one_line(e)}): mend it, "
                    "or delete that line (its task then runs again), or "
                    "pass another --output_dir.") from None
            if warn:
                logging.warning(
                    "%s: the last line (%d) is cut short or damaged (%s): "
                    "left out; its task runs again if selected.", path, n,
                    one_line(e))
            continue
        records.append(record)
    return records


def append_jsonl(path: str, record: Mapping) -> List[dict]:
    """Adds `record` to a JSON-lines file, rewriting it atomically.

    A record with the same "task" as an older one replaces it. Returns all
    records.
    """
    records = [r for r in read_jsonl(path, warn=False)
               if r.get("task") != record["task"]]
    records.append(dict(record))
    # A diverged task's NaN loss as null, as in metrics.json.
    text = "".join(wd.json_text(r, indent=None) + "\n" for r in records)
    atomic_write(path, text)
    return records


# ------------------------------------------------------------ summaries
def _mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def summarize(records: Sequence[Mapping]) -> Dict[str, dict]:
    """Group means and the overall mean of the finished tasks.

    Returns:
        {group or "all": {"mean": accuracy fraction or None, "tasks": n
        done, "total": n in the group}}. A group's mean is the unweighted
        mean of its tasks; "all" is the mean over all tasks (not of the
        group means), as in the paper.
    """
    by_task = {r["task"]: float(r["accuracy"]) for r in records}
    out = {}
    for group in vtab.GROUPS + (vtab.ALL,):
        names = (
            vtab.TASK_NAMES if group == vtab.ALL
            else [t.name for t in vtab.tasks_in_group(group)]
        )
        done = [by_task[n] for n in names if n in by_task]
        out[group] = {"mean": _mean(done), "tasks": len(done),
                      "total": len(names)}
    return out


def _pct(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{100.0 * value:.2f}"


def _mean_cell(entry: Mapping) -> str:
    text = _pct(entry["mean"])
    if entry["mean"] is not None and entry["tasks"] < entry["total"]:
        text += f" ({entry['tasks']}/{entry['total']})"
    return text


# ------------------------------------------------------------------ CSV
CSV_FIELDS = (
    "task", "title", "group", "accuracy_percent", "top5_accuracy_percent",
    "loss", "test_examples", "lr", "steps", "paper_vit_l16_percent",
)


def write_csv(path: str, records: Sequence[Mapping]) -> None:
    """One row per finished task, in the canonical task order."""
    order = {n: i for i, n in enumerate(vtab.TASK_NAMES)}
    rows = sorted(records, key=lambda r: order.get(r["task"], len(order)))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        task = vtab.TASKS.get(r["task"])
        writer.writerow({
            "task": r["task"],
            "title": r.get("title", task.title if task else r["task"]),
            "group": r.get("group", task.group if task else ""),
            "accuracy_percent": f"{100.0 * r['accuracy']:.2f}",
            "top5_accuracy_percent": f"{100.0 * r['top5_accuracy']:.2f}"
            if r.get("top5_accuracy") is not None else "",
            "loss": f"{r['loss']:.4f}" if r.get("loss") is not None else "",
            "test_examples": r.get("test_examples", ""),
            "lr": r.get("lr", ""),
            "steps": r.get("steps", ""),
            "paper_vit_l16_percent": task.paper_vit_l16 if task else "",
        })
    atomic_write(path, buf.getvalue())


# ------------------------------------------------------------- markdown
def markdown_table(
    records: Sequence[Mapping],
    model_name: str,
    skipped: Optional[Mapping[str, str]] = None,
    reference: bool = True,
) -> str:
    """VTAB-1k results as markdown, laid out like the paper's Table 9.

    A summary table (one column per group and the 19-task mean), then the
    per-task table: the tasks of each group followed by the group's mean.
    With `reference`, the paper's ViT-L/16 (ImageNet-21k) numbers are a
    second row. Group means over fewer tasks than the group has say so:
    "85.10 (3/4)".
    """
    summary = summarize(records)
    by_task = {r["task"]: r["accuracy"] for r in records}
    heads = [vtab.GROUP_TITLES[g] for g in vtab.GROUPS] + ["VTAB (19)"]
    lines = [
        "## VTAB-1k: top-1 accuracy (%)",
        "",
        "| Model | " + " | ".join(heads) + " |",
        "|---|" + "---:|" * len(heads),
        f"| {model_name} | "
        + " | ".join(_mean_cell(summary[g]) for g in vtab.GROUPS + (vtab.ALL,))
        + " |",
    ]
    if reference:
        for name, ref in vtab.PAPER_REFERENCE.items():
            lines.append(
                f"| {name}, paper | "
                + " | ".join(
                    f"{ref[g]:.2f}" for g in vtab.GROUPS + (vtab.ALL,)
                ) + " |"
            )
    columns, cells, ref_cells = [], [], []
    paper = vtab.PAPER_REFERENCE["ViT-L/16 (I21k)"]
    for group in vtab.GROUPS:
        tasks = vtab.tasks_in_group(group)
        for t in tasks:
            columns.append(t.title)
            cells.append(_pct(by_task.get(t.name)))
            ref_cells.append(f"{t.paper_vit_l16:.1f}")
        columns.append(f"{vtab.GROUP_TITLES[group]} mean")
        cells.append(_mean_cell(summary[group]))
        # The paper's means (of its unrounded per-task numbers): 72.72
        # where the one-decimal cells average to 72.71.
        ref_cells.append(f"{paper[group]:.2f}")
    columns.append("Mean (19)")
    cells.append(_mean_cell(summary[vtab.ALL]))
    ref_cells.append(f"{paper[vtab.ALL]:.2f}")
    lines += [
        "",
        "### Per task",
        "",
        "| Model | " + " | ".join(columns) + " |",
        "|---|" + "---:|" * len(columns),
        f"| {model_name} | " + " | ".join(cells) + " |",
    ]
    if reference:
        lines.append(
            "| ViT-L/16 (I21k), paper | " + " | ".join(ref_cells) + " |"
        )
    if skipped:
        lines += ["", "### Not run", ""]
        lines += [f"- {name}: {why}" for name, why in skipped.items()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------- charts
def require_charts() -> None:
    """Raises the ImportError naming the install command when matplotlib
    is missing: a VTAB run checks it before its first task, not after."""
    _figure(1.0, 1.0)


def _figure(width: float, height: float):
    """A figure with its own Agg canvas, outside pyplot: the process's
    backend and pyplot's figure list stay as they were, and no display is
    needed."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "The VTAB charts need matplotlib: pip install "
            "'keras-vision-transformer[figures]' (or pip install matplotlib)."
        ) from None

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _save_figure(fig, path: str) -> None:
    atomic_write(path, lambda tmp: fig.savefig(
        tmp, format="png", dpi=120, bbox_inches="tight"))


def plot_tasks(records: Sequence[Mapping], path: str, model_name: str) -> None:
    """Bar chart: top-1 accuracy per task, coloured by group, with the
    paper's ViT-L/16 (I21k) value as a black tick."""
    by_task = {r["task"]: r["accuracy"] for r in records}
    tasks = [t for t in vtab.TASKS.values() if t.name in by_task]
    fig = _figure(max(6.0, 0.55 * len(tasks) + 2), 4.5)  # checks matplotlib
    from matplotlib.patches import Rectangle

    ax = fig.add_subplot()
    xs = list(range(len(tasks)))
    values = [100.0 * by_task[t.name] for t in tasks]
    ax.bar(xs, values, color=[GROUP_COLORS[t.group] for t in tasks])
    ax.scatter(xs, [t.paper_vit_l16 for t in tasks], marker="_", s=300,
               color="black", zorder=3, label="ViT-L/16 (I21k), paper")
    for x, v in zip(xs, values):
        # At the bar's foot: reference ticks (all >= 30%) never reach it.
        inside = v > 12
        ax.text(x, 1.5 if inside else v + 1, f"{v:.1f}", ha="center",
                va="bottom", fontsize=8, color="white" if inside else "black",
                rotation=90)
    ax.set_xticks(xs)
    ax.set_xticklabels([t.title for t in tasks], rotation=60, ha="right")
    ax.set_ylim(0, 105)
    ax.set_ylabel("Top-1 accuracy (%)")
    ax.set_xlabel("VTAB-1k task")
    ax.set_title(f"VTAB-1k per task: {model_name}")
    handles = [
        Rectangle((0, 0), 1, 1, color=GROUP_COLORS[g])
        for g in vtab.GROUPS
    ]
    labels = [vtab.GROUP_TITLES[g] for g in vtab.GROUPS]
    tick = ax.get_legend_handles_labels()
    # Outside the axes: bars near 100% would hide an inside legend.
    ax.legend(handles + tick[0], labels + tick[1], fontsize=8,
              loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _save_figure(fig, path)


def plot_groups(records: Sequence[Mapping], path: str, model_name: str) -> None:
    """Bar chart: mean accuracy per group and over all tasks, beside the
    paper's ViT-L/16 (I21k) means."""
    summary = summarize(records)
    keys = [
        g for g in vtab.GROUPS + (vtab.ALL,) if summary[g]["mean"] is not None
    ]
    ref = vtab.PAPER_REFERENCE["ViT-L/16 (I21k)"]
    fig = _figure(6.5, 4.5)
    ax = fig.add_subplot()
    xs = list(range(len(keys)))
    width = 0.38
    ours = [100.0 * summary[k]["mean"] for k in keys]
    ax.bar([x - width / 2 for x in xs], ours, width,
           color=[GROUP_COLORS[k] for k in keys], label=model_name)
    ax.bar([x + width / 2 for x in xs], [ref[k] for k in keys], width,
           color="lightgray", edgecolor="black",
           label="ViT-L/16 (I21k), paper")
    for x, v in zip(xs, ours):
        ax.text(x - width / 2, v + 1, f"{v:.1f}", ha="center", fontsize=8)
    names = []
    for k in keys:
        title = "All 19" if k == vtab.ALL else vtab.GROUP_TITLES[k]
        s = summary[k]
        if s["tasks"] < s["total"]:
            title += f"\n({s['tasks']}/{s['total']} tasks)"
        names.append(title)
    ax.set_xticks(xs)
    ax.set_xticklabels(names)
    ax.set_ylim(0, 105)
    ax.set_ylabel("Mean top-1 accuracy (%)")
    ax.set_xlabel("Task group")
    ax.set_title(f"VTAB-1k group means: {model_name}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _save_figure(fig, path)


def write_vtab_reports(
    output_dir: str,
    records: Sequence[Mapping],
    model_name: str,
    skipped: Optional[Mapping[str, str]] = None,
) -> Dict[str, str]:
    """Writes results.csv, results.md, summary.json and the two charts.

    Returns:
        {kind: path} of the files written.
    """
    paths = {
        "csv": os.path.join(output_dir, RESULTS_CSV),
        "markdown": os.path.join(output_dir, RESULTS_MD),
        "summary": os.path.join(output_dir, SUMMARY_JSON),
    }
    write_csv(paths["csv"], records)
    atomic_write(
        paths["markdown"], markdown_table(records, model_name, skipped)
    )
    summary = {
        "model": model_name,
        "groups": summarize(records),
        "tasks": {r["task"]: r["accuracy"] for r in records},
        "not_run": dict(skipped or {}),
    }
    wd.write_json(paths["summary"], summary)
    if records:
        paths["tasks_png"] = os.path.join(output_dir, TASKS_PNG)
        paths["groups_png"] = os.path.join(output_dir, GROUPS_PNG)
        plot_tasks(records, paths["tasks_png"], model_name)
        plot_groups(records, paths["groups_png"], model_name)
    return paths


def nothing_ran(what: str, not_run: Dict[str, str]) -> str:
    """The one line for a run that produced no result: the first reason
    whole, each other one by its first sentence (the log above has them
    whole)."""
    whys = list(not_run.values())
    shown = whys[:1] + [_first_sentence(why) for why in whys[1:]]
    reasons = [f"{name}: {why.rstrip('. ')}"
               for name, why in zip(not_run, shown)]
    whole = (" (the log above gives each reason whole)"
             if shown != whys else "")
    fix = "" if whys and "data_dir" in whys[0] else (
        " Prepare the data (config.input.download, config.input.data_dir) "
        "and run the same command again.")
    return (f"no {what} produced a result "
            f"({'; '.join(reasons) or 'none selected'}){whole}.{fix}")


def _first_sentence(text: str) -> str:
    """`text` up to a full stop before a capital, "`" or "(" (not "e.g.")."""
    end = re.search(r"\. (?=[A-Z`(])", text)
    return text if end is None else text[:end.start() + 1]

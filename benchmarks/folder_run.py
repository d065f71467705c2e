r"""Your own images at a real model size, end to end: the folder config's
documented commands run as a user types them, each timed.

    python benchmarks/folder_run.py --model=B/16 --per_class=12 --runs=1 \
        --output=benchmarks/results/folder_run_b16

A folder of photos (`--per_class` JPEG crops of each of the two photos
scikit-learn ships, one class each, as the tests write them) is made in
a temporary folder; then, in a fresh process each:
`keras-vit-train --config=folder:PHOTOS --model=MODEL --workdir=RUN`,
`keras-vit-evaluate --mode=eval --workdir=RUN` and
`keras-vit-predict --model=RUN PHOTOS/flower/`. A size (`B/16`) trains
from scratch; it costs what fine-tuning the released model of that size
(`ViT-B_16`) costs per step, which needs the download. Each stage's wall
time (process start to exit, TensorFlow's start-up included), the steps
the run settled and its test accuracy are kept for every run; the
report gives the median of the runs.

Writes NAME.json and NAME.md for `--output=NAME`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]

import throughput  # noqa: E402  (beside this file: machine_info)
import throughput_report as report  # noqa: E402

from tests.photo_folder import write_photo_folder  # noqa: E402

STAGES = ("train", "evaluate", "predict")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="B/16",
                   help="what --model the training takes (a size trains "
                        "from scratch)")
    p.add_argument("--per_class", type=int, default=12,
                   help="photos of each of the two classes")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--output", default="/tmp/folder_run")
    return p


def commands(photos: str, run: str, model: str) -> Dict[str, List[str]]:
    """Each stage's command line, as `python -m keras_vit.commands.NAME`
    (what the console scripts run)."""
    def module(name: str) -> List[str]:
        return [sys.executable, "-m", f"keras_vit.commands.{name}"]

    return {
        "train": module("train") + [f"--config=folder:{photos}",
                                    f"--model={model}", f"--workdir={run}"],
        "evaluate": module("evaluate") + ["--mode=eval", f"--workdir={run}"],
        "predict": module("predict") + [f"--model={run}",
                                        os.path.join(photos, "flower")],
    }


def one_run(folder: str, args: argparse.Namespace) -> Dict[str, Any]:
    """The three stages on a new photo folder and workdir: their times,
    the run's steps and test accuracy."""
    photos, run = os.path.join(folder, "photos"), os.path.join(folder, "run")
    write_photo_folder(photos, per_class=args.per_class)
    seconds = {}
    for stage, argv in commands(photos, run, args.model).items():
        t0 = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True)
        seconds[stage] = time.perf_counter() - t0
        if done.returncode:
            raise SystemExit(f"FAIL: {stage} exited {done.returncode}:\n"
                             + done.stderr[-3000:])
    with open(os.path.join(run, "metrics.json")) as f:
        metrics = json.load(f)
    return {"seconds": seconds, "steps": metrics["steps"],
            "test_accuracy": metrics.get("test_accuracy")}


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.runs < 1 or args.per_class < 2:
        parser.error("--runs must be at least 1 and --per_class at least 2")
    command = "python benchmarks/folder_run.py " + " ".join(
        f"--{k}={v}" for k, v in vars(args).items())
    machine = throughput.machine_info()
    runs = []
    for _ in range(args.runs):
        folder = tempfile.mkdtemp(prefix="folder_run_")
        try:
            runs.append(one_run(folder, args))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    result = {
        "command": command, "args": vars(args), "machine": machine,
        "runs": runs,
        "median_s": {s: statistics.median(r["seconds"][s] for r in runs)
                     for s in STAGES},
    }
    result["machine"]["load_average_end"] = list(os.getloadavg())
    report.write_results(args.output, result, markdown(result))
    print(markdown(result))


def markdown(result: Dict[str, Any]) -> str:
    m, args, runs = result["machine"], result["args"], result["runs"]
    rows = [f"| {stage} | {result['median_s'][stage]:.0f} | "
            + ", ".join(f"{r['seconds'][stage]:.0f}" for r in runs) + " |"
            for stage in STAGES]
    return "\n".join([
        "# Your own images: the folder config end to end",
        "",
        f"`{result['command']}`",
        "",
        f"- Machine: {m['cpu']}, {m['cores']} cores; load average (1 min) "
        f"at start {m['load_average'][0]:.2f}.",
        f"- Model: {args['model']}; {2 * args['per_class']} photos in two "
        f"classes; the run settled {runs[0]['steps']} steps; test "
        f"accuracy {runs[0]['test_accuracy']}.",
        "",
        "| stage | median s | every run (s) |",
        "|---|---|---|",
        *rows,
        "",
    ])


if __name__ == "__main__":
    main()

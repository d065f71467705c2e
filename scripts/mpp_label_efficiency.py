r"""Label efficiency of masked patch prediction on the digits.

    python scripts/mpp_label_efficiency.py --labels_per_class 10 --seeds 3 \
        --output docs/results/mpp_label_efficiency.json

1. Pre-trains configs/mpp_digits.py (MPP on the 1,437 training images, no
   labels) once.
2. For each seed s = 0 .. K-1: draws N labelled training images per class
   (seeded by s) and trains configs/digits_few_labels.py on them twice,
   from the MPP encoder and from scratch, with the same images, seed,
   steps and optimizer.
3. Scores both on the 360 test images and writes
   {"mpp": [test accuracy per seed], "scratch": [...], "summary": {mean,
   sample standard deviation, paired difference}, "pretrain": {...},
   "settings": {...}, "wall_time_s": ...}.

Every run goes through train.py's own path (train_lib.train_and_evaluate)
in a work folder (--workdir, default a temporary one that is removed).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_vit.storage.atomic import atomic_write  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python scripts/mpp_label_efficiency.py",
        description="MPP pre-training on the digits' images, then "
        "fine-tuning from it against training from scratch with a few "
        "labels per class.",
    )
    parser.add_argument("--labels_per_class", type=int, default=10,
                        help="Labelled training images per class (N).")
    parser.add_argument("--seeds", type=int, default=3,
                        help="Seeds 0..K-1: label draws and runs per arm.")
    parser.add_argument("--output", required=True,
                        help="The JSON file to write.")
    parser.add_argument("--workdir", default=None,
                        help="Where the runs go (kept); default: a "
                        "temporary folder, removed at the end.")
    parser.add_argument("--pretrain_steps", type=int, default=None,
                        help="MPP steps (default: configs/mpp_digits.py's).")
    parser.add_argument("--finetune_steps", type=int, default=None,
                        help="Steps of each few-label run (default: "
                        "configs/digits_few_labels.py's).")
    return parser


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("labels_per_class", "seeds", "pretrain_steps",
                 "finetune_steps"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be >= 1, got {value}.")
    return args


def _config(name: str, arg: Optional[str] = None):
    path = os.path.join(ROOT, "configs", name)
    spec = importlib.util.spec_from_file_location(f"config_{name[:-3]}",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def _train(config, workdir: str) -> Dict:
    import keras

    from keras_vit.training import train_lib

    shutil.rmtree(workdir, ignore_errors=True)
    metrics = train_lib.train_and_evaluate(config, workdir)
    keras.backend.clear_session()
    return metrics


def _summary(values: List[float]) -> Dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def run(args: argparse.Namespace, argv: Sequence[str] = ()) -> Dict:
    """Runs the experiment; returns what is written to --output."""
    start = time.time()
    folder = args.workdir or tempfile.mkdtemp(prefix="mpp_label_eff_")
    try:
        pretrain = _config("mpp_digits.py")
        if args.pretrain_steps:
            pretrain.trainer.total_steps = args.pretrain_steps
        mpp_dir = os.path.join(folder, "mpp")
        print(f"MPP pre-training, {pretrain.trainer.total_steps} steps ...",
              flush=True)
        pre = _train(pretrain, mpp_dir)
        print(f"  test MPP accuracy {pre['test_mpp_accuracy']:.4f} "
              f"({pre['wall_time_s']:.0f} s)", flush=True)
        results: Dict[str, List[float]] = {"mpp": [], "scratch": []}
        finetune_steps = None
        for seed in range(args.seeds):
            for arm in ("mpp", "scratch"):
                arg = f"labels={args.labels_per_class}"
                if arm == "mpp":
                    arg += f",init={mpp_dir}"
                config = _config("digits_few_labels.py", arg)
                config.seed = seed
                if args.finetune_steps:
                    config.trainer.total_steps = args.finetune_steps
                finetune_steps = config.trainer.total_steps
                metrics = _train(
                    config, os.path.join(folder, f"{arm}_seed{seed}")
                )
                results[arm].append(metrics["test_accuracy"])
                print(f"seed {seed} {arm:7}: test accuracy "
                      f"{metrics['test_accuracy']:.4f} "
                      f"({metrics['wall_time_s']:.0f} s)", flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(folder, ignore_errors=True)
    gains = [m - s for m, s in zip(results["mpp"], results["scratch"])]
    return {
        **results,
        "summary": {
            "mpp": _summary(results["mpp"]),
            "scratch": _summary(results["scratch"]),
            "mpp_minus_scratch": _summary(gains),
            "std": "sample standard deviation over seeds",
        },
        "pretrain": {
            "test_mpp_accuracy": pre["test_mpp_accuracy"],
            "steps": pre["steps"],
            "wall_time_s": pre["wall_time_s"],
        },
        "settings": {
            "labels_per_class": args.labels_per_class,
            "seeds": list(range(args.seeds)),
            "pretrain_config": "configs/mpp_digits.py",
            "finetune_config": "configs/digits_few_labels.py",
            "finetune_steps": finetune_steps,
            "test_examples": 360,
        },
        "command": "python scripts/mpp_label_efficiency.py "
        + " ".join(argv),
        "wall_time_s": time.time() - start,
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    out = run(args, argv)
    atomic_write(args.output, json.dumps(out, indent=2) + "\n")
    summary = out["summary"]
    print(
        f"{args.labels_per_class} labels per class, {args.seeds} seeds: "
        f"MPP {summary['mpp']['mean']:.4f} +- {summary['mpp']['std']:.4f}, "
        f"scratch {summary['scratch']['mean']:.4f} +- "
        f"{summary['scratch']['std']:.4f}; wrote {args.output} "
        f"({out['wall_time_s']:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

r"""AugReg's augmentation and regularisation settings on the digits with
few labels: test accuracy over seeds.

    python scripts/augreg_digits.py
    python scripts/augreg_digits.py --train_examples=200 --seeds=0,1,2 \
        --settings=none,reg,medium2 --output=/tmp/augreg_digits.json

Each run trains configs/digits.py's ViT (4 layers, width 128, 8x8 patches
on 32 x 32 upsampled digits) from scratch on the first `train_examples`
images of the digits' training split (a stratified shuffle: about a tenth
per class) for `steps` updates of batch 64, and scores the 360 test
images. The settings are AugReg's (keras_vit.checkpoint.zoo.augreg.AUGMENTATION:
RandAugment(N, M) as Keras 3's RandAugment, Mixup alpha), with or without
dropout and stochastic depth 0.1 ("reg"). The JSON holds every run and the
mean and standard deviation of each setting; the table is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from keras_vit.configs import _common as common  # noqa: E402
from keras_vit.storage.atomic import atomic_write  # noqa: E402
from keras_vit.training import train_lib  # noqa: E402

OUTPUT = os.path.join(ROOT, "benchmarks", "results", "augreg_digits.json")

# Setting -> (AugReg aug setting, dropout = stochastic depth rate).
SETTINGS = {
    "none": ("none", 0.0),
    "reg": ("none", 0.1),
    "light1": ("light1", 0.0),
    "light2": ("light2", 0.0),
    "medium2": ("medium2", 0.0),
    "strong2": ("strong2", 0.0),
    "medium2+reg": ("medium2", 0.1),
    "strong2+reg": ("strong2", 0.1),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python scripts/augreg_digits.py",
        description="AugReg settings on the digits with few labels.",
    )
    parser.add_argument("--train_examples", type=int, default=200,
                        help="Labelled training images (first N of train).")
    parser.add_argument("--steps", type=int, default=300,
                        help="Optimizer updates per run (batch 64).")
    parser.add_argument("--seeds", default="0,1,2",
                        help="Comma-separated seeds, one run each.")
    parser.add_argument("--settings", default=",".join(SETTINGS),
                        help=f"Comma-separated, of {', '.join(SETTINGS)}.")
    parser.add_argument("--output", default=OUTPUT,
                        help="Where the JSON results go.")
    return parser


def _digits_config():
    path = os.path.join(ROOT, "configs", "digits.py")
    spec = importlib.util.spec_from_file_location("digits_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def run_config(setting: str, seed: int, train_examples: int, steps: int):
    """configs/digits.py with a setting, a seed and fewer labels."""
    aug, rate = SETTINGS[setting]
    c = _digits_config()
    c.seed = seed
    c.input.train_split = f"train[:{train_examples}]"
    c.input.batch_size = 64
    c.trainer.total_steps = steps
    c.schedule.warmup_steps = min(100, steps // 3)
    c.evals.test.every_steps = 0
    c.checkpoints.every_steps = 0
    c.log.every_steps = steps
    c.trainer.steps_per_loop = 50
    common.set_augmentation(c, aug)
    c.model.dropout_rate = rate
    c.model.stochastic_depth_rate = rate
    return c


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    settings = [s for s in args.settings.split(",") if s]
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        print(f"Unknown settings {unknown}; known: {', '.join(SETTINGS)}.",
              file=sys.stderr)
        return 2
    seeds = [int(s) for s in args.seeds.split(",") if s]
    runs: List[Dict] = []
    for setting in settings:
        for seed in seeds:
            config = run_config(setting, seed, args.train_examples,
                                args.steps)
            with tempfile.TemporaryDirectory() as workdir:
                start = time.time()
                metrics = train_lib.train_and_evaluate(config, workdir)
            runs.append(dict(
                setting=setting, seed=seed,
                aug=SETTINGS[setting][0],
                randaug=[config.input.pp.randaug_ops,
                         config.input.pp.randaug_magnitude],
                mixup_alpha=config.input.mix.mixup_alpha,
                dropout=config.model.dropout_rate,
                stochastic_depth=config.model.stochastic_depth_rate,
                test_accuracy=metrics["test_accuracy"],
                test_loss=metrics["test_loss"],
                seconds=round(time.time() - start, 1),
            ))
            print(json.dumps(runs[-1]), flush=True)
    summary = {}
    for setting in settings:
        acc = [r["test_accuracy"] for r in runs if r["setting"] == setting]
        summary[setting] = dict(
            mean=statistics.mean(acc),
            std=statistics.stdev(acc) if len(acc) > 1 else 0.0,
            runs=len(acc),
        )
    result = dict(
        command=" ".join(["python scripts/augreg_digits.py"] + list(
            argv if argv is not None else sys.argv[1:])),
        train_examples=args.train_examples, steps=args.steps, batch=64,
        test_examples=360, seeds=seeds, runs=runs, summary=summary,
    )
    atomic_write(args.output, json.dumps(result, indent=1))
    print("| setting | test accuracy (mean ± std over seeds) |")
    print("|---|---|")
    for setting, s in summary.items():
        print(f"| {setting} | {100 * s['mean']:.1f}% ± "
              f"{100 * s['std']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

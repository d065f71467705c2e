"""Memory per example of a training step, with and without rematerialisation.

    python benchmarks/memory.py --variants B/16,L/16 \
        --image_sizes 224,384 --batch_sizes 2,4 --remat none,block,dots \
        --compare_keras_hub --time B/16@384 \
        --output benchmarks/results/memory_jax_cpu

The step: forward, softmax cross-entropy, backward, global-norm clipping at 1
and an SGD-momentum update (the fine-tuning recipe), one compiled function.

On the JAX backend (the default) the numbers are the XLA compiler's memory
analysis of that function (`jit(...).lower(...).compile().memory_analysis()`):
argument + temporary + output bytes less the outputs that alias donated
arguments, i.e. what the compiled step holds at its peak. It is
deterministic, needs no accelerator, and is what XLA would plan on this
platform (here its CPU compiler; a TPU or GPU compiler fuses differently,
so the figures there differ somewhat). With `--backend tensorflow` each
measurement is the peak resident memory (Linux VmHWM) of a fresh process
that runs the same step under `tf.function(jit_compile=True)`: noisier, and
including the runtime's own footprint, which the slope below removes.

Memory is affine in the batch size: fixed (weights, gradients, optimizer
state, workspace) plus per example (activations, the batch). Two batch sizes
give both; `max batch` is the largest batch whose peak fits 16 GiB (TPU v3
core) and 32 GiB (TPU v4 core). `--time` names the configurations whose
step time is also measured (median of `--steps` steps after one untimed
one, at the first batch size).

keras-hub's ViTBackbone (+ a Dense head on the class token) runs the same
step with `--compare_keras_hub` when keras-hub can be imported.

Every measurement runs in a subprocess of its own (a fresh heap, and the
backend chosen before Keras is imported). Writes NAME.json and NAME.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence

import memory_report as report  # beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 2**30
CAPACITIES = {"16GiB": 16 * GIB, "32GiB": 32 * GIB}


def build_parser() -> argparse.ArgumentParser:
    """argparse.ArgumentParser. The benchmark's options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="tensorflow",
                   choices=("tensorflow", "jax"))
    p.add_argument("--variants", default="B/16",
                   help="comma-separated, e.g. B/16,L/16")
    p.add_argument("--image_sizes", default="384", help="e.g. 224,384")
    p.add_argument("--batch_sizes", default="2,4",
                   help="two batch sizes: the slope between them is the "
                        "memory per example")
    p.add_argument("--remat", default="none,block",
                   help="comma-separated policies of keras_vit (none, "
                        "block, dots)")
    p.add_argument("--dtype", default="float32",
                   choices=("float32", "bfloat16"))
    p.add_argument("--num_classes", type=int, default=1000)
    p.add_argument("--compare_keras_hub", action="store_true")
    p.add_argument("--time", default="",
                   help="VARIANT@SIZE,... whose step time is measured; "
                        "'all' for every configuration")
    p.add_argument("--steps", type=int, default=3,
                   help="timed steps (after one untimed)")
    p.add_argument("--layers", type=int, default=0,
                   help="override the variant's depth (tests)")
    p.add_argument("--hidden_size", type=int, default=0,
                   help="override the width, mlp_dim 4x it (tests)")
    p.add_argument("--output", required=True,
                   help="prefix of NAME.json and NAME.md")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    args.batch_list = [int(b) for b in args.batch_sizes.split(",")]
    if len(args.batch_list) != 2 or args.batch_list[0] >= args.batch_list[1]:
        raise SystemExit("--batch_sizes takes two increasing sizes, e.g. 2,4")
    args.remat_list = [r for r in args.remat.split(",") if r]
    if "none" not in args.remat_list:
        raise SystemExit("--remat must include none (the reference)")
    if args.backend == "tensorflow" and "dots" in args.remat_list:
        raise SystemExit('remat "dots" runs on the JAX backend only: '
                         "drop it from --remat with --backend tensorflow")
    return args


def configurations(args) -> List[Dict[str, Any]]:
    """list of dict. One per (variant, image size, model)."""
    timed = {t for t in args.time.split(",") if t}
    models = [("keras_vit", r) for r in args.remat_list]
    if args.compare_keras_hub:
        models.append(("keras_hub", "none"))
    out = []
    for variant in args.variants.split(","):
        for size in (int(s) for s in args.image_sizes.split(",")):
            for model, remat in models:
                out.append(dict(
                    variant=variant, image_size=size, model=model,
                    remat=remat, dtype=args.dtype,
                    num_classes=args.num_classes, layers=args.layers,
                    hidden_size=args.hidden_size, steps=args.steps,
                    time=model == "keras_vit" and (
                        "all" in timed or f"{variant}@{size}" in timed),
                ))
    return out


def run_child(spec: Dict[str, Any], backend: str) -> Dict[str, Any]:
    """dict. One measurement in a fresh process (memory_child.py)."""
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join(
                   [ROOT, os.environ.get("PYTHONPATH", "")]))
    if backend == "jax":
        env.setdefault("JAX_PLATFORMS", "cpu")
    proc = subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(__file__),
                                      "memory_child.py"), json.dumps(spec)],
        env=env, capture_output=True, text=True,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        tail = (proc.stderr or proc.stdout)[-2000:]
        return {"error": f"exit code {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def measure(config: Dict[str, Any], args) -> Dict[str, Any]:
    """dict. `config` with the peak bytes at each batch size, the fixed and
    per-example bytes, the largest batches and the step time."""
    row = dict(config)
    peaks = []
    for i, batch in enumerate(args.batch_list):
        spec = dict(config, batch_size=batch, backend=args.backend,
                    time=config["time"] and i == 0)
        result = run_child(spec, args.backend)
        if "error" in result:
            row["error"] = result["error"]
            return row
        row[f"batch_{batch}"] = result
        peaks.append(result["peak_bytes"])
        if "step_seconds" in result:
            row["step_seconds"] = result["step_seconds"]
            row["timed_batch"] = batch
        row["params"] = result["params"]
    b1, b2 = args.batch_list
    per_example = (peaks[1] - peaks[0]) / (b2 - b1)
    row["bytes_per_example"] = per_example
    row["fixed_bytes"] = peaks[0] - b1 * per_example
    if args.backend == "jax":
        temps = [row[f"batch_{b}"]["temp_bytes"] for b in args.batch_list]
        row["temp_bytes_per_example"] = (temps[1] - temps[0]) / (b2 - b1)
    for name, capacity in CAPACITIES.items():
        room = capacity - row["fixed_bytes"]
        row[f"max_batch_{name}"] = (
            int(room // per_example) if per_example > 0 and room > 0 else 0
        )
    return row


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Runs every configuration; writes PREFIX.json and PREFIX.md."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    rows = []
    for config in configurations(args):
        row = measure(config, args)
        rows.append(row)
        print(report.progress_line(row), file=sys.stderr, flush=True)
    result = {
        "command": "python benchmarks/memory.py " + " ".join(argv),
        "backend": args.backend,
        "batch_sizes": args.batch_list,
        "rows": rows,
        "machine": report.machine_info(),
    }
    report.add_ratios(result)
    text = report.markdown(result)
    report.atomic_write(args.output + ".json", json.dumps(result, indent=1))
    report.atomic_write(args.output + ".md", text)
    print(text)
    return result


if __name__ == "__main__":
    main()

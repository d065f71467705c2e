"""Memory per example of a training step, with and without rematerialisation.

    python benchmarks/memory.py --variants B/16 --image_sizes 224,384 \
        --batch_sizes 2,4 --remat none,block --compare_keras_hub \
        --time B/16@384 --output benchmarks/results/memory_b16_tf

The step is the trainer's: forward, softmax cross-entropy and backward pass
XLA-compiled (`tf.function(jit_compile=True)`), then global-norm clipping
at 1 and an SGD-momentum update (the fine-tuning recipe).

What is measured is what XLA plans for that compiled step: "Total bytes
used" of the buffer assignment it dumps (arguments, outputs, and the
temporaries packed at their peak by its heap simulator), plus the
optimizer's state. It is deterministic, needs no accelerator and no step to
run. It is XLA's plan on this machine's platform (its CPU compiler); a TPU
or GPU compiler fuses differently, so the figures there differ somewhat.

`--backend jax` measures the same step under KERAS_BACKEND=jax, all of it
one `jax.jit` function with the weights donated, with the compiled step's
memory analysis (`jit(...).lower(...).compile().memory_analysis()`:
argument + temp + output - aliased bytes). There `--remat dots` is
available too. On a CPU the JAX rows with remat keep as much as those
without: the compiled step holds the recomputed matmuls (`dots_compiled`
in the JSON) but its temporaries do not shrink, since nothing ties
`jax.checkpoint`'s recomputation to the backward pass and XLA's CPU
scheduler runs it where it saves nothing. TensorFlow's recompute_grad makes
the recomputation depend on the incoming gradient.

Memory is affine in the batch size: fixed (weights, gradients, optimizer
state, workspace) plus per example (activations, the batch). Two batch sizes
give both; `max batch` is the largest batch whose step fits 16 GiB (a TPU v3
core) and 32 GiB (a TPU v4 core). `--time` names the configurations whose
step time is measured: every policy's step in one process, in turn, for
`--steps` rounds after one untimed step each (load from other processes
hits all alike), at the first batch size; wall and CPU seconds, medians.

keras-hub's ViTBackbone (+ a Dense head on the class token) runs the same
step with `--compare_keras_hub` (keras-hub must be importable).

Each measurement runs in a subprocess of its own (benchmarks/memory_child.py:
the backend is chosen before Keras is imported, and XLA dumps into a fresh
folder). Writes NAME.json and NAME.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Importable as a script (python benchmarks/memory.py) from the repo root.
sys.path.insert(0, ROOT)

import memory_report as report  # noqa: E402  (beside this file)
import throughput_report  # noqa: E402

from keras_vit.remat import REMAT_POLICIES  # noqa: E402

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
                   help="timed rounds (after one untimed step each)")
    p.add_argument("--layers", type=int, default=0,
                   help="override the variant's depth (tests)")
    p.add_argument("--hidden_size", type=int, default=0,
                   help="override the width, mlp_dim 4x it (tests)")
    p.add_argument("--output", required=True,
                   help="prefix of NAME.json and NAME.md")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The arguments; what measures nothing is refused in one line.
    `args.batch_list`, `args.size_list` and `args.remat_list` hold the
    lists."""
    p = build_parser()
    args = p.parse_args(argv)
    throughput_report.at_least(
        p, args, dict(num_classes=1, steps=1, layers=0, hidden_size=0))
    for variant in args.variants.split(","):
        throughput_report.checked_variant(p, "--variants", variant,
                                          plain=True)
    args.size_list = throughput_report.whole_numbers(
        p, "--image_sizes", args.image_sizes)
    args.batch_list = throughput_report.whole_numbers(
        p, "--batch_sizes", args.batch_sizes)
    if len(args.batch_list) != 2 or args.batch_list[0] >= args.batch_list[1]:
        raise SystemExit("--batch_sizes takes two increasing sizes, e.g. 2,4")
    args.remat_list = throughput_report.names_in(
        p, "--remat", args.remat, REMAT_POLICIES)
    if "none" not in args.remat_list:
        raise SystemExit("--remat must include none (the reference)")
    if args.backend == "tensorflow" and "dots" in args.remat_list:
        raise SystemExit('remat "dots" runs on the JAX backend only: '
                         "drop it from --remat with --backend tensorflow")
    args.timed_list = timed(p, args)
    return args


def configurations(args) -> List[Dict[str, Any]]:
    """list of dict. One per (variant, image size, model)."""
    models = [("keras_vit", r) for r in args.remat_list]
    if args.compare_keras_hub:
        models.append(("keras_hub", "none"))
    out = []
    for variant in args.variants.split(","):
        for size in args.size_list:
            for model, remat in models:
                out.append(dict(
                    variant=variant, image_size=size, model=model,
                    remat=remat, dtype=args.dtype, backend=args.backend,
                    num_classes=args.num_classes, layers=args.layers,
                    hidden_size=args.hidden_size,
                ))
    return out


def timed(p: argparse.ArgumentParser, args) -> List[tuple]:
    """list of (variant, image size) of --time, each one of the measured
    configurations (else the parser's usage error)."""
    names = [t.strip() for t in args.time.split(",") if t.strip()]
    variants = args.variants.split(",")
    if "all" in names:
        return [(v, s) for v in variants for s in args.size_list]
    out = []
    for name in names:
        variant, _, size = name.partition("@")
        if variant not in variants or not size.isdigit() or (
                int(size) not in args.size_list):
            p.error(f"--time takes VARIANT@SIZE of --variants and "
                    f"--image_sizes ({','.join(variants)}; "
                    f"{','.join(map(str, args.size_list))}), got {name!r}")
        out.append((variant, int(size)))
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
    per-example bytes and the largest batches."""
    row = dict(config)
    peaks = []
    for batch in args.batch_list:
        result = run_child(dict(config, batch_size=batch), args.backend)
        if "error" in result:
            row["error"] = result["error"]
            return row
        row[f"batch_{batch}"] = result
        peaks.append(result["peak_bytes"])
        row["params"] = result["params"]
    b1, b2 = args.batch_list
    per_example = (peaks[1] - peaks[0]) / (b2 - b1)
    row["bytes_per_example"] = per_example
    row["fixed_bytes"] = peaks[0] - b1 * per_example
    for name, capacity in CAPACITIES.items():
        room = capacity - row["fixed_bytes"]
        row[f"max_batch_{name}"] = (
            int(room // per_example) if per_example > 0 and room > 0 else 0
        )
    return row


def measure_times(rows: List[Dict[str, Any]], args) -> None:
    """Adds the step times of every keras_vit policy, measured side by side
    in one process at the first batch size, to the rows of each timed
    configuration."""
    for variant, size in args.timed_list:
        ours = [r for r in rows if r["model"] == "keras_vit"
                and (r["variant"], r["image_size"]) == (variant, size)]
        if not ours:
            continue
        spec = dict(ours[0], batch_size=args.batch_list[0],
                    policies=args.remat_list, steps=args.steps)
        result = run_child(spec, args.backend)
        for row in ours:
            if "error" in result:
                row["time_error"] = result["error"]
                continue
            row.update(result[row["remat"]], timed_batch=spec["batch_size"])
            print(report.progress_line(row), file=sys.stderr, flush=True)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Runs every configuration; writes PREFIX.json and PREFIX.md."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    rows = []
    for config in configurations(args):
        row = measure(config, args)
        rows.append(row)
        print(report.progress_line(row), file=sys.stderr, flush=True)
    measure_times(rows, args)
    result = {
        "command": "python benchmarks/memory.py " + " ".join(argv),
        "backend": args.backend,
        "batch_sizes": args.batch_list,
        "rows": rows,
        "machine": report.machine_info(),
    }
    report.add_ratios(result)
    text = report.markdown(result)
    throughput_report.write_results(args.output, result, text)
    print(text)
    if all("error" in row for row in rows):  # written, and said by the exit
        raise SystemExit(f"Every configuration failed: see the errors in "
                         f"{args.output}.json")
    return result


if __name__ == "__main__":
    main()

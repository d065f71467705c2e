"""Where a training step spends its time: keras_vit against keras-hub.

    python benchmarks/step_profile.py --variant B/16 --batch_size 8 \
        --steps 2 --output benchmarks/results/step_profile_b16_b8

On the TensorFlow backend (no XLA), for each model (`throughput.py`'s
`build_model`: keras_vit and, where it is installed, keras-hub's
ViTBackbone with a Dense head), the training step of `throughput.py`
(`train_on_batch`, AdamW, the compiled train function) runs `--steps`
times under TensorFlow's profiler, after two untimed steps. The trace's
TensorFlow ops are summed by their self time (an op's time less that of
the ops it called, per thread), grouped

  * by phase: the AdamW update (ops under the optimizer's name scope),
    the backward pass (ops under `gradient_tape/`) and the forward pass
    (the rest);
  * by kind: matmuls (dense layers, batched attention products, their
    gradients), layout (transposes, stacks, slices, concatenations and
    their gradients), and elementwise and reductions (the rest).

The sums are of op time on all threads, so they approximate the CPU time
the step's ops took; the profiler adds a little to each op. The models run
one after another (not interleaved, unlike throughput.py), so compare
shares within a model and ratios of kinds between models rather than
absolute seconds. Writes NAME.json (every op type's time per phase) and
NAME.md for `--output NAME`.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# First: keras_vit holds TensorFlow's start-up notices back while it
# loads Keras (keras_vit.quiet_start).
import keras_vit  # noqa: E402, F401

# isort: split
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
import throughput  # noqa: E402  (beside this file)
import throughput_report  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

OP = re.compile(r"^(?P<name>[^\s#:]+):(?P<type>[A-Z_][A-Za-z0-9_]*)$")
CALLS = ("PartitionedCall", "StatefulPartitionedCall", "While", "If",
         "StatelessIf", "StatelessWhile")
MATMUL = ("MatMul", "BatchMatMul", "Einsum", "Conv2D")
LAYOUT = ("Transpose", "Pack", "Unpack", "Slice", "Concat", "Pad", "Tile",
          "Gather", "Split", "Reshape", "Identity", "Fill", "ZerosLike",
          "Squeeze", "ExpandDims", "BroadcastTo")


def build_parser() -> argparse.ArgumentParser:
    """argparse.ArgumentParser. The script's options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", default="B/16")
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--steps", type=int, default=2,
                   help="profiled training steps per model")
    p.add_argument("--num_classes", type=int, default=1000)
    p.add_argument("--models", default="keras_vit,keras_hub",
                   help="comma-separated: keras_vit, keras_hub")
    throughput.add_size_options(p)
    return p


def kind(op_type: str) -> str:
    """str. "matmul", "layout" or "elementwise" for a TensorFlow op type."""
    if any(m in op_type for m in MATMUL):
        return "matmul"
    if any(m in op_type for m in LAYOUT):
        return "layout"
    return "elementwise"


def phase(op_name: str) -> str:
    """str. "optimizer", "backward" or "forward" for an op's full name."""
    lower = op_name.lower()
    # Keras numbers an optimizer's name scope when the process made another
    # before it (adamw_2/).
    if re.match(r"(adam_?w|optimizer)(_\d+)?/", lower):
        return "optimizer"
    if "gradient_tape" in lower or "gradients/" in lower:
        return "backward"
    return "forward"


def self_times(space: Any) -> Dict[str, Dict[str, float]]:
    """{op type: {phase: seconds}}. The self time of every TensorFlow op
    in an XSpace, summed over threads."""
    out: Dict[str, Dict[str, float]] = collections.defaultdict(
        lambda: collections.defaultdict(float))
    for plane in space.planes:
        names = {k: m.name for k, m in plane.event_metadata.items()}
        for line in plane.lines:
            events = sorted(line.events, key=lambda e: (e.offset_ps,
                                                        -e.duration_ps))
            stack: List[list] = []  # [end_ps, match, child_ps]

            def close(entry):
                end, match, child = entry
                if match and match.group("type") not in CALLS:
                    dur = end - entry_start[id(entry)] - child
                    out[match.group("type")][phase(match.group("name"))] += (
                        max(dur, 0) / 1e12)

            entry_start: Dict[int, int] = {}
            for e in events:
                start, end = e.offset_ps, e.offset_ps + e.duration_ps
                while stack and stack[-1][0] <= start:
                    close(stack.pop())
                match = OP.match(names.get(e.metadata_id, ""))
                if stack:  # the enclosing event spends this time in a child
                    stack[-1][2] += e.duration_ps
                entry = [end, match, 0]
                entry_start[id(entry)] = start
                stack.append(entry)
            while stack:
                close(stack.pop())
    return out


def profile_model(which: str, dims: Dict[str, int], args) -> Dict[str, Any]:
    """dict. One model's op times over `args.steps` profiled steps."""
    model = throughput.build_model(which, dims, args)
    step = throughput.make_step(model, "train", False, args)
    for _ in range(2):
        step()
    logdir = tempfile.mkdtemp(prefix="step_profile_")
    tf.profiler.experimental.start(logdir)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        step()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    tf.profiler.experimental.stop()
    paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"),
                      recursive=True)
    if not paths:
        raise SystemExit(f"The profiler wrote no trace into {logdir}.")
    space = xplane_pb2.XSpace()
    with open(paths[0], "rb") as f:
        space.ParseFromString(f.read())
    ops = self_times(space)
    per_step = {t: {p: s / args.steps for p, s in by.items()}
                for t, by in ops.items()}
    keras.backend.clear_session()
    return {"model": which, "params": model.count_params(),
            "step_wall_s": wall / args.steps, "step_cpu_s": cpu / args.steps,
            "op_seconds_per_step": per_step}


def summary(row: Dict[str, Any]) -> Dict[str, Dict[str, float]]:
    """{phase: {kind: seconds per step}} of a profiled model."""
    out: Dict[str, Dict[str, float]] = collections.defaultdict(
        lambda: collections.defaultdict(float))
    for op_type, by in row["op_seconds_per_step"].items():
        for ph, s in by.items():
            out[ph][kind(op_type)] += s
    return {p: dict(k) for p, k in out.items()}


def report(result: Dict[str, Any]) -> str:
    """str. The markdown report of a run."""
    a = result["args"]
    lines = [f"# Training step profile: ViT {a['variant']}, "
             f"{a['image_size']} x {a['image_size']}, batch "
             f"{a['batch_size']}, float32, TensorFlow, no XLA", "",
             f"`{result['command']}`", "",
             f"Load average (1 min) at start {result['load'][0]:.1f}, at "
             f"end {result['load'][1]:.1f}; {a['steps']} profiled steps per "
             "model; seconds of op self time per step, all threads.", "",
             "| model | phase | matmul | layout | elementwise | total |",
             "|---|---|---|---|---|---|"]
    for row in result["rows"]:
        s = summary(row)
        for ph in ("forward", "backward", "optimizer"):
            k = s.get(ph, {})
            lines.append(
                f"| {row['model']} | {ph} | {k.get('matmul', 0):.3f} | "
                f"{k.get('layout', 0):.3f} | {k.get('elementwise', 0):.3f} "
                f"| {sum(k.values()):.3f} |")
        total = sum(sum(k.values()) for k in s.values())
        lines.append(f"| {row['model']} | **all** | | | | **{total:.3f}** "
                     f"(step: {row['step_wall_s']:.2f} s wall, "
                     f"{row['step_cpu_s']:.2f} s CPU) |")
    lines += ["", "Op types over 1% of a model's op time (seconds per step, "
              "forward / backward / optimizer):", "",
              "| op type | " + " | ".join(r["model"] for r in result["rows"])
              + " |", "|---" * (1 + len(result["rows"])) + "|"]
    totals = [sum(sum(b.values()) for b in r["op_seconds_per_step"].values())
              for r in result["rows"]]
    types = sorted({t for r in result["rows"]
                    for t, b in r["op_seconds_per_step"].items()
                    if sum(b.values()) > 0.01 * totals[
                        result["rows"].index(r)]},
                   key=lambda t: -max(sum(r["op_seconds_per_step"].get(
                       t, {}).values()) for r in result["rows"]))
    for t in types:
        cells = []
        for r in result["rows"]:
            b = r["op_seconds_per_step"].get(t, {})
            cells.append(" / ".join(f"{b.get(p, 0):.3f}" for p in (
                "forward", "backward", "optimizer")))
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The script's arguments, refused with a usage error (one line, exit
    status 2) where they make no profile; `args.models_list` holds the
    models."""
    p = build_parser()
    args = p.parse_args(argv)
    throughput_report.at_least(
        p, args, dict(batch_size=1, steps=1, num_classes=1))
    throughput.check_size_args(p, args)
    args.models_list = throughput_report.names_in(
        p, "--models", args.models, throughput.PROFILED)
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    args.dtype, args.trees = "float32", {}
    dims = throughput.sizes(args)
    models = throughput.profiled_models(args.models_list)
    load = [os.getloadavg()[0]]
    rows = [profile_model(m, dims, args) for m in models]
    load.append(os.getloadavg()[0])
    result = {"args": vars(args), "sizes": dims, "load": load, "rows": rows,
              "command": "python benchmarks/step_profile.py "
              + " ".join(argv if argv is not None else sys.argv[1:])}
    for row in rows:
        row["summary"] = summary(row)
    text = report(result)
    throughput_report.write_results(args.output, result, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

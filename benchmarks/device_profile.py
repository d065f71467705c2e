"""Where a compiled training or inference step spends its device time,
under JAX: keras_vit against keras-hub, on a GPU (or the CPU).

    KERAS_BACKEND=jax python benchmarks/device_profile.py --variant B/16 \
        --image_size 224 --batch_size 128 --dtype bfloat16 \
        --output benchmarks/results/gpu/device_profile_b16_224_b128_bf16

For each model (`throughput.py`'s `build_model`: keras_vit and, where it
is installed, keras-hub's ViTBackbone with a Dense head), Keras's compiled
training step (`train_on_batch`, AdamW, `jit_compile=True`, as
`throughput.py` times it) and, with `--modes train,infer`, its inference
step (`predict_on_batch`) run `--steps` times each under `jax.profiler`,
after `--warmup` untimed steps. Nothing here needs TensorFlow: the trace is read
with `jax.profiler.ProfileData`, and XLA writes the optimized HLO of every
program into a temporary folder (`--xla_dump_to`, set before JAX starts),
from which each traced op gets its opcode, the fused computation it runs
and the `op_name` JAX gave it.

The ops counted are the trace events that name their HLO instruction
(the `hlo_op` and `hlo_module` stats): on a GPU the kernels on the
device's plane, on the CPU the XLA thunks on the host's threads. Their
durations are summed per training step,

  * by phase, from the JAX transformation in the op's name: forward
    (under `jvp(...)`), backward (under `transpose(jvp(...))`), and
    "update and other" (the AdamW update, the loss and metric
    bookkeeping, copies XLA added); an inference step is all forward;
  * by kind: matmul (dot, convolution, cuBLAS and other GEMM calls,
    cuDNN's convolution calls such as the patch embedding's, and fusions
    that contain a dot or convolution), attention (cuDNN's fused
    attention calls), layout (copies and transposes, and fusions that do
    nothing else) and elementwise (every other fusion and op: LayerNorm,
    GELU, softmax, casts, the update's arithmetic, reductions).

On a GPU the kernels of one stream run one after another, so the sum of
their times against the step's wall time says how busy the device was;
on the CPU the thunks run on several threads and the sum is CPU time.
The top `--top` instructions by time are listed with their op names,
and each row has the time of every custom-call target (cuBLAS, cuDNN).

Each (model, mode) is profiled in a fresh child process of this script
(`--one_process`: all in this one, each after the last was cleared): in
one process, what ran after another configuration was cleared has been
measured much slower on a GPU (docs/performance.md, "On a GPU").
Writes NAME.json and NAME.md for `--output NAME`.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

DUMP = ""  # where XLA writes the optimized HLO: set when run as a script
XLA_FLAGS = os.environ.get("XLA_FLAGS")  # as given, for the child processes
if __name__ == "__main__":
    if os.environ.setdefault("KERAS_BACKEND", "jax") != "jax":
        # Said before Keras (and another backend's framework) is imported.
        sys.exit("device_profile.py runs under KERAS_BACKEND=jax (the "
                 f"backend is {os.environ['KERAS_BACKEND']}).")
    # Before JAX starts: XLA reads its flags when the first backend is
    # made. (Only when run: importing this file changes no environment.)
    DUMP = tempfile.mkdtemp(prefix="device_profile_hlo_")
    # Without command buffers (CUDA graphs), which XLA's GPU runtime uses
    # by default: a kernel replayed inside one is traced as the buffer, not
    # as its HLO instruction (the first GPU profile saw 4,945 of 4,975
    # events named `command_buffer_N`).
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " "
                               "--xla_gpu_enable_command_buffer= "
                               f"--xla_dump_to={DUMP} "
                               "--xla_dump_hlo_as_text "
                               "--xla_dump_hlo_module_re=.*(train|predict).*"
                               ).strip()

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import keras  # noqa: E402
import throughput  # noqa: E402  (beside this file)
import throughput_report  # noqa: E402

# `%name = type[shape]{layout} opcode(operands), attrs..., metadata={...}`
INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*.*?\s(?P<opcode>[a-z][\w\-]*)"
    r"\((?P<rest>.*)$")
COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%(?P<name>[\w.\-]+)\s.*\{\s*$")
CALLS = re.compile(r"calls=%(?P<callee>[\w.\-]+)")
TARGET = re.compile(r'custom_call_target="(?P<target>[^"]+)"')
OP_NAME = re.compile(r'op_name="(?P<op_name>[^"]*)"')
MATMUL_OPS = {"dot", "convolution"}
LAYOUT_OPS = {"copy", "transpose", "bitcast", "reshape", "copy-start",
              "copy-done", "parameter", "tuple", "get-tuple-element",
              "constant", "broadcast", "slice", "concatenate",
              "dynamic-slice", "dynamic-update-slice", "pad"}
GEMM_TARGETS = ("gemm", "matmul", "cublas", "__onednn$matmul", "triton_gemm",
                "cudnn$conv")  # __cudnn$convForward, ...BiasActivation...
ATTENTION_TARGETS = ("fmha", "dot_product_attention", "flash")
PHASES = ("forward", "backward", "update and other")
KINDS = ("matmul", "attention", "layout", "elementwise")


def build_parser() -> argparse.ArgumentParser:
    """argparse.ArgumentParser. The script's options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", default="B/16")
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--dtype", choices=("float32", "bfloat16"),
                   default="bfloat16",
                   help="bfloat16: Keras's mixed_bfloat16 policy")
    p.add_argument("--steps", type=int, default=5,
                   help="profiled steps per model and mode")
    p.add_argument("--modes", default="train",
                   help="comma-separated subset of train,infer")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed steps before profiling (the first compiles)")
    p.add_argument("--num_classes", type=int, default=1000)
    p.add_argument("--models", default="keras_vit,keras_hub",
                   help="comma-separated: keras_vit, keras_hub")
    p.add_argument("--top", type=int, default=25,
                   help="instructions listed by time, per model")
    p.add_argument("--one_process", action="store_true",
                   help="profile every model and mode in this process, "
                        "each after the last was cleared (by default each "
                        "runs in a fresh child process)")
    throughput.add_size_options(p)
    return p


# ------------------------------------------------------------------ HLO
def parse_hlo(text: str) -> Dict[str, Dict[str, Any]]:
    """{instruction name: {"opcode", "op_name", "target", "calls",
    "computation"}} of an HLO module's text, plus, for each fusion,
    "inner": the opcodes of the computation it calls (nested calls
    included)."""
    instructions: Dict[str, Dict[str, Any]] = {}
    bodies: Dict[str, set] = collections.defaultdict(set)
    callees: Dict[str, set] = collections.defaultdict(set)
    computation = ""
    for line in text.splitlines():
        head = COMPUTATION.match(line)
        if head and "=" not in line.split("{")[0]:
            computation = head.group("name")
            continue
        m = INSTRUCTION.match(line)
        if not m:
            continue
        rest = m.group("rest")
        calls = CALLS.search(rest)
        target = TARGET.search(rest)
        op_name = OP_NAME.search(rest)
        info = {
            "opcode": m.group("opcode"),
            "op_name": op_name.group("op_name") if op_name else "",
            "target": target.group("target") if target else "",
            "calls": calls.group("callee") if calls else "",
            "computation": computation,
        }
        instructions[m.group("name")] = info
        bodies[computation].add(info["opcode"])
        if info["target"]:
            bodies[computation].add("custom-call:" + info["target"])
        if info["calls"]:
            callees[computation].add(info["calls"])

    def inner(name: str, seen: set) -> set:
        if name in seen:
            return set()
        seen.add(name)
        ops = set(bodies.get(name, ()))
        for callee in callees.get(name, ()):
            ops |= inner(callee, seen)
        return ops

    for info in instructions.values():
        if info["calls"]:
            info["inner"] = sorted(inner(info["calls"], set()))
    return instructions


def kind(info: Optional[Dict[str, Any]], name: str) -> str:
    """str. One of KINDS for an HLO instruction (by its name alone where
    the module's text did not have it)."""
    if info is None:
        lowered = name.lower()
        if any(t in lowered for t in ATTENTION_TARGETS):
            return "attention"
        if any(t in lowered for t in ("gemm", "dot", "convolution", "conv")):
            return "matmul"
        if "copy" in lowered or "transpose" in lowered:
            return "layout"
        return "elementwise"
    ops = {info["opcode"]} | set(info.get("inner", ()))
    targets = " ".join([info["target"]] + [o[len("custom-call:"):]
                       for o in ops if o.startswith("custom-call:")]).lower()
    if any(t in targets for t in ATTENTION_TARGETS):
        return "attention"
    if ops & MATMUL_OPS or any(t in targets for t in GEMM_TARGETS):
        return "matmul"
    plain = {o for o in ops if o != "fusion"}
    if plain and plain <= LAYOUT_OPS:
        return "layout"
    return "elementwise"


def phase(op_name: str) -> str:
    """str. One of PHASES for an op's JAX name."""
    if "transpose(jvp(" in op_name:
        return "backward"
    if "jvp(" in op_name:
        return "forward"
    return "update and other"


def load_modules(folder: str) -> Dict[int, Dict[str, Any]]:
    """{program id: {"name": module name, "hlo": parsed HLO}} of the
    optimized modules XLA dumped (`module_0064.jit_train_step.*`)."""
    modules = {}
    for path in glob.glob(os.path.join(folder, "module_*after_optimizations"
                                               ".txt")):
        m = re.match(r"module_(\d+)\.([^.]+)\.", os.path.basename(path))
        if m:
            with open(path, encoding="utf-8") as f:
                modules[int(m.group(1))] = {"name": m.group(2),
                                            "hlo": parse_hlo(f.read())}
    return modules


def find_instruction(modules: Dict[int, Dict[str, Any]],
                     event: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The HLO instruction a trace event names: in the module of its
    program id, else in the newest dumped module of its module's name."""
    module = modules.get(event["program_id"])
    if module is not None and event["hlo_op"] in module["hlo"]:
        return module["hlo"][event["hlo_op"]]
    for pid in sorted(modules, reverse=True):
        module = modules[pid]
        if (module["name"] == event["hlo_module"]
                and event["hlo_op"] in module["hlo"]):
            return module["hlo"][event["hlo_op"]]
    return None


# ---------------------------------------------------------------- trace
def op_events(path: str) -> List[Dict[str, Any]]:
    """[{"hlo_op", "hlo_module", "program_id", "ns", "plane"}]. The trace's
    events that name an HLO instruction: those of the device planes where
    there are any (a GPU's kernels), else those of the host."""
    data = jax.profiler.ProfileData.from_file(path)
    events: Dict[str, List[Dict[str, Any]]] = collections.defaultdict(list)
    for plane in data.planes:
        for line in plane.lines:
            for ev in line.events:
                stats = dict(ev.stats)
                if "hlo_op" not in stats:
                    continue
                events[plane.name].append({
                    "hlo_op": str(stats["hlo_op"]),
                    "hlo_module": str(stats.get("hlo_module", "")),
                    "program_id": stats.get("program_id"),
                    "ns": float(ev.duration_ns), "plane": plane.name,
                })
    device = [p for p in events if p.startswith("/device:")]
    chosen = device or list(events)
    return [e for p in chosen for e in events[p]]


STEP_MODULE = {"train": "train", "infer": "predict"}  # in Keras's jit names


def profile_model(which: str, dims: Dict[str, int],
                  args: argparse.Namespace, mode: str = "train"
                  ) -> Dict[str, Any]:
    """dict. One model's device time over `args.steps` profiled steps of
    `mode` (train or infer)."""
    model = throughput.build_model(which, dims, args)
    step = throughput.make_step(model, mode, True, args)
    for _ in range(args.warmup):
        step()
    logdir = tempfile.mkdtemp(prefix="device_profile_")
    start = time.perf_counter()
    with jax.profiler.trace(logdir):
        for _ in range(args.steps):
            step()
    wall = time.perf_counter() - start
    paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"),
                      recursive=True)
    if not paths:
        raise SystemExit(f"The profiler wrote no trace into {logdir}.")
    events = [e for e in op_events(paths[0])
              if STEP_MODULE[mode] in e["hlo_module"]]
    shutil.rmtree(logdir, ignore_errors=True)
    if not events:
        raise SystemExit(f"No op of a {mode} step in the trace {paths[0]} "
                         f"(no event named its HLO module "
                         f"*{STEP_MODULE[mode]}*).")
    modules = load_modules(DUMP)
    by_op: Dict[str, Dict[str, Any]] = {}
    unmatched = 0
    for e in events:
        row = by_op.get(e["hlo_op"])
        if row is None:  # an instruction's first event: look it up once
            info = find_instruction(modules, e)
            row = by_op[e["hlo_op"]] = {
                "hlo_op": e["hlo_op"], "seconds": 0.0, "count": 0,
                "kind": kind(info, e["hlo_op"]),
                # An inference step is all forward pass.
                "phase": (phase(info["op_name"] if info else "")
                          if mode == "train" else "forward"),
                "op_name": info["op_name"] if info else "",
                "opcode": info["opcode"] if info else "",
                "target": info["target"] if info else "",
                "matched": info is not None,
            }
        unmatched += not row["matched"]
        row["seconds"] += e["ns"] / 1e9 / args.steps
        row["count"] += 1
    table = {p: {k: 0.0 for k in KINDS} for p in PHASES}
    targets: Dict[str, float] = {}
    for row in by_op.values():
        table[row["phase"]][row["kind"]] += row["seconds"]
        if row["target"]:
            targets[row["target"]] = (targets.get(row["target"], 0.0)
                                      + row["seconds"])
    top = sorted(by_op.values(), key=lambda r: -r["seconds"])[:args.top]
    keras.backend.clear_session()
    return {
        "model": which, "mode": mode, "params": model.count_params(),
        "step_wall_s": wall / args.steps,
        "op_seconds_per_step": sum(r["seconds"] for r in by_op.values()),
        "planes": sorted({e["plane"] for e in events}),
        "events": len(events), "events_unmatched": unmatched,
        "seconds_per_step": table, "custom_call_seconds": targets,
        "top": top,
    }


# --------------------------------------------------------------- report
def report(result: Dict[str, Any]) -> str:
    """str. The markdown report of a run."""
    a, m = result["args"], result["machine"]
    lines = [
        f"# Device profile: ViT {a['variant']} {result['sizes']}", "",
        f"`{result['command']}`", "",
        f"- Machine: {m.get('device_kind', m['cpu'])}; jax {m.get('jax')}, "
        f"keras {m['keras']}.",
        f"- Image {a['image_size']}, batch {a['batch_size']}, {a['dtype']}, "
        f"{a['steps']} profiled steps per model and mode; times per step.",
        "- " + ("All in one process, each after the last was cleared."
                if a.get("one_process", True) else
                "Each model and mode in a fresh process."),
        *[f"- {n}" for n in result.get("notes", [])],
        "",
        "| model | mode | step ms (wall) | op ms | phase | matmul | "
        "attention | layout | elementwise |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        for ph in PHASES:
            t = row["seconds_per_step"][ph]
            if row.get("mode") == "infer" and not any(t.values()):
                continue  # inference has no backward phase
            lines.append(
                f"| {row['model']} | {row.get('mode', 'train')} | "
                f"{1e3 * row['step_wall_s']:.2f} | "
                f"{1e3 * row['op_seconds_per_step']:.2f} | {ph} | "
                + " | ".join(f"{1e3 * t[k]:.2f}" for k in KINDS) + " |")
    for row in result["rows"]:
        lines += ["", f"## {row['model']} ({row.get('mode', 'train')}): the "
                  f"{len(row['top'])} instructions that took longest", "",
                  "| ms per step | calls | kind | phase | instruction | "
                  "op name |", "|---|---|---|---|---|---|"]
        steps = a["steps"]
        for r in row["top"]:
            lines.append(
                f"| {1e3 * r['seconds']:.3f} | {r['count'] // steps} | "
                f"{r['kind']} | {r['phase']} | `{r['hlo_op']}` | "
                f"`{r['op_name'][-90:]}` |")
        if row["events_unmatched"]:
            lines.append(f"\n{row['events_unmatched']} of {row['events']} "
                         "events named an instruction missing from the "
                         "dumped HLO (classified by name).")
    return "\n".join(lines) + "\n"


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The script's arguments, refused with a usage error (one line, exit
    status 2) where they make no profile; `args.models_list` and
    `args.modes_list` hold the names."""
    p = build_parser()
    args = p.parse_args(argv)
    throughput_report.at_least(
        p, args, dict(batch_size=1, steps=1, warmup=0, num_classes=1, top=1))
    throughput.check_size_args(p, args)
    args.models_list = throughput_report.names_in(
        p, "--models", args.models, throughput.PROFILED)
    args.modes_list = throughput_report.names_in(
        p, "--modes", args.modes, tuple(STEP_MODULE))
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if keras.backend.backend() != "jax":
        raise SystemExit("device_profile.py runs under KERAS_BACKEND=jax "
                         f"(the backend is {keras.backend.backend()}).")
    if not hasattr(jax.profiler, "ProfileData"):
        raise SystemExit(f"device_profile.py reads the trace with "
                         f"jax.profiler.ProfileData, which jax "
                         f"{jax.__version__} lacks: pip install -U jax.")
    if not DUMP:
        raise SystemExit("device_profile.py is a script: run it as "
                         "`python benchmarks/device_profile.py ...`, so that "
                         "XLA's HLO dump is set up before JAX starts.")
    args.trees = {}
    dims = throughput.sizes(args)
    if args.dtype == "bfloat16":
        keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    models = throughput.profiled_models(args.models_list)
    modes = args.modes_list
    argv = list(sys.argv[1:] if argv is None else argv)
    pairs = [(m, mode) for mode in modes for m in models]
    notes: List[str] = []
    if len(pairs) > 1 and not args.one_process:
        rows, machine = profile_in_children(argv, pairs, notes)
    else:
        rows = [profile_model(m, dims, args, mode) for m, mode in pairs]
        machine = throughput.machine_info()
    result = {
        "args": vars(args), "sizes": dims, "rows": rows, "notes": notes,
        "machine": machine,
        "command": "python benchmarks/device_profile.py " + " ".join(argv),
    }
    text = report(result)
    throughput_report.write_results(args.output, result, text)
    print(text)
    return 1 if notes else 0


def profile_in_children(argv: Sequence[str], pairs: Sequence[tuple],
                        notes: List[str]) -> tuple:
    """([row], machine). Each (model, mode) of `pairs` profiled by this
    script in a fresh child process (with XLA's flags as this process was
    given them: each child sets up its own HLO dump); a child that fails
    is left out, said in `notes`. This process touches no device."""
    rows: List[Dict[str, Any]] = []
    machine: Optional[Dict[str, Any]] = None
    for model, mode in pairs:
        part = throughput.run_script(
            __file__, [*argv, "--models", model, "--modes", mode],
            env={"XLA_FLAGS": XLA_FLAGS})
        if "error" in part:
            notes.append(f"{model} {mode}: its process failed "
                         f"({part['error']})")
            print(notes[-1], file=sys.stderr)
            continue
        rows += part["rows"]
        machine = machine or part["machine"]
    if not rows:
        raise SystemExit("No profile was made: " + "; ".join(notes))
    return rows, machine


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:  # the HLO dump is scratch, however the run ends
        shutil.rmtree(DUMP, ignore_errors=True)

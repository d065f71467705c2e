r"""Fills the results blocks of the documentation from the stored results.

    python scripts/results_tables.py          # rewrite the blocks
    python scripts/results_tables.py --check  # exit 1 if one is stale

README.md, benchmarks/README.md and docs/*.md quote measured figures only
inside blocks

    <!-- results: NAME -->
    ...generated...
    <!-- /results -->

whose content this script renders from the JSON (or markdown) files that
the named benchmark and script commands wrote into benchmarks/results/ and
docs/results/; each block names its files and commands. A target counts as
met only on the median of every run listed for it. Standard library only
(no TensorFlow): the files are read, nothing is measured here.
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import re
import statistics
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = "benchmarks/results"
BLOCK = re.compile(
    r"(<!-- results: ([\w-]+) -->\n)(.*?)(<!-- /results -->)", re.S)
MIB, GIB = 2**20, 2**30


def documents() -> List[str]:
    """[str]. The markdown files (relative to the root) that may hold
    results blocks."""
    docs = sorted(os.path.relpath(p, ROOT)
                  for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return ["README.md", "benchmarks/README.md"] + docs


def load(path: str) -> dict:
    """dict. A stored result, by its path relative to the root."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return json.load(f)


def bench(name: str) -> dict:
    return load(f"{BENCH}/{name}.json")


def source(*paths: str, command: Optional[str] = None) -> str:
    """str. The line that names a block's files and command."""
    files = ", ".join(f"`{p}`" for p in paths)
    made = f", written by `{command}`" if command else ""
    return f"\n\n(Generated from {files}{made}.)\n"


def pct(x: float, digits: int = 0) -> str:
    return f"{100 * x:.{digits}f}%"


def signed_pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def ratio(x: Optional[float]) -> str:
    return f"{x:.2f}x" if x else ""


# ------------------------------------------------------------- throughput
def throughput_files() -> List[str]:
    """[str]. Names of the stored throughput.py runs, sorted."""
    names = []
    for path in sorted(glob.glob(os.path.join(ROOT, BENCH, "*.json"))):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if "ceiling" in data and "rows" in data:
            names.append(os.path.basename(path)[:-5])
    return names


def keras_vit_row(data: dict, mode: str, xla: bool,
                  backend: str = "tensorflow") -> Optional[dict]:
    for row in data["rows"]:
        if (row["model"], row["mode"], row["xla"], row.get(
                "backend", "tensorflow")) == ("keras_vit", mode, xla,
                                              backend):
            return row
    return None


def _load_range(machine: dict) -> str:
    loads = [machine[k][0] for k in ("load_average", "load_average_end")
             if machine.get(k)]
    return f"{min(loads):.1f}-{max(loads):.1f}" if loads else ""


def _mfu(value: Optional[float]) -> str:
    """The MFU, or n/a where it exceeds 100%: a ceiling measured low."""
    if value is None:
        return ""
    return pct(value) if value <= 1.0 else "n/a"


def throughput_runs() -> str:
    lines = [
        "| run (`benchmarks/results/`) | variant, image, batch, dtype | "
        "repeats | load | backend | mode | XLA | keras_vit img/s | MFU | "
        "vs keras-hub (wall / CPU time) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in throughput_files():
        data = bench(name)
        a = data["args"]
        for row in data["rows"]:
            if row["model"] != "keras_vit":
                continue
            hub = ""
            if row.get("vs_keras_hub"):
                hub = (f"{ratio(row['vs_keras_hub'])} / "
                       f"{ratio(row.get('vs_keras_hub_cpu'))}")
            lines.append(
                f"| `{name}` | {a['variant']}, {a['image_size']}, "
                f"{a['batch_size']}, {a['dtype']} | {a['repeats']} | "
                f"{_load_range(data['machine'])} | "
                f"{row.get('backend', 'tensorflow')} | {row['mode']} | "
                f"{'on' if row['xla'] else 'off'} | "
                f"{row['images_per_s']:.2f} | {_mfu(row['mfu'])} | {hub} |")
    lines.append(
        "\n\"n/a\": the matmul ceiling of that run was read while other work "
        "shared the cores, lower than the model's own matmuls reached, so "
        "no MFU is stated (the ratios to keras-hub, timed interleaved in "
        "the same process, stand).")
    return "\n".join(lines) + source(f"{BENCH}/*.json",
                                     command="python benchmarks/"
                                     "throughput.py ...")


def flop_count() -> str:
    lines = ["| model, 224 x 224 | keras_vit classifier (GFLOP) | "
             "every token in the last block (GFLOP) | fewer |",
             "|---|---|---|---|"]
    used = []
    for name in ("b16_224_b8_fp32_hm", "ti16_224_b32_fp32_infer_hm"):
        data = bench(name)
        ours = data["forward_flops_per_image"]
        full = data["forward_flops_per_image_all_tokens"]
        lines.append(f"| {data['args']['variant']} | {ours / 1e9:.2f} | "
                     f"{full / 1e9:.2f} | {pct(1 - ours / full, 1)} |")
        used.append(f"{BENCH}/{name}.json")
    return "\n".join(lines) + source(*used)


# ---------------------------------------------------------------- targets
class Target:
    """A target met on the median of the runs listed for it."""

    def __init__(self, what: str, runs: Sequence[str], value: Callable,
                 want: float, fmt: Callable, at_least: bool = True):
        self.what, self.runs, self.value = what, list(runs), value
        self.want, self.fmt, self.at_least = want, fmt, at_least

    def row(self) -> str:
        values = [self.value(bench(r)) for r in self.runs]
        median = statistics.median(values)
        met = median >= self.want if self.at_least else median <= self.want
        each = ", ".join(f"{self.fmt(v)} (`{r}`)"
                         for v, r in zip(values, self.runs))
        return (f"| {self.what} | {each} | **{self.fmt(median)}** | "
                f"{'met' if met else 'not met'} |")


def _field(mode: str, field: str, xla: bool = False,
           backend: str = "tensorflow") -> Callable:
    return lambda data: keras_vit_row(data, mode, xla, backend)[field]


B16_INFER = ("b16_224_b8_fp32_hm", "b16_224_b8_fp32_hm2")
B16_TRAIN = ("b16_224_b8_fp32_train_hm9", "b16_224_b8_fp32_train_hm9b",
             "b16_224_b8_fp32_hm2", "b16_224_b8_fp32_hm")
# B/16 training of the current model (one attention path, the model
# class) against keras-hub, each run interleaved in one process.
B16_TRAIN_CURRENT = ("model_class_before_after_b16_b8_train",
                     "train_lead_b16_b8_fp32", "train_lead_b16_b8_fp32_b")
TI16_INFER = ("ti16_224_b32_fp32_infer_hm", "ti16_224_b32_fp32_infer_hm2",
              "ti16_224_b32_fp32_infer_hm3")
# Ti/16 inference of the current model on the JAX backend (XLA), against
# keras-hub on JAX, each run interleaved in one process.
TI16_JAX_INFER = ("ti16_224_b32_fp32_jax_infer_a",
                  "ti16_224_b32_fp32_jax_infer_b",
                  "ti16_224_b32_fp32_jax_infer_c")
TI16_JAX_INFER_B8 = tuple(n.replace("_b32_", "_b8_") for n in TI16_JAX_INFER)


def _loop_total(spl: int) -> Callable:
    def value(data: dict) -> float:
        row = [r for r in data["rows"] if r["steps_per_loop"] == spl][0]
        return row["total_overhead"]
    return value


def _memory(variant: str, size: int, remat: str, field: str) -> Callable:
    def value(data: dict) -> float:
        return [r for r in data["rows"] if r["model"] == "keras_vit"
                and r["variant"] == variant and r["image_size"] == size
                and r["remat"] == remat][0][field]
    return value


def targets() -> List[Target]:
    x = ratio
    return [
        Target("B/16, 224, batch 8, inference, no XLA: >= 1.0x keras-hub",
               B16_INFER, _field("infer", "vs_keras_hub"), 1.0, x),
        Target("B/16 inference, no XLA: >= 85% of the measured matmul "
               "ceiling (MFU)", B16_INFER, _field("infer", "mfu"), 0.85, pct),
        Target("B/16, 224, batch 8, training, no XLA: >= 1.1x keras-hub",
               B16_TRAIN, _field("train", "vs_keras_hub"), 1.1, x),
        Target("B/16, 224, batch 8, training, no XLA, the current model: "
               ">= 1.15x keras-hub", B16_TRAIN_CURRENT,
               _field("train", "vs_keras_hub"), 1.15, x),
        Target("Ti/16, 224, batch 32, inference, no XLA: >= 1.3x keras-hub",
               TI16_INFER, _field("infer", "vs_keras_hub"), 1.3, x),
        Target("Ti/16, 224, batch 32, inference, JAX backend, the current "
               "model: >= 1.2x keras-hub", TI16_JAX_INFER,
               _field("infer", "vs_keras_hub", True, "jax"), 1.2, x),
        Target("Ti/16, 224, batch 8, inference, JAX backend, the current "
               "model: >= 1.2x keras-hub", TI16_JAX_INFER_B8,
               _field("infer", "vs_keras_hub", True, "jax"), 1.2, x),
        Target("training loop over the bare compiled step, steps_per_loop "
               "10: < 5%", ["loop_overhead_digits"], _loop_total(10), 0.05,
               signed_pct, at_least=False),
        Target("training loop over the bare compiled step, steps_per_loop "
               "50: < 5%", ["loop_overhead_digits"], _loop_total(50), 0.05,
               signed_pct, at_least=False),
        Target("B/16, 384: block remat keeps >= 3x less memory per example",
               ["memory_tf"], _memory("B/16", 384, "block",
                                      "bytes_per_example_saving"), 3.0, x),
        Target("B/16, 384: block remat costs <= 1.4x the CPU time per step",
               ["memory_tf"], _memory("B/16", 384, "block",
                                      "step_cpu_seconds_ratio"), 1.4, x,
               at_least=False),
        Target("B/16, 384, no remat: memory per example <= 1.0x keras-hub's",
               ["memory_tf"], _memory("B/16", 384, "none", "vs_keras_hub"),
               1.0, x, at_least=False),
    ]


GPU_TARGET = "B/16 bfloat16 training MFU >= 50% on a GPU (JAX)"


def gpu_b16_train_mfu(data: dict) -> float:
    return keras_vit_row(data, "train", True, "jax")["mfu"]


def targets_table() -> str:
    lines = ["| target (2-core CPU, float32) | every run (file in "
             "`benchmarks/results/`) | median | |", "|---|---|---|---|"]
    lines += [t.row() for t in targets()]
    runs = [f"{GPU}/{n}" for n in gpu_files() if n.startswith("b16_224")
            and keras_vit_row(bench(f"{GPU}/{n}"), "train", True, "jax")]
    if runs:
        lines.append(Target(GPU_TARGET, runs, gpu_b16_train_mfu, 0.5,
                            pct).row())
    else:
        lines.append(f"| {GPU_TARGET} | no run | | not measured |")
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------- GPU
GPU = "gpu"  # benchmarks/results/gpu: what benchmarks/accelerator.sh wrote
GPU_COMMAND = "bash benchmarks/accelerator.sh"
NO_GPU_RUN = (
    "No GPU run has been made yet: `benchmarks/results/gpu/` holds no "
    "results. The one command that makes them, on a machine with JAX and "
    "an NVIDIA GPU (TensorFlow and network access not needed), from the "
    "repository root: `bash benchmarks/accelerator_wheels.sh` where pip "
    "reaches the package index (it downloads Keras, keras-hub and "
    "ml-collections into `.whl/`), then `bash benchmarks/accelerator.sh` "
    "on the GPU machine; its JSON files go into `benchmarks/results/gpu/` "
    "and `python scripts/results_tables.py` fills this section.\n")


def gpu_files() -> List[str]:
    """[str]. Names of the stored accelerator.sh runs, sorted."""
    return sorted(os.path.basename(p)[:-5] for p in glob.glob(
        os.path.join(ROOT, BENCH, GPU, "*.json")))


RUN_SUFFIX = re.compile(r"_run\d+$")  # b16_224_b128_bf16_run2: a rerun


def gpu_groups() -> Dict[str, List[str]]:
    """{configuration: [run name]}. The stored runs grouped by what they
    measured: a rerun is stored as NAME_runN beside the first run, NAME."""
    groups: Dict[str, List[str]] = {}
    for name in gpu_files():
        groups.setdefault(RUN_SUFFIX.sub("", name), []).append(name)
    return groups


def gpu_runs() -> List[Tuple[List[str], List[dict]]]:
    """[(run names, their results)]. Each configuration's stored runs,
    read once, grouped as `gpu_groups` groups them."""
    return [(names, [bench(f"{GPU}/{n}") for n in names])
            for names in gpu_groups().values()]


def _mib(value: Optional[float]) -> str:
    return "" if value is None else f"{value / MIB:.1f}"


def _median(values: Sequence[Optional[float]]) -> Optional[float]:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _median_of(rows: Sequence[dict], field: str) -> Optional[float]:
    return _median([r.get(field) for r in rows])


def _rows_by_model(runs: Sequence[dict]) -> Dict[tuple, List[dict]]:
    """{(mode, model): [row of each run that has it]}, in the first run's
    order (a run cut short by its deadline lacks its last rows)."""
    rows: Dict[tuple, List[dict]] = {}
    for run in runs:
        for row in run["rows"]:
            rows.setdefault((row["mode"], row["model"]), []).append(row)
    return rows


def _group_median(rows: Dict[tuple, List[dict]], mode: str, model: str,
                  field: str) -> Optional[float]:
    """The median of `field` over the runs' rows of one mode and model."""
    return _median_of(rows.get((mode, model), []), field)


def gpu_throughput() -> str:
    groups = gpu_runs()
    if not groups:
        return NO_GPU_RUN
    lines = ["| runs (`benchmarks/results/gpu/`) | variant, image, batch | "
             "mode | model | img/s, median | img/s of each run | MFU | "
             "vs keras-hub | XLA temporaries MiB / image | device peak "
             "MiB / image |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    machines, notes = [], []
    for names, runs in groups:
        a = runs[0]["args"]
        for (mode, model), rows in _rows_by_model(runs).items():
            speeds = [r["images_per_s"] for r in rows]
            lines.append(
                f"| {', '.join(f'`{n}`' for n in names)} | {a['variant']}, "
                f"{a['image_size']}, {a['batch_size']} | {mode} | {model} | "
                f"{statistics.median(speeds):.1f} | "
                f"{', '.join(f'{v:.1f}' for v in speeds)} | "
                f"{_mfu(_median_of(rows, 'mfu'))} | "
                f"{ratio(_median_of(rows, 'vs_keras_hub'))} | "
                f"{_mib(_median_of(rows, 'xla_temp_bytes_per_example'))} | "
                f"{_mib(_median_of(rows, 'device_peak_bytes_per_example'))} |")
        for name, data in zip(names, runs):
            m = data["machine"]
            ceiling = data["ceiling"][a["dtype"]]["flops_per_s"]
            machines.append(
                f"`{name}`: {m.get('device_kind', m['cpu'])}, jax "
                f"{m.get('jax')}, keras {m['keras']}, keras-hub "
                f"{data.get('keras_hub')}; {a['dtype']} matmul ceiling "
                f"{ceiling / 1e12:.0f} TFLOP/s ({a['matmul_size']}^3).")
            notes += [f"- `{name}`: {n}" for n in data["notes"]]
    return "\n".join(lines + [""] + [f"- {m}" for m in machines]
                     + notes) + source(
        f"{BENCH}/{GPU}/*.json", command=GPU_COMMAND)


def gpu_summary() -> str:
    """str. What the GPU runs say, configuration by configuration: the
    ratios to keras-hub, the training step's temporaries against
    keras-hub's and the training MFU, each the median of every run."""
    groups = gpu_runs()
    if not groups:
        return ("No GPU run has been made yet (see "
                "[On a GPU](#on-a-gpu) for the command).\n")
    speed, memory, mfu = [], [], []
    for _, runs in groups:
        a = runs[0]["args"]
        rows = _rows_by_model(runs)
        what = f"{a['variant']} at {a['image_size']}, batch {a['batch_size']}"
        train, infer = (_group_median(rows, mode, "keras_vit", "vs_keras_hub")
                        for mode in ("train", "infer"))
        speed.append(f"{what}: {ratio(train)} / {ratio(infer)}")
        ours, hub = (_group_median(rows, "train", m,
                                   "xla_temp_bytes_per_example")
                     for m in ("keras_vit", "keras_hub"))
        if ours and hub:
            memory.append(f"{what}: {_mib(ours)} against {_mib(hub)} MiB "
                          f"({pct(1 - ours / hub)} less)")
        ours, hub = (_group_median(rows, "train", m, "mfu")
                     for m in ("keras_vit", "keras_hub"))
        mfu.append(f"{what}: {_mfu(ours)} / {_mfu(hub)}")
    lines = [
        "- keras_vit over keras-hub, training / inference: "
        + "; ".join(speed) + ".",
        "- XLA's temporaries of the training step per image, keras_vit "
        "against keras-hub: " + "; ".join(memory) + ".",
        "- Training MFU (of the bfloat16 matmul ceiling measured in the same "
        "process), keras_vit / keras-hub: " + "; ".join(mfu) + ".",
    ]
    return "\n".join(lines) + source(f"{BENCH}/{GPU}/*.json",
                                      command=GPU_COMMAND)


def _cudnn_verdict(flash: dict) -> str:
    """str. What JAX said when asked for cuDNN's attention, per query
    shape (every token, class token) and mode, where the run asked."""
    said = flash.get("jax_cudnn")
    if not said:
        return "not asked"
    out = []
    for which in ("all_tokens", "class_token"):
        modes = said.get(which) or {}
        out.append(", ".join(
            f"{mode} {'yes' if v['accepted'] else 'no'}"
            for mode, v in modes.items()))
    return " / ".join(out)


def gpu_attention() -> str:
    rows, used = [], []
    for names, runs in gpu_runs():
        a = runs[0]["args"]
        by_model = _rows_by_model(runs)
        # Keras's flags, and JAX's answer from the first run that asked.
        flashes = [run.get("flash_attention_usable") or {} for run in runs]
        flash = next((f for f in flashes if f.get("jax_cudnn")), flashes[0])
        for (mode, model), dpa in by_model.items():
            ours = by_model.get((mode, "keras_vit"), [])
            if model != "keras_vit_dpa" or not ours:
                continue
            speeds = [r["vs_keras_vit"] for r in dpa]
            median = statistics.median(speeds)
            temp = [_median([x.get("xla_temp_bytes_per_example")
                             for x in rows_]) for rows_ in (ours, dpa)]
            rows.append(
                f"| {a['variant']}, {a['image_size']}, {a['batch_size']} | "
                f"{mode} | **{median:.3f}** "
                f"({', '.join(f'{v:.3f}' for v in speeds)}) | "
                f"{'yes' if median > 1.03 else 'no'} | "
                f"{_mib(temp[0])} / {_mib(temp[1])} | "
                f"{flash.get('all_tokens')} / {flash.get('class_token')} | "
                f"{_cudnn_verdict(flash)} |")
            used += [n for n in names if n not in used]
    if not rows:
        return ("No GPU run has been made yet (see "
                "[On a GPU](#on-a-gpu) for the command).\n")
    head = ["| model, image, batch | mode | `dot_product_attention` speed "
            "over the one path, median (each run) | faster by more than "
            "3% | XLA temporaries MiB / image, one path / "
            "`dot_product_attention` | cuDNN attention per Keras's check "
            "(every token / class token) | JAX's own answer, asked for "
            "cuDNN (every token / class token) |",
            "|---|---|---|---|---|---|---|"]
    return "\n".join(head + rows) + source(
        *(f"{BENCH}/{GPU}/{n}.json" for n in used), command=GPU_COMMAND)


# ------------------------------------------------- other benchmark tables
def _md_table(path: str) -> str:
    """str. The first table of a stored markdown report."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[start:end])


def loop_overhead() -> str:
    data = bench("loop_overhead_digits")
    return _md_table(f"{BENCH}/loop_overhead_digits.md") + source(
        f"{BENCH}/loop_overhead_digits.json", command=data["command"])


def memory(name: str) -> Callable[[], str]:
    def render() -> str:
        data = bench(name)
        m = data["machine"]
        lines = ["| model | image | remat | MiB / example | saving | "
                 "fixed GiB | max batch 16 / 32 GiB | CPU s / step "
                 "(batch 2) |", "|---|---|---|---|---|---|---|---|"]
        for r in data["rows"]:
            saving = ratio(r.get("bytes_per_example_saving"))
            if "vs_keras_hub" in r:
                saving = f"{ratio(r['vs_keras_hub'])} of keras-hub's"
            cpu = r.get("step_cpu_seconds")
            times = f"{cpu:.2f}" if cpu else ""
            if r.get("step_cpu_seconds_ratio"):
                times += f" ({ratio(r['step_cpu_seconds_ratio'])})"
            lines.append(
                f"| {r['model']} {r['variant']} | {r['image_size']} | "
                f"{r['remat']} | {r['bytes_per_example'] / MIB:.1f} | "
                f"{saving} | {r['fixed_bytes'] / GIB:.2f} | "
                f"{r['max_batch_16GiB']} / {r['max_batch_32GiB']} | "
                f"{times} |")
        lines.append(f"\n{m['cpu']}, {m['cores']} cores, load "
                     f"{m['load_average'][0]:.1f}; backend "
                     f"{data['backend']}.")
        return "\n".join(lines) + source(f"{BENCH}/{name}.json",
                                         command=data["command"])
    return render


MULTIWORKER_MEASURES = {
    "wait_to_exit_s": "a worker left alone (connect_timeout_s 10): wait "
                      "start to exit",
    "sigterm_to_exit_s": "SIGTERM while waiting: to exit",
    "worker0_sigterm_to_exit_s": "SIGTERM while training: worker 0 exits "
                                 "after (checkpoint included)",
    "worker1_sigterm_to_exit_s": "SIGTERM while training: worker 1 exits "
                                 "after",
    "survivor_exit_after_kill_s": "the other worker exits after",
    "worker0_final_to_exit_s": "complete run: worker 0 exits after its "
                               "final metrics",
    "worker1_final_to_exit_s": "complete run: worker 1 exits after its "
                               "final metrics",
}


def multiworker_exit() -> str:
    data = bench("multiworker_exit")
    lines = ["| scenario | seconds | every run | median |",
             "|---|---|---|---|"]
    for scenario, runs in data["results"].items():
        for measure in runs[0]:
            values = [r[measure] for r in runs]
            what = MULTIWORKER_MEASURES.get(measure, measure)
            if scenario.startswith("killed_worker"):
                what = f"`kill -9` of worker {scenario[-1]}: {what}"
            lines.append(
                f"| `{scenario}` | {what} | "
                f"{', '.join(f'{v:.1f}' for v in values)} | "
                f"**{statistics.median(values):.1f}** |")
    command = "python benchmarks/multiworker_exit.py --repeats {} " \
              "--output {}/multiworker_exit".format(data["args"]["repeats"],
                                                     BENCH)
    return "\n".join(lines) + source(f"{BENCH}/multiworker_exit.json",
                                     command=command)


# ------------------------------------------------------ script results
AUGREG_SETTINGS = {
    "none": ("-", "-", "0"), "reg": ("-", "-", "0.1"),
    "light1": ("(2, 0)", "-", "0"), "light2": ("(2, 10)", "0.2", "0"),
    "medium2": ("(2, 15)", "0.5", "0"), "strong2": ("(2, 20)", "0.8", "0"),
    "medium2+reg": ("(2, 15)", "0.5", "0.1"),
    "strong2+reg": ("(2, 20)", "0.8", "0.1"),
}


def augreg_digits() -> str:
    short, long = bench("augreg_digits"), bench("augreg_digits_1200")
    lines = [f"| setting | RandAugment (N, M) | Mixup | dropout, stochastic "
             f"depth | {short['steps']} steps | {long['steps']} steps |",
             "|---|---|---|---|---|---|"]

    def cell(data, name):
        s = data["summary"].get(name)
        return f"{pct(s['mean'], 1)} ± {100 * s['std']:.1f}" if s else ""

    for name, (ra, mix, reg) in AUGREG_SETTINGS.items():
        lines.append(f"| {name} | {ra} | {mix} | {reg} | "
                     f"{cell(short, name)} | {cell(long, name)} |")
    return "\n".join(lines) + (
        f"\n\n({len(short['seeds'])} seeds, {short['train_examples']} "
        f"training and {short['test_examples']} test images, batch "
        f"{short['batch']}; mean ± standard deviation over the seeds.)\n"
    ) + source(f"{BENCH}/augreg_digits.json",
               f"{BENCH}/augreg_digits_1200.json") + (
        f"Commands: `{short['command']}` and `{long['command']}`.\n")


MPP_FILES = ("mpp_label_efficiency_n10", "mpp_label_efficiency_n10_600steps",
             "mpp_label_efficiency_n50")


def mpp_label_efficiency() -> str:
    lines = ["| labels per class | fine-tuning steps | MPP | scratch | "
             "MPP - scratch (points) | MPP pre-training accuracy | "
             "wall time | command |", "|---|---|---|---|---|---|---|---|"]
    for name in MPP_FILES:
        d = load(f"docs/results/{name}.json")
        s, st = d["summary"], d["settings"]

        def ms(key, scale=100):
            return (f"{scale * s[key]['mean']:.1f} ± "
                    f"{scale * s[key]['std']:.1f}")

        lines.append(
            f"| {st['labels_per_class']} | {st['finetune_steps']} | "
            f"{ms('mpp')}% | {ms('scratch')}% | {ms('mpp_minus_scratch')}"
            f" | {d['pretrain']['test_mpp_accuracy']:.3f} | "
            f"{d['wall_time_s']:.0f} s | `{d['command']}` |")
    return "\n".join(lines) + source(
        *(f"docs/results/{n}.json" for n in MPP_FILES))


def litert_agreement() -> str:
    d = bench("litert_agreement_digits")
    lines = ["| file | size | largest probability difference from Keras | "
             "top-1 agreement with float32 | test accuracy |",
             "|---|---|---|---|---|"]
    for kind in ("float32", "float16", "int8"):
        r = d[kind]
        agree = "-" if kind == "float32" else pct(
            r["top1_agreement_with_float32"])
        lines.append(f"| {kind} | {r['bytes']:,} B | "
                     f"{r['max_abs_probability_diff_vs_keras']:.1e} | "
                     f"{agree} | {pct(r['accuracy'], 1)} |")
    lines.append(f"\nKeras: {pct(d['keras_accuracy'], 1)} on the "
                 f"{d['test_images']} test images.")
    return "\n".join(lines) + source(
        f"{BENCH}/litert_agreement_digits.json",
        command=f"python scripts/litert_agreement.py --workdir={d['workdir']}")


QUICKSTART_ENVS = {
    "layered": "run as written in a new virtual environment that already "
               "had the requirements (its `pip install` installed only this "
               "checkout)",
    "fresh": "run as written in a new virtual environment, every "
             "requirement installed from the package index",
    "current": "in an environment where the package was installed (the "
               "`pip install` left out)",
}


def quickstart() -> str:
    d = load("docs/results/quickstart.json")
    m = d["machine"]
    load_1min = m["load_average"][0]
    shared = (", shared with other work" if load_1min > m["cores"] else "")
    return (
        f"Measured: {pct(d['test_accuracy'], 1)} test accuracy on the "
        f"{d['test_examples']} held-out digits after {d['train_steps']} "
        f"steps. The training command took {d['train_command_s']:.0f} s "
        f"(its training loop with the final evaluation "
        f"{d['train_loop_s']:.0f} s) and the whole line {d['total_s']:.0f} "
        f"s, {QUICKSTART_ENVS[d['env']]}, on a {m['cores']}-core "
        f"{m['cpu']} (load average {load_1min:.1f} at the end{shared}; "
        f"`{d['command']}`, `docs/results/quickstart.json`).\n")


POSEMB_PAIRS = (
    ("keras_vit_timm_way_vs_timm", "keras_vit (timm's way) vs timm"),
    ("keras_vit_transformers_way_vs_transformers",
     "keras_vit (transformers' way) vs transformers"),
    ("official_vs_timm", "official bilinear vs timm"),
    ("official_vs_transformers", "official bilinear vs transformers"),
    ("timm_vs_transformers", "timm vs transformers"))


def _small(x: float) -> str:
    """A relative difference: a percentage, or float32 rounding as such."""
    return f"{x:.1e}" if x < 1e-3 else pct(x, 1)


def posemb_resize() -> str:
    """How keras_vit's position-embedding resizing of hub weights (the
    library's own way) and the official one (bilinear, corners aligned)
    differ from timm's and transformers' (bicubic)."""
    d = load("docs/results/posemb_resize.json")
    lines = ["| B/16 sin-cos table (width 768), resized | "
             + " | ".join(label for _, label in POSEMB_PAIRS) + " |",
             "|---" * (1 + len(POSEMB_PAIRS)) + "|"]
    for resize, pairs in d["sincos2d_B16_tables"].items():
        grids = [int(g.split("x")[0]) for g in resize.split("->")]
        lines.append(f"| {resize.replace('->', ' -> ')} ({grids[0] * 16} "
                     f"-> {grids[1] * 16} px) | " + " | ".join(
                         _small(pairs[key]["rms_relative"])
                         for key, _ in POSEMB_PAIRS) + " |")
    lines += ["\n(Difference relative to the table's RMS.)\n",
              "| test model, stored size -> run at | reference | largest "
              "logit difference (of the largest logit) | top-1 agreement "
              "| the same with the official bilinear resize |",
              "|---|---|---|---|---|"]
    libraries = {"timm_vit": "timm", "hf_vit_classifier": "transformers"}
    for key, r in d["fixture_model_logits"].items():
        model, sizes = key.split(" ", 1)
        shown = sizes.replace('->', ' -> ').replace('px', ' px')
        lines.append(
            f"| `{model}`, {shown} | "
            f"{libraries.get(model, model)} | "
            f"{_small(r['max_abs_logit_difference_relative'])} | "
            f"{pct(r['top1_agreement'])} of {r['images']} images | "
            f"{_small(r['official_resize_max_abs_logit_difference_relative'])}"
            " |")
    v = d["versions"]
    versions = ", ".join(f"{k} {v[k]}" for k in sorted(v))
    return "\n".join(lines) + (f"\n\n(Random test models of "
                               f"`tests/fixtures/hub/`; {versions}.)") + \
        source("docs/results/posemb_resize.json",
               command="python scripts/posemb_resize_comparison.py")


def _assigned(path: str, name: str):
    """The literal value assigned to `name` at the top of a Python file
    (read, not imported)."""
    tree = ast.parse(_text(path))
    for node in tree.body:
        targets = getattr(node, "targets", None) or [getattr(node, "target",
                                                             None)]
        if any(getattr(t, "id", None) == name for t in targets):
            return ast.literal_eval(node.value)
    raise KeyError(f"{path} assigns no {name}")


def _text(path: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def variants() -> str:
    """The variant table: sizes and the parameter counts that the tests
    assert against the built models."""
    order = _assigned("keras_vit/architecture.py", "VARIANTS")
    counts = dict(_assigned("tests/test_model.py", "GOLDEN"))
    counts.update(_assigned("tests/test_resnet.py", "HYBRID_PARAMS"))
    sizes = _assigned("tests/test_model.py", "SIZES")
    lines = ["| variant | layers | width | MLP | heads | parameters |",
             "|---|---|---|---|---|---|"]
    for variant in order:
        width, depth, mlp, heads = sizes[variant.split("+")[-1].split("/")[0]]
        lines.append(f"| {variant} | {depth} | {width} | {mlp} | {heads} | "
                     f"{counts[variant]:,} |")
    return "\n".join(lines) + (
        "\n\n(Generated from `keras_vit/architecture.py` and the counts that "
        "`python -m pytest tests/test_model.py tests/test_resnet.py` "
        "asserts against the built models.)\n")


# The model as a class carrying its architecture, against the functional
# model before it (commit 8f653dc), interleaved with keras-hub.
CLASS_RUNS = ("model_class_before_after_b16_b8_train",
              "model_class_before_after_b16_b8_infer")
CLASS_NAMES = (("keras_vit_before", "before (8f653dc)"),
               ("keras_vit", "after"), ("keras_hub", "keras-hub"))


def model_class_before_after() -> str:
    lines = ["| mode | model | img/s, each repeat | img/s (median) | "
             "CPU s per image (median) | vs keras-hub (wall / CPU time) |",
             "|---|---|---|---|---|---|"]
    gains = []
    for name in CLASS_RUNS:
        data = bench(name)
        rows = {r["model"]: r for r in data["rows"]}
        mode = data["args"]["mode"]
        for model, label in CLASS_NAMES:
            r = rows[model]
            each = ", ".join(f"{v:.2f}" for v in r["images_per_s_all"])
            hub = (f"{ratio(r['vs_keras_hub'])} / "
                   f"{ratio(r['vs_keras_hub_cpu'])}"
                   if r.get("vs_keras_hub") else "")
            lines.append(f"| {mode} | {label} | {each} | "
                         f"**{r['images_per_s']:.2f}** | "
                         f"{r['cpu_s_per_image']:.2f} | {hub} |")
        after, before = rows["keras_vit"], rows["keras_vit_before"]
        speed = after["images_per_s"] / before["images_per_s"] - 1
        cpu = after["cpu_s_per_image"] / before["cpu_s_per_image"] - 1
        gains.append(
            f"{mode}, after against before: img/s {signed_pct(speed)}, CPU "
            f"time per image {signed_pct(cpu)}; load average "
            f"{_load_range(data['machine'])}, "
            f"{data['args']['repeats']} repeats of "
            f"{after['steps_per_repeat']} step(s)")
    return ("\n".join(lines) + "\n\n" + "; ".join(gains) + "."
            + source(*(f"{BENCH}/{n}.json" for n in CLASS_RUNS)))


PROFILE_RUN = "step_profile_b16_b8"
PHASES = ("forward", "backward", "optimizer")
KINDS = ("matmul", "layout", "elementwise")


def step_profile() -> str:
    """Op self time of one training step by phase and kind, per model."""
    data = bench(PROFILE_RUN)
    lines = ["| model | phase | matmul | layout | elementwise | share of the "
             "model's op time |", "|---|---|---|---|---|---|"]
    matmul = {}
    for row in data["rows"]:
        s = row["summary"]
        total = sum(sum(k.values()) for k in s.values())
        for ph in PHASES:
            k = s.get(ph, {})
            cells = " | ".join(f"{k.get(n, 0):.2f}" for n in KINDS)
            lines.append(f"| {row['model']} | {ph} | {cells} | "
                         f"{pct(sum(k.values()) / total)} |")
        matmul[row["model"]] = row
    out = "\n".join(lines) + "\n"
    if {"keras_vit", "keras_hub"} <= set(matmul):
        def op(model, *types):
            times = matmul[model]["op_seconds_per_step"]
            return sum(sum(times.get(t, {}).values()) for t in types)
        mm = ("MatMul", "_FusedMatMul", "BatchMatMulV2", "Einsum")
        bmm = "BatchMatMulV2"
        out += (f"\nMatmul op time, keras-hub over keras_vit: "
                f"{ratio(op('keras_hub', *mm) / op('keras_vit', *mm))}; "
                f"batched matmuls alone (`{bmm}`): "
                f"{ratio(op('keras_hub', bmm) / op('keras_vit', bmm))}. "
                f"Load average {data['load'][0]:.1f} at the start, "
                f"{data['load'][1]:.1f} at the end; {data['args']['steps']} "
                "profiled steps per model.\n")
    return out + source(f"{BENCH}/{PROFILE_RUN}.json",
                        command=data["command"])


RENDERERS: Dict[str, Callable[[], str]] = {
    "step-profile": step_profile,
    "model-class-before-after": model_class_before_after,
    "variants": variants,
    "throughput-runs": throughput_runs,
    "flop-count": flop_count,
    "targets": targets_table,
    "gpu-throughput": gpu_throughput,
    "gpu-attention": gpu_attention,
    "gpu-summary": gpu_summary,
    "loop-overhead": loop_overhead,
    "memory-tf": memory("memory_tf"),
    "memory-jax": memory("memory_jax"),
    "multiworker-exit": multiworker_exit,
    "augreg-digits": augreg_digits,
    "mpp-label-efficiency": mpp_label_efficiency,
    "litert-agreement": litert_agreement,
    "quickstart": quickstart,
    "posemb-resize": posemb_resize,
}


# ------------------------------------------------------------------ files
def fill(text: str, doc: str = "?") -> str:
    """str. The text with every results block rendered afresh."""
    def replace(match: re.Match) -> str:
        name = match.group(2)
        if name not in RENDERERS:
            raise KeyError(f"{doc}: unknown results block {name!r} "
                           f"(known: {', '.join(sorted(RENDERERS))})")
        body = RENDERERS[name]()
        return match.group(1) + body.rstrip("\n") + "\n" + match.group(4)

    return BLOCK.sub(replace, text)


def blocks(text: str) -> List[str]:
    """[str]. The names of a text's results blocks, in order."""
    return [m.group(2) for m in BLOCK.finditer(text)]


def stale() -> List[Tuple[str, str]]:
    """[(document, new text)] for each document whose blocks differ."""
    out = []
    for doc in documents():
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        new = fill(text, doc)
        if new != text:
            out.append((doc, new))
    return out


def build_parser() -> argparse.ArgumentParser:
    """argparse.ArgumentParser. The script's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="Exit with status 1 if a block is not current.")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    changed = stale()
    if args.check:
        for doc, _ in changed:
            print(f"{doc} is stale: run python scripts/results_tables.py",
                  file=sys.stderr)
        return 1 if changed else 0
    for doc, text in changed:
        path = os.path.join(ROOT, doc)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
        print(f"Wrote {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

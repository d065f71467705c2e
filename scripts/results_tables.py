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


def shown_command(command: str, folder: Optional[str]) -> str:
    """A stored command as the repository runs it: `--output /abs/NAME`
    (wherever the measuring machine wrote it) as `--output FOLDER/NAME`,
    the folder the result is stored in."""
    if not folder:
        return command
    return re.sub(r"(--output[ =])/\S*/([^/\s]+)",
                  lambda m: f"{m.group(1)}{folder}/{m.group(2)}", command)


def shown_note(note: str) -> str:
    """A stored note with the measuring machine's absolute paths as the
    last name in them (a folder relative to the repository root)."""
    return re.sub(r"(?<![\w.:/=-])/(?:[\w.-]+/)+([\w.-]+)", r"\1", note)


def source(*paths: str, command: Optional[str] = None) -> str:
    """str. The line that names a block's files and command."""
    if command:
        folder = os.path.dirname(paths[0]) if paths else None
        command = shown_command(command, folder)
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


def _mfu(value: Optional[float], low_ceiling: bool = False) -> str:
    """The MFU, or n/a where it exceeds 100% or another row of the run
    shows its ceiling measured low (`low_ceiling`)."""
    if value is None:
        return ""
    return pct(value) if value <= 1.0 and not low_ceiling else "n/a"


def _low_ceilings(data: dict) -> set:
    """The backends of a run whose matmul ceiling some row (of any model)
    exceeded: measured low, so no row of theirs states an MFU."""
    return {row.get("backend", "tensorflow") for row in data["rows"]
            if (row.get("mfu") or 0) > 1.0}


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
        low = _low_ceilings(data)
        for row in data["rows"]:
            if row["model"] != "keras_vit":
                continue
            hub = ""
            if row.get("vs_keras_hub"):
                hub = (f"{ratio(row['vs_keras_hub'])} / "
                       f"{ratio(row.get('vs_keras_hub_cpu'))}")
            lines.append(
                f"| `{name}` | {a['variant']}, {a['image_size']}, "
                f"{a['batch_size']}, {a['dtype']} | {len(row['seconds'])} | "
                f"{_load_range(data['machine'])} | "
                f"{row.get('backend', 'tensorflow')} | {row['mode']} | "
                f"{'on' if row['xla'] else 'off'} | "
                f"{row['images_per_s']:.2f} | "
                f"{_mfu(row['mfu'], row.get('backend', 'tensorflow') in low)}"
                f" | {hub} |")
    lines.append(
        "\n\"n/a\": the matmul ceiling of that run (and backend) was read "
        "while other work shared the cores, lower than a model's own "
        "matmuls reached, so no MFU is stated (the ratios to keras-hub, "
        "timed interleaved in the same process, stand).")
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
    """A target met on the median of the runs listed for it. `cpu`: the
    same measure per second of CPU time (a ratio to keras-hub), shown
    beside each run's and the median's; the target is judged on `value`.
    `earlier`: every run listed measured an earlier version of the model
    (three attention paths), which the status says."""

    def __init__(self, what: str, runs: Sequence[str], value: Callable,
                 want: float, fmt: Callable, at_least: bool = True,
                 cpu: Optional[Callable] = None, earlier: bool = False):
        self.what, self.runs, self.value = what, list(runs), value
        self.want, self.fmt, self.at_least = want, fmt, at_least
        self.cpu, self.earlier = cpu, earlier

    def _cells(self) -> Tuple[List[str], str, bool]:
        """([each run's cell], the median's cell, met)."""
        data = [bench(r) for r in self.runs]
        values = [self.value(d) for d in data]
        median = statistics.median(values)
        met = median >= self.want if self.at_least else median <= self.want
        shown = [self.fmt(v) for v in values]
        total = f"**{self.fmt(median)}**"
        if self.cpu is not None:
            cpu = [self.cpu(d) for d in data]
            shown = [f"{s} / {self.fmt(c)}" for s, c in zip(shown, cpu)]
            total += f" / {self.fmt(statistics.median(cpu))}"
        return shown, total, met

    def row(self) -> str:
        shown, total, met = self._cells()
        each = ", ".join(f"{s} (`{r}`)" for s, r in zip(shown, self.runs))
        status = "met" if met else "not met"
        if self.earlier:
            status += " (earlier model)"
        return f"| {self.what} | {each} | {total} | {status} |"


def _field(mode: str, field: str, xla: bool = False,
           backend: str = "tensorflow") -> Callable:
    return lambda data: keras_vit_row(data, mode, xla, backend)[field]


def _hub_ratio(mode: str, xla: bool = False,
               backend: str = "tensorflow") -> dict:
    """The keyword arguments of a ratio-to-keras-hub target: the wall-time
    ratio it is judged on and the CPU-time ratio shown beside it."""
    return {"value": _field(mode, "vs_keras_hub", xla, backend),
            "cpu": _field(mode, "vs_keras_hub_cpu", xla, backend)}


B16_INFER = ("b16_224_b8_fp32_hm", "b16_224_b8_fp32_hm2")
B16_TRAIN = ("b16_224_b8_fp32_train_hm9", "b16_224_b8_fp32_train_hm9b",
             "b16_224_b8_fp32_hm2", "b16_224_b8_fp32_hm")
# B/16 training of the current model (one attention path, the model
# class) against keras-hub, each run interleaved in one process.
B16_TRAIN_CURRENT = ("model_class_before_after_b16_b8_train",
                     "layout_before_after_b16_b8",
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
               B16_INFER, want=1.0, fmt=x, earlier=True,
               **_hub_ratio("infer")),
        Target("B/16 inference, no XLA: >= 85% of the measured matmul "
               "ceiling (MFU)", B16_INFER, _field("infer", "mfu"), 0.85, pct,
               earlier=True),
        Target("B/16, 224, batch 8, training, no XLA: >= 1.1x keras-hub",
               B16_TRAIN, want=1.1, fmt=x, earlier=True,
               **_hub_ratio("train")),
        Target("B/16, 224, batch 8, training, no XLA, the current model: "
               ">= 1.15x keras-hub", B16_TRAIN_CURRENT, want=1.15, fmt=x,
               **_hub_ratio("train")),
        Target("Ti/16, 224, batch 32, inference, no XLA: >= 1.3x keras-hub",
               TI16_INFER, want=1.3, fmt=x, earlier=True,
               **_hub_ratio("infer")),
        Target("Ti/16, 224, batch 32, inference, JAX backend, the current "
               "model: >= 1.2x keras-hub", TI16_JAX_INFER, want=1.2, fmt=x,
               **_hub_ratio("infer", True, "jax")),
        Target("Ti/16, 224, batch 8, inference, JAX backend, the current "
               "model: >= 1.2x keras-hub", TI16_JAX_INFER_B8, want=1.2,
               fmt=x, **_hub_ratio("infer", True, "jax")),
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
NO_GPU_SECTION = ("No GPU run has been made yet (see "
                  "[On a GPU](#on-a-gpu) for the command).\n")
# Dense bfloat16 FLOP/s of a device's data sheet, by JAX's device kind:
# the H100 SXM part (80 GB HBM3) and the H200 SXM part (which JAX names
# plainly "NVIDIA H200"; its matrix rate is the H100 SXM's).
SPEC_FLOPS = {"NVIDIA H100 80GB HBM3": 989e12, "NVIDIA H200": 989e12}
FUSED, ONE_PATH = "cuDNN fused", "one path"
# How keras_vit attended in the stored runs that predate the runs'
# `keras_vit_attention` and the rows' `cudnn_attention` records: the runs
# of the library with cuDNN's fused
# attention are stored as fused_*, every other one ran the one path; the
# `before` tree of fused_b16_224_b128_bf16 (--compare_tree) is the commit
# before the fused attention, and onepath_dpa_* timed the candidate that
# pads the tokens for cuDNN (the earlier runs' candidate was Keras's
# `dot_product_attention`, which JAX refused cuDNN for in training).
FUSED_PREFIX = "fused_"  # see benchmarks/results/gpu/README.md
STORED_TREES = {"before": ONE_PATH}
PADDED_DPA_PREFIX = "onepath_dpa_"
ORDINALS = {1: "1st", 2: "2nd", 3: "3rd"}
OWN_PROCESS = "own process"


def gpu_files() -> List[str]:
    """[str]. Names of every stored result of benchmarks/results/gpu,
    sorted, whatever script wrote it (see `gpu_kind`)."""
    return sorted(os.path.basename(p)[:-5] for p in glob.glob(
        os.path.join(ROOT, BENCH, GPU, "*.json")))


def gpu_kind(data: dict) -> str:
    """str. Which script wrote a stored GPU result: "throughput"
    (throughput.py), "attention_kernels", "device_profile" or "other"."""
    rows = data.get("rows") or []
    if "ceiling" in data and "rows" in data:
        return "throughput"
    if rows and "candidate" in rows[0]:
        return "attention_kernels"
    if rows and "seconds_per_step" in rows[0]:
        return "device_profile"
    return "other"


def gpu_results(kind: str) -> List[Tuple[str, dict]]:
    """[(name, result)]. The stored GPU results of one kind, by name."""
    out = []
    for name in gpu_files():
        data = bench(f"{GPU}/{name}")
        if gpu_kind(data) == kind:
            out.append((name, data))
    return out


def attention_of(name: str, row: dict) -> str:
    """str. Which attention a row of a stored throughput run timed: from
    the cuDNN fused-attention calls in its compiled step where the row
    records them, else from the stored run's name (FUSED_PREFIX, ...)."""
    model, calls = row["model"], row.get("cudnn_attention")
    candidate = model == "keras_vit_dpa"
    if calls is not None:
        if any(calls.values()):
            return FUSED + (" (candidate)" if candidate else "")
        if candidate:
            return "XLA (candidate)"
        return "no cuDNN attention" if model == "keras_hub" else ONE_PATH
    if candidate:
        return ("cuDNN fused, padded (candidate)"
                if name.startswith(PADDED_DPA_PREFIX) else
                "Keras `dot_product_attention` (candidate)")
    if model == "keras_hub":
        return "keras-hub's"
    if model in STORED_TREES:
        return STORED_TREES[model]
    return FUSED if name.startswith(FUSED_PREFIX) else ONE_PATH


def library_of(name: str, data: dict) -> str:
    """str. Which attention the library took in a stored throughput run by
    its own rule: FUSED where it tried cuDNN's fused attention, else
    ONE_PATH. From the run's `keras_vit_attention` where it records it,
    else from its name (FUSED_PREFIX)."""
    said = data.get("keras_vit_attention")
    if said is not None:
        return FUSED if said == "fused" else ONE_PATH
    return FUSED if name.startswith(FUSED_PREFIX) else ONE_PATH


def place(data: dict, mode: str) -> str:
    """str. Where a mode's configuration ran in its run's process: first,
    second, ... (what ran after another configuration was cleared was
    measured much slower on a GPU), or in its own process
    (--process_per_config)."""
    if data["args"].get("process_per_config"):
        return OWN_PROCESS
    seen = list(dict.fromkeys((r["mode"], r["xla"]) for r in data["rows"]))
    n = 1 + [m for m, _ in seen].index(mode)
    return ORDINALS.get(n, f"{n}th")


def first_in_process(data: dict, mode: str) -> bool:
    return place(data, mode) in (ORDINALS[1], OWN_PROCESS)


def _spec(data: dict) -> Optional[float]:
    return SPEC_FLOPS.get(data["machine"].get("device_kind", ""))


def _mfus(row: dict, data: dict) -> str:
    """"a% / b%": the MFU against the run's measured matmul ceiling and
    against the device's data-sheet figure (blank where unknown)."""
    spec = _spec(data)
    of_spec = pct(row["model_flops_per_s"] / spec) if spec else ""
    return f"{_mfu(row.get('mfu'))} / {of_spec}"


RUN_SUFFIX = re.compile(r"_run\d+$")  # b16_224_b128_bf16_run2: a rerun


def gpu_groups() -> Dict[Tuple[str, str], List[str]]:
    """{(configuration, the library's attention): [run name]}. The stored
    throughput runs grouped by what they measured: a rerun is stored as
    NAME_runN beside the first run, NAME, and joins it where the library
    took the same attention (`library_of`). Files of the other scripts are
    left out."""
    groups: Dict[Tuple[str, str], List[str]] = {}
    for name, data in gpu_results("throughput"):
        key = (RUN_SUFFIX.sub("", name), library_of(name, data))
        groups.setdefault(key, []).append(name)
    return dict(sorted(groups.items(), key=lambda kv: (
        kv[0][1] != ONE_PATH, kv[0][0])))


def gpu_runs() -> List[Tuple[List[str], List[dict]]]:
    """[(run names, their results)]. Each configuration's stored runs,
    read once, grouped as `gpu_groups` groups them (the one path's first,
    then the fused attention's)."""
    return [(names, [bench(f"{GPU}/{n}") for n in names])
            for names in gpu_groups().values()]


def gpu_row(data: dict, mode: str, model: str = "keras_vit"
            ) -> Optional[dict]:
    for row in data["rows"]:
        if (row["mode"], row["model"]) == (mode, model):
            return row
    return None


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


def _what(a: dict) -> str:
    return f"{a['variant']}, {a['image_size']}, {a['batch_size']}"


def gpu_throughput() -> str:
    groups = gpu_runs()
    if not groups:
        return NO_GPU_RUN
    lines = ["| runs (`benchmarks/results/gpu/`) | variant, image, batch | "
             "mode | place in its process | model | attention | img/s, "
             "median | img/s of each run | MFU (measured ceiling / data "
             "sheet) | vs keras-hub (wall / CPU time) | XLA temporaries "
             "MiB / image | device peak MiB / image |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    machines, notes = [], []
    for names, runs in groups:
        a = runs[0]["args"]
        spec = _spec(runs[0])
        for (mode, model), rows in _rows_by_model(runs).items():
            speeds = [r["images_per_s"] for r in rows]
            of_spec = (pct(_median_of(rows, "model_flops_per_s") / spec)
                       if spec else "")
            hub = ""
            if _median_of(rows, "vs_keras_hub"):
                hub = (f"{ratio(_median_of(rows, 'vs_keras_hub'))} / "
                       f"{ratio(_median_of(rows, 'vs_keras_hub_cpu'))}")
            lines.append(
                f"| {', '.join(f'`{n}`' for n in names)} | {_what(a)} | "
                f"{mode} | {place(runs[0], mode)} | {model} | "
                f"{attention_of(names[0], rows[0])} | "
                f"{statistics.median(speeds):.1f} | "
                f"{', '.join(f'{v:.1f}' for v in speeds)} | "
                f"{_mfu(_median_of(rows, 'mfu'))} / {of_spec} | {hub} | "
                f"{_mib(_median_of(rows, 'xla_temp_bytes_per_example'))} | "
                f"{_mib(_median_of(rows, 'device_peak_bytes_per_example'))} |")
        for name, data in zip(names, runs):
            m = data["machine"]
            ceiling = data["ceiling"][a["dtype"]]
            machines.append(
                f"`{name}`: {m.get('device_kind', m['cpu'])}, jax "
                f"{m.get('jax')}, keras {m['keras']}"
                + (f", keras-hub {data['keras_hub']}"
                   if data.get("keras_hub") else " (no keras-hub row)")
                + f"; {a['dtype']} matmul ceiling "
                f"{ceiling['flops_per_s'] / 1e12:.0f} TFLOP/s "
                f"({ceiling.get('size', data['args']['matmul_size'])}^3).")
            notes += [f"- `{name}`: {shown_note(n)}" for n in data["notes"]]
    spec = ", ".join(f"{v / 1e12:.0f} TFLOP/s for the {k}"
                     for k, v in SPEC_FLOPS.items())
    return "\n".join(lines + [
        "", "\"Place in its process\": the configurations of one run "
        "(its modes) are measured one after the other in one process, "
        "unless the run gave each its own (`--process_per_config`). MFU "
        "against the bfloat16 matmul ceiling measured in the same run, and "
        f"against the device's dense bfloat16 data-sheet figure ({spec}).",
        ""] + [f"- {m}" for m in machines] + notes) + source(
        f"{BENCH}/{GPU}/*.json", command=GPU_COMMAND)


# The runs that the summary's before/after lines read.
FUSED_B16 = "fused_b16_224_b128_bf16"
FUSED_L16, ONEPATH_L16 = "fused_l16_224_b64_bf16", "l16_224_b64_bf16"
PADDED_DPA = "onepath_dpa_b16_224_b128_bf16_train"


def _gpu_bench(name: str) -> Optional[dict]:
    path = os.path.join(ROOT, BENCH, GPU, name + ".json")
    return bench(f"{GPU}/{name}") if os.path.exists(path) else None


def _speed(row: dict, data: dict) -> str:
    return f"{row['images_per_s']:.0f} img/s ({_mfus(row, data)} MFU)"


def gpu_summary() -> str:
    """str. What the GPU runs say about the fused attention, training:
    B/16 before and after in one process, L/16 after against the one
    path's run, the padded candidate that preceded it; and each training
    configuration's temporaries against keras-hub's (the median of its
    runs)."""
    if not gpu_files():
        return NO_GPU_SECTION
    lines, used = [], []
    data = _gpu_bench(FUSED_B16)
    if data:
        ours, before, hub = (gpu_row(data, "train", m)
                             for m in ("keras_vit", "before", "keras_hub"))
        lines.append(
            f"- B/16, 224, batch 128, training, the three models interleaved "
            f"in one process (`{FUSED_B16}`): keras_vit with the fused "
            f"attention {_speed(ours, data)}, the commit before it (one "
            f"path) {_speed(before, data)}, keras-hub {_speed(hub, data)}: "
            f"{ratio(ours['images_per_s'] / before['images_per_s'])} over "
            f"the one path, {ratio(ours['vs_keras_hub'])} over keras-hub "
            f"({ratio(ours['vs_keras_hub_cpu'])} in CPU time).")
        used.append(FUSED_B16)
    after, earlier = _gpu_bench(FUSED_L16), _gpu_bench(ONEPATH_L16)
    if after and earlier:
        ours, hub = (gpu_row(after, "train", m)
                     for m in ("keras_vit", "keras_hub"))
        old = gpu_row(earlier, "train")
        repeats = len(ours["seconds"])
        lines.append(
            f"- L/16, 224, batch 64, training: keras_vit with the fused "
            f"attention {_speed(ours, after)} against keras-hub "
            f"{_speed(hub, after)}, {ratio(ours['vs_keras_hub'])} "
            f"(`{FUSED_L16}`, {repeats} repeat{'s' * (repeats != 1)} "
            f"before its deadline); the "
            f"one path, in an earlier run (`{ONEPATH_L16}`): "
            f"{_speed(old, earlier)}, {ratio(old['vs_keras_hub'])} over "
            f"keras-hub.")
        used += [FUSED_L16, ONEPATH_L16]
    data = _gpu_bench(PADDED_DPA)
    if data:
        ours, dpa = (gpu_row(data, "train", m)
                     for m in ("keras_vit", "keras_vit_dpa"))
        lines.append(
            f"- Before the library took it, the same fused attention as a "
            f"benchmark candidate (`{PADDED_DPA}`, the tokens padded for "
            f"cuDNN's training kernel): {_speed(dpa, data)} against the "
            f"one path's {_speed(ours, data)}, "
            f"{ratio(dpa['vs_keras_vit'])}.")
        used.append(PADDED_DPA)
    memory: Dict[str, str] = {}  # the first group of each configuration
    for names, runs in gpu_runs():
        rows = _rows_by_model(runs)
        ours, hub = (_group_median(rows, "train", m,
                                   "xla_temp_bytes_per_example")
                     for m in ("keras_vit", "keras_hub"))
        what = (f"{_what(runs[0]['args'])} "
                f"({attention_of(names[0], rows[('train', 'keras_vit')][0])})"
                if ours else "")
        if ours and hub and what not in memory:
            memory[what] = (f"{what}: {_mib(ours)} against {_mib(hub)} MiB "
                            f"({pct(1 - ours / hub)} less)")
            used += [n for n in names if n not in used]
    if memory:
        lines.append("- XLA's temporaries of the training step per image, "
                     "keras_vit against keras-hub (variant, image, batch; "
                     "median of the runs): " + "; ".join(memory.values())
                     + ".")
    return "\n".join(lines) + source(
        *(f"{BENCH}/{GPU}/{n}.json" for n in used), command=GPU_COMMAND)


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


ONE_PATH_MODEL = "keras_vit_one_path"  # throughput.py --compare_one_path


def gpu_attention() -> str:
    """Each candidate attention against the one path, end to end, in the
    same process: the Keras-op and padded candidates of the runs made
    before the library took the fused attention (`--compare_dpa`, the
    library then the one path), and the library itself against its one
    path (`--compare_one_path`, the library then the fused attention on a
    GPU)."""
    rows, used = [], []
    for names, runs in gpu_runs():
        a = runs[0]["args"]
        by_model = _rows_by_model(runs)
        # Keras's flags, and JAX's answer from the first run that asked.
        flashes = [run.get("flash_attention_usable") or {} for run in runs]
        flash = next((f for f in flashes if f.get("jax_cudnn")), flashes[0])
        for (mode, model), other in by_model.items():
            ours = by_model.get((mode, "keras_vit"), [])
            if model not in ("keras_vit_dpa", ONE_PATH_MODEL) or not ours:
                continue
            if model == ONE_PATH_MODEL:  # the library is the candidate
                speeds = [1 / r["vs_keras_vit"] for r in other]
                pair = (other, ours)
                label = f"the library: {attention_of(names[0], ours[0])}"
            else:
                speeds = [r["vs_keras_vit"] for r in other]
                pair = (ours, other)
                label = attention_of(names[0], other[0])
            median = statistics.median(speeds)
            temp = [_median([x.get("xla_temp_bytes_per_example")
                             for x in rows_]) for rows_ in pair]
            keras_check = (f"{flash.get('all_tokens')} / "
                           f"{flash.get('class_token')}" if flash else "")
            rows.append(
                f"| {_what(a)} | {mode} | {place(runs[0], mode)} | "
                f"{label} | **{median:.3f}** "
                f"({', '.join(f'{v:.3f}' for v in speeds)}) | "
                f"{'yes' if median > 1.03 else 'no'} | "
                f"{_mib(temp[0])} / {_mib(temp[1])} | {keras_check} | "
                f"{_cudnn_verdict(flash)} |")
            used += [n for n in names if n not in used]
    if not rows:
        return NO_GPU_SECTION
    head = ["| model, image, batch | mode | place in its process | "
            "candidate | speed over the one path, median (each run) | "
            "faster by more than 3% | XLA temporaries MiB / image, one "
            "path / candidate | cuDNN attention per Keras's check (every "
            "token / class token) | JAX's own answer, asked for cuDNN "
            "(every token / class token) |",
            "|---|---|---|---|---|---|---|---|---|"]
    return "\n".join(head + rows) + source(
        *(f"{BENCH}/{GPU}/{n}.json" for n in used), command=GPU_COMMAND)


KERNEL_CANDIDATES = {
    "one_path": "the portable path (two batched matmuls, float32 softmax)",
    "cudnn": "cuDNN's fused attention, the tokens as they are",
    "cudnn_even": "cuDNN's, padded to an even token count (the real count "
                  "as the sequence lengths)",
    "xla": "JAX's own `dot_product_attention` (XLA)",
}


def gpu_attention_kernels() -> str:
    """The attention op of one layer alone: each candidate's time (the
    median of the runs of its configuration, a rerun stored as
    NAME_runN), speed over the portable path, error and JAX's
    refusals."""
    runs = gpu_results("attention_kernels")
    if not runs:
        return NO_GPU_SECTION
    lines = ["| image (tokens), batch | mode | candidate | ms per layer, "
             "median (each run) | speed over the portable path | TFLOP/s "
             "| largest error (largest value) | JAX refused |",
             "|---|---|---|---|---|---|---|---|"]
    groups: Dict[str, List[dict]] = {}
    for name, data in runs:
        groups.setdefault(RUN_SUFFIX.sub("", name), []).append(data)
    for data_list in groups.values():
        data = data_list[0]
        a = data["args"]
        for i, r in enumerate(data["rows"]):
            head = (f"| {a['image_size']} ({data['tokens']}), "
                    f"{a['batch_size']} | {r['mode']} | `{r['candidate']}` |")
            if r.get("refused"):
                lines.append(f"{head} | | | | {r['refused']} |")
                continue
            same = [d["rows"][i] for d in data_list
                    if (d["rows"][i]["mode"], d["rows"][i]["candidate"])
                    == (r["mode"], r["candidate"])
                    and d["rows"][i].get("ms") is not None]
            each = ", ".join(f"{x['ms']:.3f}" for x in same)
            lines.append(
                f"{head} **{_median_of(same, 'ms'):.3f}** ({each}) | "
                f"{ratio(_median_of(same, 'speedup_vs_one_path'))} | "
                f"{_median_of(same, 'tflops_per_s'):.0f} | "
                f"{max(x['max_abs_error'] for x in same):.3g} "
                f"({r['ref_max_abs']:.2g}) | |")
    legend = "; ".join(f"`{k}`: {v}" for k, v in KERNEL_CANDIDATES.items())
    m = runs[0][1]["machine"]
    return "\n".join(lines) + (
        f"\n\n{legend}. Training: the gradient with respect to q, k and v; "
        f"B/16's 12 heads of 64, bfloat16, on {m.get('device_kind')} (jax "
        f"{m.get('jax')}); speed, TFLOP/s: the median of the runs; error: "
        f"the largest of the runs. Each run's command is in its JSON "
        f"(`bash benchmarks/accelerator.sh --profile` ran them).") + source(
        *(f"{BENCH}/{GPU}/{n}.json" for n, _ in runs))


PROFILE = "device_profile_b16_224_b128_bf16"
# The profile of every model and mode in one process (before
# device_profile.py gave each its own): kept for what it shows of that.
PROFILE_ONE_PROCESS = "device_profile_oneprocess_b16_224_b128_bf16"
# train_on_batch and the compiled step, each in its own process.
TRAINING_B16 = "training_b16_224_b128_bf16"
PROFILE_CMDBUF = "device_profile_cmdbuf_b16_224_b128_bf16"
PROFILE_KINDS = ("matmul", "attention", "layout", "elementwise")


def _profile_place(data: dict, index: int) -> str:
    if not data["args"].get("one_process", True):
        return OWN_PROCESS
    return ORDINALS.get(index + 1, f"{index + 1}th")


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.2f}"


def _forward_flops(sizes: dict, image: int, num_classes: int
                   ) -> Dict[str, float]:
    """{"total", "attention", "patches"}: keras_vit's forward FLOPs per
    image as throughput.py counts them (2 per multiply-add, the last
    block's class token alone), and of them the attention products
    (Q K^T, A V) and the patch projection."""
    d, p, layers = sizes["hidden_size"], sizes["patch_size"], sizes[
        "num_layers"]
    patches = (image // p) ** 2
    tokens = patches + 1

    def block(queries):
        return (tokens * 3 * d * d + 2 * queries * tokens * d
                + queries * d * d + 2 * queries * d * sizes["mlp_dim"])

    patch = patches * p * p * 3 * d
    total = patch + (layers - 1) * block(tokens) + block(1) + d * num_classes
    attention = 2 * tokens * d * ((layers - 1) * tokens + 1)
    return {"total": 2 * total, "attention": 2 * attention,
            "patches": 2 * patch}


def gpu_profile() -> str:
    """Where B/16's training and inference steps spent their device time:
    the phase-by-kind table, what it says against the throughput run of
    the same code, and its caveats."""
    data = _gpu_bench(PROFILE)
    if not data:
        return NO_GPU_SECTION
    a = data["args"]
    lines = ["| model | mode | place in its process | phase | matmul | "
             "attention | layout | elementwise | op time |",
             "|---|---|---|---|---|---|---|---|---|"]
    for i, row in enumerate(data["rows"]):
        for phase_, t in row["seconds_per_step"].items():
            if not any(t.values()):
                continue
            if row["mode"] == "infer":
                phase_ = "forward (the whole step)"
            lines.append(
                f"| {row['model']} | {row['mode']} | "
                f"{_profile_place(data, i)} | {phase_} | "
                + " | ".join(_ms(t[k]) for k in PROFILE_KINDS)
                + f" | {_ms(sum(t.values()))} |")
    lines.append("\n(Milliseconds of kernel time per step, "
                 f"{a['steps']} profiled steps after {a['warmup']}.)\n")
    used = [PROFILE]
    vit = [r for r in data["rows"] if (r["model"], r["mode"]) == (
        "keras_vit", "train")][0]
    table = vit["seconds_per_step"]
    op = vit["op_seconds_per_step"]
    kinds = {k: sum(t[k] for t in table.values()) for k in PROFILE_KINDS}
    facts = [
        f"- keras_vit's training step: {_ms(op)} ms of kernels per step; "
        f"matmul {_ms(kinds['matmul'])}, attention "
        f"{_ms(kinds['attention'])}, layout {_ms(kinds['layout'])}, "
        f"elementwise {_ms(kinds['elementwise'])} "
        f"({pct(kinds['elementwise'] / op)} of the op time: LayerNorm, "
        f"GELU, casts, bias and residual adds, the reductions of the bias "
        f"gradients, the AdamW update)."]
    facts += _profile_step(data, kinds, op, used)
    facts += _profile_others(data, vit, used)
    old = _gpu_bench(PROFILE_CMDBUF)
    if old:
        first = old["rows"][0]
        facts.append(
            f"- `{PROFILE_CMDBUF}`: the first profile, with XLA's command "
            f"buffers (CUDA graphs) on: {first['events_unmatched']:,} of "
            f"{first['events']:,} traced events of keras_vit's training "
            "step were command buffers, not kernels, so nothing could be "
            "classified; device_profile.py turns them off since.")
        used.append(PROFILE_CMDBUF)
    return "\n".join(lines + facts) + source(
        *(f"{BENCH}/{GPU}/{n}.json" for n in used),
        command=data["command"])


def _profile_step(data: dict, kinds: Dict[str, float], op: float,
                  used: List[str]) -> List[str]:
    """Bullets: the matmul kernels' rate, and the profiled kernel time
    against the whole training step as `train_on_batch` and as the
    compiled step (`TRAINING_B16`, each in its own process; else the
    older `FUSED_B16`)."""
    name = TRAINING_B16 if _gpu_bench(TRAINING_B16) else FUSED_B16
    run = _gpu_bench(name)
    if not run:
        return []
    used.append(name)
    a = data["args"]
    ceiling = run["ceiling"]["bfloat16"]["flops_per_s"]
    spec = _spec(run)
    flops = _forward_flops(data["sizes"], a["image_size"], a["num_classes"])
    batch = a["batch_size"]
    per_image = flops["total"] - flops["attention"] - flops["patches"]
    dense = 3 * batch * per_image
    model = 3 * batch * flops["total"]
    out = [
        f"- The matmul kernels did {dense / 1e12:.1f} TFLOP per step (the "
        f"projections, MLPs and head, forward and backward: 3 x "
        f"{per_image / 1e9:.2f} GFLOP x {batch} images) in "
        f"{_ms(kinds['matmul'])} ms (the patch embedding's convolution "
        f"included): {dense / kinds['matmul'] / 1e12:.0f} TFLOP/s, "
        f"{pct(dense / kinds['matmul'] / ceiling)} of the matmul ceiling "
        f"measured in `{name}` ({ceiling / 1e12:.0f} TFLOP/s). The matmuls "
        f"run near the ceiling; the rest of the op time is what keeps the "
        f"step from it.",
        f"- Busy with kernels alone, the device would run the model's "
        f"{model / 1e12:.2f} TFLOP per step at {pct(model / op / ceiling)} "
        f"MFU of the measured ceiling"
        + (f" ({pct(model / op / spec)} of the data sheet's)" if spec
           else "") + "."]
    train, jit = gpu_row(run, "train"), gpu_row(run, "train_jit")
    if train and jit and place(run, "train") == OWN_PROCESS:
        t, j = train["step_ms"] / 1e3, jit["step_ms"] / 1e3
        out.append(
            f"- The whole step, each call in its own process "
            f"(`{name}`): `train_on_batch` {1e3 * t:.2f} ms "
            f"({pct(train['mfu'])} MFU), the compiled step (`train_jit`: "
            f"the same step compiled once, its state kept on the device) "
            f"{1e3 * j:.2f} ms ({pct(jit['mfu'])}). Keras's per-call work "
            f"(gathering the state from the variables and writing it back, "
            f"the metrics, the logs copied to the host) costs "
            f"{1e3 * (t - j):.1f} ms a step ({pct((t - j) / t)}); the "
            f"compiled step still spends {1e3 * (j - op):.1f} ms "
            f"({pct((j - op) / j)}) beyond the profiled kernels (waiting "
            f"for each step's outputs before the next is launched; the "
            f"profile ran with XLA's command buffers off, the timed steps "
            f"with them on).")
    elif train:
        t = train["step_ms"] / 1e3
        out.append(
            f"- The same code's training step in `{name}` took "
            f"{1e3 * t:.2f} ms: {1e3 * (t - op):.1f} ms per step "
            f"({pct((t - op) / t)}) in which no kernel ran; the measured "
            f"step is {pct(train['mfu'])}.")
    return out


def _profile_others(data: dict, vit: dict, used: List[str]) -> List[str]:
    """Bullets: keras-hub's kernels against keras_vit's (each in its own
    process), whether the inference step ran the fused attention, and
    what the older one-process profile showed of profiling one
    configuration after another."""
    out = []
    rows = {(r["model"], r["mode"]): r for r in data["rows"]}
    own = not data["args"].get("one_process", True)
    hub = rows.get(("keras_hub", "train"))
    if hub and own:
        def total(row, kind):
            return sum(t[kind] for t in row["seconds_per_step"].values())
        out.append(
            f"- keras-hub's training step, in its own process: "
            f"{_ms(hub['op_seconds_per_step'])} ms of kernels per step, "
            f"{ratio(hub['op_seconds_per_step'] / vit['op_seconds_per_step'])}"
            f" keras_vit's; matmul {_ms(total(hub, 'matmul'))} ms (its "
            f"attention products among them: no fused attention in its "
            f"training step), elementwise {_ms(total(hub, 'elementwise'))} "
            f"ms, layout {_ms(total(hub, 'layout'))} ms.")
    for model in ("keras_vit", "keras_hub"):
        infer = rows.get((model, "infer"))
        if infer and own:
            attention = sum(t["attention"]
                            for t in infer["seconds_per_step"].values())
            out.append(
                f"- {model}'s inference step (`predict_on_batch`'s): "
                f"{_ms(infer['op_seconds_per_step'])} ms of kernels per "
                f"batch, {_ms(attention)} ms of them cuDNN's fused "
                f"attention.")
    one = _gpu_bench(PROFILE_ONE_PROCESS)
    if one:
        first = [r for r in one["rows"] if (r["model"], r["mode"]) == (
            "keras_vit", "train")]
        later = [r for r in one["rows"] if (r["model"], r["mode"]) == (
            "keras_vit", "infer")]

        def mlp2(row):
            return _median([r["seconds"] for r in row["top"]
                            if r["op_name"].endswith("/mlp2/dot_general")
                            and "transpose(" not in r["op_name"]])
        if first and later and mlp2(first[0]) and mlp2(later[0]):
            index = one["rows"].index(later[0])
            out.append(
                f"- `{PROFILE_ONE_PROCESS}`, the earlier profile of every "
                f"model and mode in one process: what was profiled after "
                f"another configuration was cleared ran slower; the same "
                f"matmul, keras_vit's forward `mlp2` (every token, same "
                f"shapes), took {1e3 * mlp2(first[0]):.3f} ms in the "
                f"training step profiled first and "
                f"{1e3 * mlp2(later[0]):.3f} ms in the inference step "
                f"profiled {_profile_place(one, index)}: "
                f"{ratio(mlp2(later[0]) / mlp2(first[0]))}.")
            used.append(PROFILE_ONE_PROCESS)
    return out


MODE_CALLS = {"infer": "`predict_on_batch`",
              "infer_jit": "compiled forward (`infer_jit`)",
              "train": "`train_on_batch`",
              "train_jit": "compiled step (`train_jit`)"}


def gpu_inference() -> str:
    """B/16 inference at 224 as `predict_on_batch` and as the compiled
    forward pass, every stored run, with where each ran in its process;
    what keras-hub's rows (the same code in every run) say about the
    order; the per-call cost of predict_on_batch, measured."""
    rows: List[Tuple[tuple, str]] = []
    used: List[str] = []
    per_call: List[str] = []
    # keras-hub's rows by (mode, batch, first in its process).
    hubs: Dict[tuple, List[Tuple[dict, str]]] = {}
    for name, data in gpu_results("throughput"):
        a = data["args"]
        if (a["variant"], a["image_size"]) != ("B/16", 224):
            continue
        p, c = gpu_row(data, "infer"), gpu_row(data, "infer_jit")
        if p and c and place(data, "infer") == OWN_PROCESS:
            per_call.append(
                f"- `predict_on_batch`'s per-call cost, measured "
                f"(`{name}`, batch {a['batch_size']}, each call in its own "
                f"process): {p['step_ms']:.2f} ms per batch against the "
                f"compiled forward's {c['step_ms']:.2f} ms, "
                f"{p['step_ms'] - c['step_ms']:.1f} ms a call "
                f"({pct((p['step_ms'] - c['step_ms']) / p['step_ms'])}).")
        for mode in ("infer", "infer_jit"):
            ours = gpu_row(data, mode)
            if not ours:
                continue
            hub = gpu_row(data, mode, "keras_hub")
            where = place(data, mode)
            label = attention_of(name, ours)
            hub_speed = f"{hub['images_per_s']:.0f}" if hub else ""
            rows.append(((a["batch_size"], mode, where != ORDINALS[1],
                          name),
                f"| `{name}` | {label} | {a['batch_size']} | "
                f"{MODE_CALLS[mode]} | {where} | "
                f"{ours['images_per_s']:.0f} | {ours['step_ms']:.2f} | "
                f"{_mfus(ours, data)} | {hub_speed} | "
                f"{ratio(ours.get('vs_keras_hub'))} |"))
            used.append(name)
            if hub:
                key = (mode, a["batch_size"], first_in_process(data, mode))
                hubs.setdefault(key, []).append((hub, name))
    if not rows:
        return NO_GPU_SECTION
    lines = ["| run | keras_vit attention | batch | call | place in its "
             "process | keras_vit img/s | ms per batch | MFU (measured "
             "ceiling / data sheet) | keras-hub img/s | vs keras-hub |",
             "|---|---|---|---|---|---|---|---|---|---|"] + [
                 text for _, text in sorted(rows)] + [""]

    def speeds(key):
        return [f"{r['images_per_s']:.0f} img/s (`{n}`)"
                for r, n in hubs.get(key, [])]

    for mode in ("infer", "infer_jit"):
        early = speeds((mode, 128, True))
        late = speeds((mode, 128, False))
        if early and late:
            lines.append(
                f"- keras-hub's code is the same in every run. Its "
                f"{MODE_CALLS[mode]} at batch 128, first in its process: "
                f"{', '.join(early)}; after another configuration in the "
                f"same process: {', '.join(late)}.")
    lines += per_call
    return "\n".join(lines) + source(
        *(f"{BENCH}/{GPU}/{n}.json" for n in dict.fromkeys(used)),
        command=GPU_COMMAND)


LOGGED_ROW = re.compile(
    r"^\[(\w+)\] (\S+) (\S+) xla=\w+\s+([\d.]+) img/s$")
RUN_LINE = re.compile(r"^(\S+): (starting|exit (\d+))")


def gpu_logged_only() -> str:
    """The rows that a GPU run printed to its log but never wrote to a
    result: runs that `accelerator.sh` stopped at their time limit (exit
    124) before throughput.py wrote its JSON. Read from the stored logs
    (benchmarks/results/gpu/accelerator_runN.log); kept out of every
    table and target."""
    lines = ["| log | run | batch | model | call | img/s | ms per batch "
             "| keras_vit vs keras-hub |", "|---|---|---|---|---|---|---|---|"]
    used = []
    for path in sorted(glob.glob(os.path.join(ROOT, BENCH, GPU,
                                              "accelerator_run*.log"))):
        log = os.path.basename(path)
        run, rows = None, []
        with open(path) as f:
            for text in f:
                text = text.rstrip("\n")
                m = RUN_LINE.match(text)
                if m and m.group(2) == "starting":
                    run, rows = m.group(1), []
                elif m and m.group(3) == "124" and m.group(1) == run and rows:
                    batch = int(re.findall(r"_b(\d+)_", run)[-1])
                    speed = {(r[1], r[2]): float(r[3]) for r in rows}
                    for _, model, mode, ips in rows:
                        hub = speed.get(("keras_hub", mode))
                        vs = (ratio(float(ips) / hub)
                              if model == "keras_vit" and hub else "")
                        lines.append(
                            f"| `{log}` | `{run}` | {batch} | {model} | "
                            f"{MODE_CALLS[mode]} | {float(ips):.0f} | "
                            f"{1e3 * batch / float(ips):.2f} | {vs} |")
                    if log not in used:
                        used.append(log)
                    run = None
                elif run:
                    m = LOGGED_ROW.match(text)
                    if m:
                        rows.append(m.groups())
    if not used:
        return "No GPU run was stopped before it wrote its result."
    return "\n".join(lines) + source(
        *(f"{BENCH}/{GPU}/{n}" for n in used), command=GPU_COMMAND)


XLA_OPTION_RUN = re.compile(r"^xla_(\w+?)_b16_224_b128_bf16(_run\d+)?$")


def gpu_xla_options() -> str:
    """B/16's compiled training step under XLA's defaults and under each
    option `accelerator.sh --xla-options` tried (its runs
    xla_TAG_b16_224_b128_bf16): speed and MFU, the median of each
    option's runs, against the defaults' median."""
    runs: Dict[str, List[Tuple[str, dict]]] = {}
    for name, data in gpu_results("throughput"):
        m = XLA_OPTION_RUN.match(name)
        if m and gpu_row(data, "train_jit"):
            runs.setdefault(m.group(1), []).append((name, data))
    if not runs:
        return ("No run of `bash benchmarks/accelerator.sh --xla-options` "
                "is stored yet.")

    speed = {tag: statistics.median(gpu_row(d, "train_jit")["images_per_s"]
                                    for _, d in found)
             for tag, found in runs.items()}
    base = speed.get("default")
    lines = ["| XLA options (`XLA_FLAGS`) | runs | img/s, median | MFU "
             "(measured ceiling / data sheet), median | vs XLA's defaults |",
             "|---|---|---|---|---|"]
    used = []
    for tag in sorted(runs, key=lambda t: (t != "default", t)):
        rows = [(gpu_row(d, "train_jit"), d) for _, d in runs[tag]]
        flags = rows[0][1]["machine"].get("xla_flags") or "(none)"
        mfu = statistics.median(r["mfu"] for r, _ in rows)
        spec = [r["model_flops_per_s"] / _spec(d) for r, d in rows
                if _spec(d)]
        lines.append(
            f"| `{flags}` | {len(rows)} | {speed[tag]:.0f} | {pct(mfu)} / "
            f"{pct(statistics.median(spec)) if spec else ''} | "
            f"{ratio(speed[tag] / base) if base else ''} |")
        used += [n for n, _ in runs[tag]]
    return "\n".join(lines) + source(
        *(f"{BENCH}/{GPU}/{n}.json" for n in used),
        command="bash benchmarks/accelerator.sh --xla-options")


# ---------------------------------------------------------- GPU targets
GPU_TARGETS = (  # (what, variant, image, batch, mode, field, want)
    ("B/16, 224, batch 128, training (`train_on_batch`): MFU >= 40%",
     "B/16", 224, 128, "train", "mfu", 0.40),
    ("B/16, 224, batch 128, training: >= 1.15x keras-hub",
     "B/16", 224, 128, "train", "vs_keras_hub", 1.15),
    ("B/16, 224, batch 128, training, compiled step (`train_jit`): "
     "MFU >= 40%", "B/16", 224, 128, "train_jit", "mfu", 0.40),
    ("B/16, 224, batch 128, inference, compiled forward (`infer_jit`): "
     "MFU >= 40%", "B/16", 224, 128, "infer_jit", "mfu", 0.40),
    ("B/16, 224, batch 128, inference, compiled forward: >= 1.15x "
     "keras-hub", "B/16", 224, 128, "infer_jit", "vs_keras_hub", 1.15),
    ("B/16, 224, batch 128, inference, `predict_on_batch`: MFU >= 40%",
     "B/16", 224, 128, "infer", "mfu", 0.40),
    ("B/16, 224, batch 128, inference, `predict_on_batch`: >= 1.15x "
     "keras-hub", "B/16", 224, 128, "infer", "vs_keras_hub", 1.15),
    ("L/16, 224, batch 64, training (`train_on_batch`): MFU >= 50%",
     "L/16", 224, 64, "train", "mfu", 0.50),
    ("L/16, 224, batch 64, training, compiled step (`train_jit`): "
     "MFU >= 50%", "L/16", 224, 64, "train_jit", "mfu", 0.50),
    ("L/16, 224, batch 64, training: >= 1.15x keras-hub",
     "L/16", 224, 64, "train", "vs_keras_hub", 1.15),
)


def gpu_target_runs(variant: str, image: int, batch: int, mode: str,
                    field: str = "mfu") -> List[str]:
    """[str]. The stored GPU runs a target reads: every throughput run of
    the configuration, in bfloat16, that has the target's field (a run
    without keras-hub has no ratio to it), in which the library took
    cuDNN's fused attention (the current library on a GPU, `library_of`)
    and the mode's configuration ran first in its process (or in its
    own), under XLA's default options."""
    out = []
    for name, data in gpu_results("throughput"):
        a = data["args"]
        row = gpu_row(data, mode)
        if ((a["variant"], a["image_size"], a["batch_size"], a["dtype"])
                == (variant, image, batch, "bfloat16")
                and not data["machine"].get("xla_flags")
                and row and row.get(field) is not None
                and library_of(name, data) == FUSED
                and first_in_process(data, mode)):
            out.append(f"{GPU}/{name}")
    return out


class MfuTarget(Target):
    """An MFU target: each run's MFU against its measured ceiling, and in
    parentheses against the device's data-sheet figure; judged on the
    former."""

    def _cells(self) -> Tuple[List[str], str, bool]:
        data = [bench(r) for r in self.runs]
        values = [self.value(d) for d in data]
        specs = [self.value(d, spec=True) for d in data]
        median = statistics.median(values)

        def cell(v, s):
            return pct(v) + (f" ({pct(s)})" if s is not None else "")

        shown = [cell(v, s) for v, s in zip(values, specs)]
        known = [s for s in specs if s is not None]
        total = f"**{pct(median)}**" + (
            f" ({pct(statistics.median(known))})" if known else "")
        return shown, total, median >= self.want


def _gpu_value(mode: str, field: str) -> Callable:
    def value(data: dict, spec: bool = False) -> Optional[float]:
        row = gpu_row(data, mode)
        if not spec:
            return row[field]
        flops = _spec(data)
        return row["model_flops_per_s"] / flops if flops else None
    return value


def gpu_targets() -> List[str]:
    """[str]. The GPU target rows: met or not on the median of the runs
    `gpu_target_runs` finds; "not measured" where there is none."""
    out = []
    for what, variant, image, batch, mode, field, want in GPU_TARGETS:
        runs = gpu_target_runs(variant, image, batch, mode, field)
        if not runs:
            out.append(f"| {what} | no run of the current library with "
                       "this configuration first in its process | | not "
                       "measured |")
        elif field == "mfu":
            out.append(MfuTarget(what, runs, _gpu_value(mode, field), want,
                                 pct).row())
        else:
            out.append(Target(what, runs, _gpu_value(mode, field), want,
                              ratio, cpu=_gpu_value(mode, field + "_cpu")
                              ).row())
    return out


def targets_table() -> str:
    lines = ["| target (2-core CPU, float32) | every run: wall / CPU-time "
             "ratio where both (file in `benchmarks/results/`) | median | |",
             "|---|---|---|---|"]
    lines += [t.row() for t in targets()]
    lines += ["", "| target (one GPU, JAX, bfloat16, XLA) | every run: MFU "
              "of the measured matmul ceiling (of the data sheet's), or "
              "wall / CPU-time ratio (file in `benchmarks/results/`) | "
              "median | |", "|---|---|---|---|"]
    lines += gpu_targets()
    return "\n".join(lines) + "\n"


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


def augment_cost() -> str:
    data = bench("augment_cost")
    return (_md_table(f"{BENCH}/augment_cost.md")
            + f"\n\nKeras's transform takes **{data['speedup']:.1f}x** "
            "keras_vit's time per image (medians)." + source(
                f"{BENCH}/augment_cost.json", command=data["command"]))


def folder_run() -> str:
    """The folder config's commands at a real model size (the median of
    every stored run of benchmarks/folder_run.py, one paragraph a file)."""
    parts = []
    for path in sorted(glob.glob(os.path.join(ROOT, BENCH,
                                              "folder_run_*.json"))):
        data = load(path)
        m, args, runs = data["machine"], data["args"], data["runs"]
        parts.append(
            f"{args['model']} on {2 * args['per_class']} photos "
            f"({runs[0]['steps']} steps), {len(runs)} run(s) on {m['cpu']}, "
            f"{m['cores']} cores: training "
            f"**{data['median_s']['train']:.0f} s**, evaluation "
            f"{data['median_s']['evaluate']:.0f} s, prediction "
            f"{data['median_s']['predict']:.0f} s, each the median of every "
            "run, each a new process from start to exit."
            + source(os.path.relpath(path, ROOT), command=data["command"]))
    return "\n".join(parts)


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


def seeds_cell(values: Sequence[float], points: bool = False) -> str:
    """The median of per-seed fractions with their range, in % (or in
    points of %, `points`): "86.9% (84.4 to 87.8)"."""
    v = [100 * x for x in values]
    unit = "" if points else "%"
    return (f"{statistics.median(v):.1f}{unit} "
            f"({min(v):.1f} to {max(v):.1f})")


def augreg_digits() -> str:
    short, long = bench("augreg_digits"), bench("augreg_digits_1200")
    lines = [f"| setting | RandAugment (N, M) | Mixup | dropout, stochastic "
             f"depth | {short['steps']} steps | {long['steps']} steps |",
             "|---|---|---|---|---|---|"]

    def cell(data, name):
        got = [r["test_accuracy"] for r in data["runs"]
               if r["setting"] == name]
        return seeds_cell(got) if got else ""

    for name, (ra, mix, reg) in AUGREG_SETTINGS.items():
        lines.append(f"| {name} | {ra} | {mix} | {reg} | "
                     f"{cell(short, name)} | {cell(long, name)} |")
    return "\n".join(lines) + (
        f"\n\n({len(short['seeds'])} seeds, {short['train_examples']} "
        f"training and {short['test_examples']} test images, batch "
        f"{short['batch']}; median over the seeds, lowest to highest in "
        "brackets.)\n"
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
        st = d["settings"]
        gaps = [m - r for m, r in zip(d["mpp"], d["scratch"])]
        lines.append(
            f"| {st['labels_per_class']} | {st['finetune_steps']} | "
            f"{seeds_cell(d['mpp'])} | {seeds_cell(d['scratch'])} | "
            f"{seeds_cell(gaps, points=True)}"
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
            r["top1_agreement_with_float32"], 1)
        lines.append(f"| {kind} | {r['bytes']:,} B | "
                     f"{r['max_abs_probability_diff_vs_keras']:.1e} | "
                     f"{agree} | {pct(r['accuracy'], 1)} |")
    lines.append(f"\nKeras: {pct(d['keras_accuracy'], 1)} on the "
                 f"{d['test_images']} test images.")
    return "\n".join(lines) + source(
        f"{BENCH}/litert_agreement_digits.json",
        command=d["command"])


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
    order = _assigned("keras_vit/variants.py", "VARIANTS")
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
        "\n\n(Generated from `keras_vit/variants.py` and the counts that "
        "`python -m pytest tests/test_model.py tests/test_resnet.py` "
        "asserts against the built models.)\n")


# The model as a class carrying its architecture, against the functional
# model before it (commit 8f653dc), interleaved with keras-hub.
CLASS_RUNS = ("model_class_before_after_b16_b8_train",
              "model_class_before_after_b16_b8_infer")
CLASS_NAMES = (("keras_vit_before", "before (8f653dc)"),
               ("keras_vit", "after"), ("keras_hub", "keras-hub"))
LAYOUT_RUNS = ("layout_before_after_b16_b8",)
LAYOUT_NAMES = (("before", "before (3a89c59)"),
                ("keras_vit", "after"), ("keras_hub", "keras-hub"))


def _before_after(runs: Sequence[str], names, before: str) -> str:
    """Each repeat and the medians of interleaved before / after / keras-hub
    runs, per mode, with after's change against before."""
    lines = ["| mode | model | img/s, each repeat | img/s (median) | "
             "CPU s per image (median) | vs keras-hub (wall / CPU time) |",
             "|---|---|---|---|---|---|"]
    gains = []
    for name in runs:
        data = bench(name)
        modes = list(dict.fromkeys(r["mode"] for r in data["rows"]))
        for mode in modes:
            rows = {r["model"]: r for r in data["rows"] if r["mode"] == mode}
            for model, label in names:
                r = rows[model]
                each = ", ".join(f"{v:.2f}" for v in r["images_per_s_all"])
                hub = (f"{ratio(r['vs_keras_hub'])} / "
                       f"{ratio(r['vs_keras_hub_cpu'])}"
                       if r.get("vs_keras_hub") else "")
                lines.append(f"| {mode} | {label} | {each} | "
                             f"**{r['images_per_s']:.2f}** | "
                             f"{r['cpu_s_per_image']:.2f} | {hub} |")
            after, old = rows["keras_vit"], rows[before]
            speed = after["images_per_s"] / old["images_per_s"] - 1
            cpu = after["cpu_s_per_image"] / old["cpu_s_per_image"] - 1
            gains.append(
                f"{mode}, after against before: img/s {signed_pct(speed)}, "
                f"CPU time per image {signed_pct(cpu)}; load average "
                f"{_load_range(data['machine'])}, "
                f"{data['args']['repeats']} repeats of "
                f"{after['steps_per_repeat']} step(s)")
    return ("\n".join(lines) + "\n\n" + "; ".join(gains) + "."
            + source(*(f"{BENCH}/{n}.json" for n in runs)))


def model_class_before_after() -> str:
    return _before_after(CLASS_RUNS, CLASS_NAMES, "keras_vit_before")


def layout_before_after() -> str:
    return _before_after(LAYOUT_RUNS, LAYOUT_NAMES, "before")


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
    "layout-before-after": layout_before_after,
    "variants": variants,
    "throughput-runs": throughput_runs,
    "flop-count": flop_count,
    "targets": targets_table,
    "gpu-throughput": gpu_throughput,
    "gpu-attention": gpu_attention,
    "gpu-summary": gpu_summary,
    "gpu-attention-kernels": gpu_attention_kernels,
    "gpu-profile": gpu_profile,
    "gpu-inference": gpu_inference,
    "gpu-logged-only": gpu_logged_only,
    "gpu-xla-options": gpu_xla_options,
    "loop-overhead": loop_overhead,
    "augment-cost": augment_cost,
    "folder-run": folder_run,
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

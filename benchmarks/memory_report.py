"""The markdown report of benchmarks/memory.py and its derived numbers."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from typing import Any, Dict, List

MIB = 2**20
GIB = 2**30


def machine_info() -> Dict[str, Any]:
    """dict. CPU, cores, load and the versions that shape the numbers."""
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info: Dict[str, Any] = {
        "cpu": cpu, "cores": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": list(os.getloadavg()),
    }
    for dist in ("keras", "jax", "jaxlib", "tensorflow", "keras-hub"):
        try:
            info[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return info


def _key(row: Dict[str, Any]):
    return (row["variant"], row["image_size"])


def add_ratios(result: Dict[str, Any]) -> None:
    """Adds, to every row with a reference (keras_vit without remat at the
    same variant and size): its memory per example and step time relative
    to that reference; to the reference, its memory relative to
    keras-hub's."""
    rows: List[Dict[str, Any]] = result["rows"]
    ok = [r for r in rows if "error" not in r]
    reference = {_key(r): r for r in ok
                 if r["model"] == "keras_vit" and r["remat"] == "none"}
    hub = {_key(r): r for r in ok if r["model"] == "keras_hub"}
    for row in ok:
        ref = reference.get(_key(row))
        if ref is None or row is ref or row["model"] != "keras_vit":
            continue
        for field in ("bytes_per_example",):
            if row.get(field) and ref.get(field):
                row[f"{field}_saving"] = ref[field] / row[field]
        for field in ("step_seconds", "step_cpu_seconds"):
            if row.get(field) and ref.get(field):
                row[f"{field}_ratio"] = row[field] / ref[field]
    for key, ref in reference.items():
        other = hub.get(key)
        if other and other.get("bytes_per_example"):
            ref["vs_keras_hub"] = (
                ref["bytes_per_example"] / other["bytes_per_example"]
            )


def progress_line(row: Dict[str, Any]) -> str:
    """str. One row, as printed while the benchmark runs."""
    name = f"{row['variant']}@{row['image_size']} {row['model']}:{row['remat']}"
    if "error" in row:
        return f"{name}: {row['error'].splitlines()[-1]}"
    text = (f"{name}: {row['bytes_per_example'] / MIB:.1f} MiB/example, "
            f"fixed {row['fixed_bytes'] / GIB:.2f} GiB")
    if "step_seconds" in row:
        text += (f", {row['step_seconds']:.2f} s/step "
                 f"({row['step_cpu_seconds']:.2f} CPU s)")
    return text


def _ratio(value, digits=2) -> str:
    return f"{value:.{digits}f}x" if value else ""


def markdown(result: Dict[str, Any]) -> str:
    """str. The results as a markdown report with one table."""
    m = result["machine"]
    versions = ", ".join(
        f"{k} {m[k]}" for k in ("keras", "jax", "tensorflow", "keras-hub")
        if k in m
    )
    b1, b2 = result["batch_sizes"]
    how = {
        "jax": "XLA memory analysis of the compiled step (argument + temp + "
               "output - aliased bytes)",
        "tensorflow": "XLA buffer assignment of the compiled forward and "
                      "backward pass (total bytes) + optimizer state",
    }[result["backend"]]
    lines = [
        "# Training-step memory per example",
        "",
        f"`{result['command']}`",
        "",
        f"{m['cpu']}, {m['cores']} cores, load {m['load_average'][0]:.2f}; "
        f"{versions}. Backend {result['backend']}: {how}. Per example: the "
        f"slope between batch {b1} and {b2}; fixed: the rest (weights, "
        "gradients, optimizer state). Max batch: the largest batch whose "
        f"step fits the memory. Step times at batch {b1}, every policy in "
        "turn in one process (medians).",
        "",
        "| model | image | remat | MiB / example | activation saving | "
        "fixed GiB | max batch 16 GiB | max batch 32 GiB | s / step | "
        "CPU s / step | CPU time vs none |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        model = f"{r['model']} {r['variant']}"
        if "error" in r:
            lines.append(f"| {model} | {r['image_size']} | {r['remat']} | "
                         "failed |  |  |  |  |  |  |  |")
            continue
        saving = _ratio(r.get("bytes_per_example_saving"), 1)
        if "vs_keras_hub" in r:
            saving = f"{_ratio(r['vs_keras_hub'])} of keras-hub's"
        wall, cpu = r.get("step_seconds"), r.get("step_cpu_seconds")
        lines.append(
            f"| {model} | {r['image_size']} | {r['remat']} | "
            f"{r['bytes_per_example'] / MIB:.1f} | {saving} | "
            f"{r['fixed_bytes'] / GIB:.2f} | {r['max_batch_16GiB']} | "
            f"{r['max_batch_32GiB']} | {f'{wall:.2f}' if wall else ''} | "
            f"{f'{cpu:.2f}' if cpu else ''} | "
            f"{_ratio(r.get('step_cpu_seconds_ratio'))} |"
        )
    errors = [r for r in result["rows"] if "error" in r]
    for r in errors:
        lines += ["", f"{r['model']} {r['variant']}@{r['image_size']} "
                      f"{r['remat']}: {r['error'].splitlines()[-1]}"]
    return "\n".join(lines) + "\n"

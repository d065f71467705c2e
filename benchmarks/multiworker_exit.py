r"""How fast multi-worker train.py processes end: real workers on 127.0.0.1.

    python benchmarks/multiworker_exit.py --repeats 3 \
        --output /tmp/multiworker_exit

Scenarios (the digits, a tiny model, 2 workers of one TF_CONFIG):

- missing_peer: worker 0 alone, --config.trainer.connect_timeout_s=T; from the
  start of its wait (its "MultiWorkerMirroredStrategy: 2 workers" log line)
  to its exit (status 1).
- sigterm_waiting: SIGTERM to a worker waiting for the other; from the
  signal to its exit (status 143).
- sigterm_training: SIGTERM to worker 1 during training; from the signal to
  each worker's exit (both save at the same step, status 42).
- killed_worker1 / killed_worker0: `kill -9` of worker 1 (or 0, the chief)
  during training; from the kill to the other worker's exit (status 1).
- clean_end: a complete run; from each worker's "Final test metrics" log
  line to its exit (status 0).

Every time includes the interpreter's and TensorFlow's own exit, which is
most of it. Writes NAME.json (every sample) and NAME.md (the table).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from keras_vit.storage.atomic import atomic_write  # noqa: E402
from tests import cluster_harness as harness  # noqa: E402

SCENARIOS = ("missing_peer", "sigterm_waiting", "sigterm_training",
             "killed_worker1", "killed_worker0", "clean_end")


def build_parser() -> argparse.ArgumentParser:
    """argparse.ArgumentParser. The script's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3,
                        help="Runs of each scenario.")
    parser.add_argument("--connect_timeout_s", type=float, default=10.0,
                        help="missing_peer's "
                        "--config.trainer.connect_timeout_s.")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help="Comma-separated subset of: "
                        + ", ".join(SCENARIOS) + ".")
    parser.add_argument("--output", required=True,
                        help="Writes OUTPUT.json and OUTPUT.md.")
    return parser


def _logged_at(text: str, pattern: str) -> float:
    """The time of the first absl log line matching `pattern` (absl writes
    local time without the year)."""
    for line in text.splitlines():
        if re.search(pattern, line):
            stamp = re.match(r"^[IWEF](\d{4}) (\d\d:\d\d:\d\d\.\d+)", line)
            if stamp:
                year = datetime.date.today().year
                return datetime.datetime.strptime(
                    f"{year}{stamp[1]} {stamp[2]}", "%Y%m%d %H:%M:%S.%f"
                ).timestamp()
    raise RuntimeError(f"no log line matches {pattern!r}")


def _hosts() -> List[str]:
    return [f"127.0.0.1:{p}" for p in harness.free_ports(2)]


def _check(codes, expected, procs):
    if list(codes) != list(expected):
        raise RuntimeError(
            f"exit codes {codes}, expected {expected}; logs: "
            f"{[p.log for p in procs]}"
        )


def run_scenario(name: str, tmp: str, timeout_s: float) -> Dict[str, float]:
    """One run of a scenario: {measure: seconds}."""
    workdir = os.path.join(tmp, "run")
    shutil.rmtree(workdir, ignore_errors=True)
    log = os.path.join(tmp, name)
    if name == "missing_peer":
        proc = harness.train(
            workdir, f"{log}.log", 50, _hosts(), 0,
            [f"--config.trainer.connect_timeout_s={timeout_s:g}"])
        _check(harness.wait_all([proc], 600), [1], [proc])
        start = _logged_at(proc.text(), "MultiWorkerMirroredStrategy: 2")
        return {"wait_to_exit_s": proc.ended - start}
    if name == "sigterm_waiting":
        proc = harness.train(workdir, f"{log}.log", 50, _hosts(), 1)
        harness.wait_for([proc], "Waiting for the workers of TF_CONFIG")
        sent = harness.sigterm(proc)
        _check(harness.wait_all([proc], 300), [143], [proc])
        return {"sigterm_to_exit_s": proc.ended - sent}
    hosts = _hosts()
    steps = 60 if name == "clean_end" else 3000
    procs = [harness.train(workdir, f"{log}{i}.log", steps, hosts, i,
                           ["--config.checkpoints.every_steps=20"])
             for i in range(2)]
    if name == "clean_end":
        _check(harness.wait_all(procs, 600), [0, 0], procs)
        return {
            f"worker{i}_final_to_exit_s":
                p.ended - _logged_at(p.text(), "Final test metrics")
            for i, p in enumerate(procs)
        }
    harness.wait_for(procs, r"step 100/", 0)
    if name == "sigterm_training":
        sent = harness.sigterm(procs[1])
        _check(harness.wait_all(procs, 600), [42, 42], procs)
        return {f"worker{i}_sigterm_to_exit_s": p.ended - sent
                for i, p in enumerate(procs)}
    victim = 1 if name == "killed_worker1" else 0
    killed = time.time()
    procs[victim].proc.send_signal(signal.SIGKILL)
    expected = [1, 1]
    expected[victim] = -signal.SIGKILL
    _check(harness.wait_all(procs, 600), expected, procs)
    return {"survivor_exit_after_kill_s": procs[1 - victim].ended - killed}


def _markdown(results: Dict[str, List[Dict[str, float]]], args) -> str:
    lines = [
        "# Multi-worker exit times",
        "",
        f"`python benchmarks/multiworker_exit.py --repeats {args.repeats} "
        f"--connect_timeout_s {args.connect_timeout_s:g}`; "
        f"{platform.node()}, {os.cpu_count()} CPUs, "
        f"{datetime.date.today().isoformat()}.",
        "",
        "| Scenario | Measure | Median (s) | Min (s) | Max (s) |",
        "|---|---|---|---|---|",
    ]
    for name, runs in results.items():
        for key in runs[0]:
            values = [r[key] for r in runs]
            lines.append(
                f"| {name} | {key} | {statistics.median(values):.1f} | "
                f"{min(values):.1f} | {max(values):.1f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.connect_timeout_s <= 0:
        parser.error("--connect_timeout_s must be > 0, got "
                     f"{args.connect_timeout_s:g}")
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"error: unknown scenario(s) {unknown}: use "
                         f"{', '.join(SCENARIOS)}.")
    results: Dict[str, List[Dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for repeat in range(args.repeats):
                sample = run_scenario(name, tmp, args.connect_timeout_s)
                print(name, repeat, json.dumps(
                    {k: round(v, 2) for k, v in sample.items()}), flush=True)
                results.setdefault(name, []).append(sample)
    atomic_write(args.output + ".json",
                 json.dumps(dict(args=vars(args), results=results), indent=2))
    text = _markdown(results, args)
    atomic_write(args.output + ".md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Times the README's quick-start line 1 and stores what it reached.

    python scripts/quickstart_timing.py                  # in this environment
    python scripts/quickstart_timing.py --env=fresh      # in a new venv
    python scripts/results_tables.py                     # then quote it

Line 1 is read from README.md's "Quick start" block (the same lines
.ci/run runs). With `--env=current` (the default) its `pip install` part is
left out and the training command runs with the interpreter and console
scripts of the current environment on this checkout's code; with `--env=fresh` the whole line runs
in a new virtual environment (the installation needs the package index and
takes minutes). The workdir written in the line is replaced by a new
temporary folder, so that an earlier run is neither resumed nor touched.

The result (docs/results/quickstart.json by default) holds the command as
run, the environment, the test accuracy and loss from the run's
metrics.json, the seconds of its training loop (`wall_time_s` of
metrics.json: training and the final evaluation, after start-up), the
seconds of the whole command, and the machine (CPU, cores, load average).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUTPUT = os.path.join("docs", "results", "quickstart.json")


def quick_start_line(number: int) -> str:
    """str. Quick-start line `number` of README.md, as .ci/run reads it."""
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, ".ci", "quickstart.py"), "line",
         str(number)], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def split_line(line: str) -> List[List[str]]:
    """[[word, ...], ...]. The commands of a line joined by `&&`."""
    commands, current = [], []
    for word in shlex.split(line):
        if word == "&&":
            commands.append(current)
            current = []
        else:
            current.append(word)
    return commands + [current]


def with_workdir(argv: List[str], workdir: str) -> List[str]:
    """[str]. argv with its --workdir replaced by `workdir`."""
    return [f"--workdir={workdir}" if w.startswith("--workdir=") else w
            for w in argv]


def machine() -> Dict[str, object]:
    """dict. CPU model, cores and load average of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f
                     if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(),
            "load_average": list(os.getloadavg()),
            "python": platform.python_version()}


def run(args: argparse.Namespace) -> Dict[str, object]:
    """dict. Runs line 1 as asked and returns the result."""
    line = quick_start_line(1)
    commands = split_line(line)
    temp = tempfile.mkdtemp(prefix="quickstart_")
    workdir = os.path.join(temp, "workdir")
    env = dict(os.environ)
    try:
        if args.env == "fresh":
            venv = os.path.join(temp, "venv")
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
            env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env["PATH"]
            env.pop("PYTHONPATH", None)
            steps = commands
        else:
            env["PATH"] = (os.path.dirname(sys.executable) + os.pathsep
                           + env["PATH"])
            # This checkout's code, whatever the environment has installed.
            env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
            steps = [c for c in commands if c[:1] not in (["pip"],
                                                          ["pip3"])]
        steps = [with_workdir(c, workdir) for c in steps]
        ran = " && ".join(shlex.join(c) for c in steps)
        start = time.perf_counter()
        subprocess.run(["bash", "-euo", "pipefail", "-c", ran], cwd=ROOT,
                       env=env, check=True)
        total = time.perf_counter() - start
        with open(os.path.join(workdir, "metrics.json"),
                  encoding="utf-8") as f:
            metrics = json.load(f)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return {
        "command": "python scripts/quickstart_timing.py"
                   + ("" if args.env == "current" else f" --env={args.env}"),
        "quick_start_line": line,
        "ran": re.sub(re.escape(temp), "$TMP", ran),
        "env": args.env,
        "test_accuracy": metrics["test_accuracy"],
        "test_loss": metrics["test_loss"],
        "test_examples": metrics["test_examples"],
        "steps": metrics["steps"],
        "train_loop_s": metrics["wall_time_s"],
        "total_s": total,
        "machine": machine(),
    }


def build_parser() -> argparse.ArgumentParser:
    """argparse.ArgumentParser. The script's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--env", choices=("current", "fresh"), default="current",
        help="current: the training command in this environment, without "
        "its pip install; fresh: the whole line in a new virtual "
        "environment.")
    parser.add_argument("--output", default=DEFAULT_OUTPUT,
                        help="Where the JSON result goes.")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    result = run(args)
    output = os.path.join(ROOT, args.output)
    os.makedirs(os.path.dirname(output), exist_ok=True)
    tmp = output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    os.replace(tmp, output)
    print(f"{result['test_accuracy']:.1%} test accuracy, "
          f"{result['train_loop_s']:.0f} s training loop, "
          f"{result['total_s']:.0f} s in all; wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

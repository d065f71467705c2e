"""Times the README's quick-start line 1 and stores what it reached.

    python scripts/quickstart_timing.py                  # layered venv
    python scripts/quickstart_timing.py --env=fresh      # a new venv
    python scripts/results_tables.py                     # then quote it

Line 1 is read from README.md's "Quick start" block (the same lines
.ci/run runs) and runs as written, in a new virtual environment layered on
the current one's packages (`--env=layered`, the default: its `pip install
-e .` installs only this checkout and its console scripts), in a new
virtual environment of its own (`--env=fresh`: every requirement comes
from the package index, which takes minutes more), or in the current
environment without its pip install (`--env=current`). The workdir
written in the line is replaced by a new temporary folder, so that an
earlier run is neither resumed nor touched.

The result (docs/results/quickstart.json by default) holds the line, what
ran, the seconds of each of its commands, the test accuracy and loss from
the run's metrics.json, the seconds of its training loop (`wall_time_s` of
metrics.json: training and the final evaluation, after start-up), and the
machine (CPU, cores, load average at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import site
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


ENVS = {
    "layered": "a new virtual environment that sees the current one's "
               "packages: the whole line, its pip install installing only "
               "this checkout",
    "fresh": "a new virtual environment: the whole line, every requirement "
             "installed from the package index",
    "current": "the current environment on this checkout's code, the pip "
               "install left out",
}


def _environment(kind: str, temp: str) -> Dict[str, str]:
    """The process environment the line runs in."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if kind == "current":
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env[
            "PATH"]
        # This checkout's code, whatever the environment has installed.
        env["PYTHONPATH"] = ROOT
        return env
    venv = os.path.join(temp, "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    if kind == "layered":
        # The current environment's packages, after the new one's own (a
        # venv's --system-site-packages would give the base interpreter's).
        # Plain paths: their .pth files (an editable install of another
        # checkout among them) are not run.
        out = subprocess.run(
            [os.path.join(venv, "bin", "python"), "-c",
             "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True)
        with open(os.path.join(out.stdout.strip(), "_layered.pth"), "w",
                  encoding="utf-8") as f:
            f.write("\n".join(site.getsitepackages()) + "\n")
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env["PATH"]
    env["VIRTUAL_ENV"] = venv
    return env


def run(args: argparse.Namespace) -> Dict[str, object]:
    """dict. Runs line 1 as asked and returns the result."""
    line = quick_start_line(1)
    temp = tempfile.mkdtemp(prefix="quickstart_")
    workdir = os.path.join(temp, "workdir")
    try:
        env = _environment(args.env, temp)
        steps = [with_workdir(c, workdir) for c in split_line(line)]
        if args.env == "current":
            steps = [c for c in steps if c[:1] not in (["pip"], ["pip3"])]
        seconds = []
        for step in steps:
            start = time.perf_counter()
            subprocess.run(step, cwd=ROOT, env=env, check=True)
            seconds.append(time.perf_counter() - start)
        with open(os.path.join(workdir, "metrics.json"),
                  encoding="utf-8") as f:
            metrics = json.load(f)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    ran = [re.sub(re.escape(temp), "$TMP", shlex.join(c)) for c in steps]
    return {
        "command": "python scripts/quickstart_timing.py"
                   + ("" if args.env == "layered" else f" --env={args.env}"),
        "quick_start_line": line,
        "env": args.env,
        "env_means": ENVS[args.env],
        "steps": [{"ran": r, "seconds": t} for r, t in zip(ran, seconds)],
        "test_accuracy": metrics["test_accuracy"],
        "test_loss": metrics["test_loss"],
        "test_examples": metrics["test_examples"],
        "train_steps": metrics["steps"],
        "train_loop_s": metrics["wall_time_s"],
        "train_command_s": seconds[-1],
        "total_s": sum(seconds),
        "machine": machine(),
    }


def build_parser() -> argparse.ArgumentParser:
    """argparse.ArgumentParser. The script's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--env", choices=tuple(ENVS), default="layered",
        help="; ".join(f"{k}: {v}" for k, v in ENVS.items()) + ".")
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

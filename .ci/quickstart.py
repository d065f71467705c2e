"""CI helper: the README's quick-start lines and its accuracy promise.

    python .ci/quickstart.py line N          prints quick-start line N (1, 2)
    python .ci/quickstart.py workdir x       prints line 1's --workdir
    python .ci/quickstart.py check WORKDIR   checks WORKDIR/metrics.json

The quick start is the first ```bash block under "## Quick start" in
README.md; it must hold exactly two command lines, the first of which
trains (`keras-vit-train ...` or `python train.py ...`, with --workdir).
The promise is the first
"at least NN.N% test accuracy" in the README's quick-start section.
Standard library only: this runs before anything is installed.
"""

import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def quick_start_section() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    match = re.search(r"^## Quick start\n(.*?)(?=^## )", text, re.M | re.S)
    if not match:
        sys.exit("README.md has no '## Quick start' section.")
    return match.group(1)


def quick_start_lines() -> list:
    block = re.search(r"```bash\n(.*?)```", quick_start_section(), re.S)
    if not block:
        sys.exit("README.md's quick start has no ```bash block.")
    lines = [ln for ln in block.group(1).splitlines() if ln.strip()]
    if len(lines) != 2:
        sys.exit(f"README.md's quick start has {len(lines)} lines, not 2.")
    return lines


def promised_accuracy() -> float:
    match = re.search(r"at least ([0-9.]+)% test accuracy",
                      quick_start_section())
    if not match:
        sys.exit("README.md's quick start states no 'at least NN% test "
                 "accuracy' promise for CI to check.")
    return float(match.group(1)) / 100


def main(argv) -> None:
    if len(argv) == 3 and argv[1] == "line":
        print(quick_start_lines()[int(argv[2]) - 1])
    elif len(argv) == 3 and argv[1] == "workdir":
        line = quick_start_lines()[0]
        if not re.search(r"(keras-vit-train|train\.py)\s", line):
            sys.exit(f"README.md's quick-start line 1 does not train: {line}")
        match = re.search(r"--workdir[= ](\S+)", line)
        print(match.group(1) if match else "")
    elif len(argv) == 3 and argv[1] == "check":
        path = os.path.join(argv[2], "metrics.json")
        if not os.path.exists(path):
            sys.exit(f"FAIL: the quick start wrote no {path}.")
        with open(path, encoding="utf-8") as f:
            metrics = json.load(f)
        got, want = metrics["test_accuracy"], promised_accuracy()
        if got < want:
            sys.exit(f"FAIL: the quick start reached {got:.1%} test "
                     f"accuracy; README.md promises at least {want:.1%}.")
        print(f"quick start: {got:.1%} test accuracy (README promises at "
              f"least {want:.1%}); {metrics.get('wall_time_s', '?')} s")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)

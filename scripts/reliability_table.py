r"""Writes (or checks) docs/reliability.md from tests/reliability_cases.py.

    python scripts/reliability_table.py          # rewrite the page
    python scripts/reliability_table.py --check  # exit 1 if it is stale

Each row is a case of the table in tests/reliability_cases.py; its test is
the function decorated `@covers("<case id>")` in one of `TEST_FILES`, found
here by reading their source (they are not imported, so this script needs
no pytest). The page is written with `keras_vit.storage.atomic`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "reliability.md")
# Importable as a script (python scripts/reliability_table.py).
sys.path.insert(0, ROOT)

from keras_vit.storage.atomic import atomic_write  # noqa: E402
from tests.reliability_cases import BAD_INPUT, CASES, FAULT  # noqa: E402

TEST_FILES = (
    "tests/test_faults.py", "tests/test_bad_inputs.py",
    "tests/test_multiworker_faults.py", "tests/test_serving_polish.py",
    "tests/test_tfds_prepare.py", "tests/test_eval_reruns.py",
    "tests/test_hub_reading.py", "tests/test_predict.py",
    "tests/test_commands.py", "tests/test_litert.py",
    "tests/test_keras_hub_presets.py", "tests/test_analysis_memory.py",
    "tests/test_checkpoint_files.py", "tests/test_evaluate.py",
    "tests/test_analysis.py",
)

_COVERS = re.compile(
    r"^@covers\(([^)]*)\)\s*\n(?:@[^\n]*\n)*def (\w+)", re.MULTILINE
)

HEADER = """\
# Reliability

TPU VMs are preempted, disks fill up, folders hold broken files, and clients
send garbage to servers. This page lists every fault and bad input that the
test suite inflicts on keras_vit, and what the user gets. It is generated
from the test cases (`python scripts/reliability_table.py`), and a test
checks that it is current: every row is proved by the test named in it,
which asserts the error type and every quoted excerpt verbatim.

What holds throughout:

- **No lost or half-written work.** Checkpoints are written under a
  temporary name and published by TensorFlow's rename and state-file update;
  metrics.json, config.json and labels.txt by write-to-temp and rename (the
  temporary name carries its writer, and the next write of the file removes
  one a killed writer left); a SavedModel version under a dotted folder that
  TF Serving ignores, renamed when complete (on gs://, which has no rename,
  copied with its saved_model.pb last). A restart with the same command
  resumes from the newest complete checkpoint. With the default strategy the
  input iterator is checkpointed and augmentation is seeded per example, so
  a resumed run is bit-identical to an uninterrupted one, RandAugment, MixUp
  and CutMix included (their Keras layers draw from per-example and
  per-batch stateless seeds, not from their random state). (MirroredStrategy
  and TPUStrategy iterators cannot be checkpointed: a resumed run restores
  weights and optimizer state exactly but draws a new data order, so it is
  not bit-identical to an uninterrupted run.)
- **No silent wrong answers.** A non-finite loss or gradient stops training
  (naming the step and the last good checkpoint) or, with
  `config.trainer.skip_nonfinite=True`, skips exactly that update and counts it;
  a checkpoint of another model is refused before anything is loaded;
  labels beyond the model's classes stop the pipeline.
- **A model file cannot crash the process, exhaust its memory or reach
  outside its folder.** The fuzz test of tests/test_torch_pickle.py reads
  every kind of hostile file below (pickles nesting 40,000 deep, BUILD on
  storage records, zip members inflating far beyond the file in
  pytorch_model.bin, .keras and .npz files, zero-stride views, shards and
  files linking outside the folder or the cache's repository, refs/ walking
  out of snapshots/, broken JSON, .npy headers declaring terabytes,
  complex and void arrays, hf:// revisions like `..`, Lambda layers, a
  .keras holding a layer or cut short, configs the weights contradict) in
  one child process under a 6 GiB address-space cap: no crash, no
  traceback, no hostile file loaded, no link followed out, each refused in
  one line naming the file, within 64 MiB plus twice the file's size of
  peak memory (every archive member's declared size is checked against
  that bound, from the zip's directory, before anything is inflated).
- **A model is never silently another.** A `.keras` file is a keras_vit
  `VisionTransformer` (returned as itself) or any other Keras model
  (returned as Keras saved it, saying so), never rebuilt from guessed
  parts; a transformers or timm folder is read with the config fields,
  defaults and precedence of the library's own loader, or refused by
  name.
- **Bad input names the problem and the fix**, or is skipped and counted
  where the user asked for skipping (`config.input.skip_bad_images=True`).
- **Every process ends, in bounded time.** A multi-worker worker waits for
  the others at most `config.trainer.connect_timeout_s`, ends on SIGTERM
  while it waits, saves and stops with the others on SIGTERM while it
  trains, and stops within seconds when another worker dies; each of these
  ends in one line (the traceback only with `--verbose`).

Known limits: a change of `num_heads` alone keeps every weight shape, so a
checkpoint cannot reveal it; it is caught by comparing the model fields
of the workdir's config.json, which only helps while that file is the
run's own.
"""


def find_tests() -> Dict[str, List[str]]:
    """{case id: ["tests/file.py::test_name", ...]} from the test sources."""
    found: Dict[str, List[str]] = {}
    for rel in TEST_FILES:
        path = os.path.join(ROOT, rel)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            source = f.read()
        for match in _COVERS.finditer(source):
            ids = re.findall(r"[\"']([\w-]+)[\"']", match.group(1))
            for case_id in ids:
                found.setdefault(case_id, []).append(
                    f"{rel}::{match.group(2)}"
                )
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _quote(excerpt: str) -> str:
    # A backtick inside an excerpt would end the code span early.
    fence = "``" if "`" in excerpt else "`"
    pad = " " if excerpt.startswith("`") or excerpt.endswith("`") else ""
    return f"{fence}{pad}{_cell(excerpt)}{pad}{fence}"


def render() -> str:
    """The Markdown page for the current table."""
    tests = find_tests()
    lines = [HEADER]
    titles = {FAULT: "Faults", BAD_INPUT: "Bad input"}
    number = 0
    for kind in (FAULT, BAD_INPUT):
        cases = [c for c in CASES.values() if c.kind == kind]
        lines.append(f"\n## {titles[kind]} ({len(cases)})\n")
        lines.append(
            "| # | Area | What goes wrong | What the user gets | The message "
            "says (verbatim) | Test |"
        )
        lines.append("|---|---|---|---|---|---|")
        for case in cases:
            number += 1
            gets = case.gets
            if case.error:
                gets = f"`{case.error}`. {gets}"
            says = "<br>".join(_quote(s) for s in case.says) or "—"
            where = "<br>".join(
                f"`{t}`" for t in tests.get(case.id, [])
            ) or "**no test**"
            lines.append(
                f"| {number} | {case.area} | {_cell(case.what)} | "
                f"{_cell(gets)} | {says} | {where} |"
            )
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    """argparse.ArgumentParser. The script's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true",
        help="Exit with status 1 if docs/reliability.md is not current.",
    )
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    text = render()
    if args.check:
        current = ""
        if os.path.exists(DOC):
            with open(DOC, encoding="utf-8") as f:
                current = f.read()
        if current != text:
            print(
                f"{DOC} is stale: run python scripts/reliability_table.py",
                file=sys.stderr,
            )
            return 1
        return 0
    atomic_write(DOC, text)
    print(f"Wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

r"""How an image folder is listed before the first step, both ways of
`keras_vit.data.folders.list_class_folders`: a listing of every folder
and a directory check of every entry (`per_folder`, the way for local
folders) against one glob per level (`glob_per_level`, the way for
gs://), on a local tree of <split>/<class>/ folders: the time and the
number of file-system calls of each.

    python benchmarks/folder_listing.py --classes=5000 --splits=2 \
        --images=2 --repeats=5 --output=benchmarks/results/folder_listing

The tree is made in a temporary folder (empty .jpg files) and deleted
afterwards. Both listings must give the same folders and files. The time
is the local file system's; on gs:// every call is at least one request
(a glob: one paged listing of the objects under the root, 1,000 a page),
which is what the call counts are for.

Writes NAME.json and NAME.md for `--output=NAME`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

# First: keras_vit holds TensorFlow's start-up notices back while it
# loads Keras (keras_vit.quiet_start).
import keras_vit  # noqa: E402, F401

# isort: split
import tensorflow as tf  # noqa: E402
import throughput  # noqa: E402  (beside this file: machine_info)
import throughput_report as report  # noqa: E402

from keras_vit.data import folders  # noqa: E402

WAYS = {"per_folder": False, "glob_per_level": True}


def per_folder(root: str) -> Dict[str, Dict[str, List[str]]]:
    return folders.list_class_folders(root, per_level=False)


def glob_per_level(root: str) -> Dict[str, Dict[str, List[str]]]:
    return folders.list_class_folders(root, per_level=True)


def count_calls(fn, root: str) -> Dict[str, int]:
    """The tf.io.gfile calls `fn(root)` makes, by name."""
    counts: Dict[str, int] = {}
    originals = {n: getattr(tf.io.gfile, n) for n in ("glob", "listdir",
                                                      "isdir")}

    def counted(name):
        def call(*args, **kwargs):
            counts[name] = counts.get(name, 0) + 1
            return originals[name](*args, **kwargs)
        return call

    try:
        for name in originals:
            setattr(tf.io.gfile, name, counted(name))
        fn(root)
    finally:
        for name, original in originals.items():
            setattr(tf.io.gfile, name, original)
    return counts


def make_tree(root: str, splits: int, classes: int, images: int) -> int:
    """Writes the tree; returns the number of folders."""
    folders = 0
    for s in range(splits):
        for c in range(classes):
            folder = os.path.join(root, f"split{s}", f"n{c:08d}")
            os.makedirs(folder)
            folders += 1
            for i in range(images):
                open(os.path.join(folder, f"{i:04d}.jpg"), "wb").close()
    return folders


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=5000)
    parser.add_argument("--splits", type=int, default=2)
    parser.add_argument("--images", type=int, default=2,
                        help="image files per class folder")
    report.add_repeats_and_output(parser)
    return parser


def main(argv=None) -> None:
    args, command = report.parse_counts(
        build_parser(), argv, ("classes", "splits", "images", "repeats"),
        "folder_listing.py")
    machine = throughput.machine_info()
    root = tempfile.mkdtemp(prefix="folder_listing_")
    try:
        folders = make_tree(root, args.splits, args.classes, args.images)
        if per_folder(root) != glob_per_level(root):
            raise SystemExit("FAIL: the two listings differ")
        ways = {"per_folder": per_folder, "glob_per_level": glob_per_level}
        calls = {name: count_calls(fn, root) for name, fn in ways.items()}
        times = {name: [] for name in ways}
        for _ in range(args.repeats):  # alternating, so that both see the
            for name, fn in ways.items():  # same caches
                t0 = time.perf_counter()
                fn(root)
                times[name].append(time.perf_counter() - t0)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    medians = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "command": command,
        "args": vars(args),
        "machine": machine,
        "folders": folders,
        "files": folders * args.images,
        "calls": calls,
        "seconds": times,
        "median_s": medians,
        # > 1: one glob per level is the faster here.
        "speedup": medians["per_folder"] / medians["glob_per_level"],
    }
    report.finish(args.output, result, markdown)


def markdown(result) -> str:
    m, args = result["machine"], result["args"]
    rows = [
        f"| {name} | {result['median_s'][name]:.3f} | "
        f"{min(result['seconds'][name]):.3f} | "
        f"{sum(result['calls'][name].values()):,} ("
        + ", ".join(f"{k} {v:,}" for k, v in
                    sorted(result["calls"][name].items())) + ") |"
        for name in ("per_folder", "glob_per_level")
    ]
    return "\n".join([
        "# Listing an image folder",
        "",
        f"`{result['command']}`",
        "",
        f"- Machine: {m['cpu']}, {m['cores']} cores; local file system; "
        f"load average (1 min) at start {m['load_average'][0]:.2f}.",
        f"- Tree: {args['splits']} splits x {args['classes']} class folders "
        f"= {result['folders']:,} folders, {result['files']:,} files; "
        f"median and best of {args['repeats']} repeats.",
        "",
        "| listing | median s | best s | tf.io.gfile calls |",
        "|---|---|---|---|",
        *rows,
        "",
        f"per_folder time / glob_per_level time: {result['speedup']:.2f}.",
        "",
    ])


if __name__ == "__main__":
    main()

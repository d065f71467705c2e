"""What keras-vit-predict writes of its answers: the top classes of each
image, as a .json or .csv file (whole or not at all) or printed."""

from __future__ import annotations

import csv
import io
import json
import os
import unicodedata
from typing import Optional, Sequence

import numpy as np

from keras_vit.errors import UsageError
from keras_vit.storage.atomic import atomic_write


def top_k(probabilities: np.ndarray, names: Sequence[str], k: int):
    """[[(class, name, probability)] per image], best first."""
    order = np.argsort(-probabilities, axis=-1, kind="stable")[:, :k]
    return [
        [(int(c), names[c], float(p[c])) for c in row]
        for p, row in zip(probabilities, order)
    ]


OUTPUT_EXTENSIONS = (".json", ".csv")


def check_output(path: Optional[str]) -> None:
    """A UsageError, before any image is classified, for an --output that
    write_output cannot write."""
    if path and os.path.splitext(path)[1].lower() not in OUTPUT_EXTENSIONS:
        raise UsageError(f"--output {path}: use a .json or .csv file.")


def write_output(path: str, files, tops, skipped,
                 replace: bool = True) -> None:
    """Writes the predictions, and the files skipped with their reasons,
    as JSON or CSV (by `path`'s extension),
    through a temporary file and a rename (a missing folder is made). A
    file name that is not UTF-8 is written with its odd bytes escaped
    (`caf\\xe9.jpg`), so that the file stays UTF-8."""
    check_output(path)
    files = [printable(f) for f in files]
    skipped = [(printable(f), r) for f, r in skipped]
    if os.path.splitext(path)[1].lower() == ".json":
        data = {
            "predictions": [
                {"file": f, "top_k": [
                    {"class": c, "name": n, "probability": p}
                    for c, n, p in top]}
                for f, top in zip(files, tops)
            ],
            "skipped": [{"file": f, "reason": r} for f, r in skipped],
        }
        atomic_write(path, json.dumps(data, indent=1) + "\n", replace)
        return
    # A row per class of each image's top; a file skipped
    # (--skip_bad_images) a row of its own, its reason in "skipped".
    rows = [("file", "rank", "class", "name", "probability", "skipped")] + [
        (f, rank, c, n, f"{p:.6f}", "")
        for f, top in zip(files, tops)
        for rank, (c, n, p) in enumerate(top, start=1)
    ] + [(f, "", "", "", "", r) for f, r in skipped]
    text = io.StringIO(newline="")
    csv.writer(text).writerows(rows)
    atomic_write(path, text.getvalue(), replace)


def printable(name: str) -> str:
    """A file name as UTF-8 text: bytes that are not UTF-8 (decoded by
    Python as lone surrogates) as backslash escapes."""
    return name.encode("utf-8", "surrogateescape").decode(
        "utf-8", "backslashreplace")


def one_line(name: str) -> str:
    """`printable(name)` with its control characters (a newline, a tab)
    and line separators escaped as Python writes them ("\\n"), so that
    each file is one line of the plain output; other characters (a space
    of any script, a joiner) as they are."""
    return "".join(
        repr(c)[1:-1] if unicodedata.category(c) in ("Cc", "Zl", "Zp")
        else c for c in printable(name))

"""The one reader of label files (a run's labels.txt, an export's, a
--class_names_file): plain Python for local paths, so that a command
names a bad file before TensorFlow loads."""

from __future__ import annotations

from typing import List, Optional

from keras_vit.errors import UsageError
from keras_vit.storage import atomic


def fits_a_line(name) -> bool:
    """Whether `name` is a class name that a label file holds on one line
    and reads back alike: a str, not blank, without a line end."""
    return isinstance(name, str) and bool(name.strip()) and not (
        "\n" in name or "\r" in name)


def read_lines(path: str, where: Optional[str] = None) -> List[str]:
    """The lines of a text file (class names, one per line), in order,
    without their line ends (LF or CRLF) or a UTF-8 byte order mark;
    local or gs://. The one reader of
    label files: a run's, an export's, a --class_names_file. Blank lines at
    the end are dropped; one before a name is a UsageError naming the file
    (`where`, default `path`) and the line: left out, it would shift every
    later name onto the wrong class."""
    # (utf-8-sig: a byte order mark, as Notepad writes, is no name's)
    text = atomic.read_bytes(path).decode("utf-8-sig")
    lines = [line.rstrip("\r") for line in text.split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise UsageError(
                f"{where or path} line {number} is blank: give one class "
                "name per line, in label order (a blank line would shift "
                "the names after it).")
    return lines

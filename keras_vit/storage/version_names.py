"""The version folders of a TF Serving model folder, by name.

TF Serving reads a version folder's name as a signed 64-bit integer
(`safe_strto64`: ASCII digits, an optional minus sign, spaces around
them; "007" is version 7) and skips, without a word, one it cannot read.
The export writes by this rule and the readers list by it, so both take
it from here; a folder is named by its name as listed, not its number.
"""

from __future__ import annotations

import re
from typing import Iterable, List, Optional, Tuple

# The range of versions TF Serving reads (a signed 64-bit integer).
MAX_VERSION = 2**63 - 1
MIN_VERSION = -(2**63)
# safe_strto64's spaces (C's isspace in the "C" locale).
_NUMBER = re.compile(r"[ \t\n\v\f\r]*(-?[0-9]+)[ \t\n\v\f\r]*")


def version_number(name: str) -> Optional[int]:
    """int or None. The version a folder named `name` holds for TF
    Serving (a trailing "/", as gs:// listings give, is dropped); None for
    a name it skips: not ASCII digits ("²" and "٣" pass str.isdigit, TF
    Serving reads neither) or outside a signed 64-bit integer."""
    match = _NUMBER.fullmatch(name.rstrip("/"))
    if match is None:
        return None
    number = int(match.group(1))
    return number if MIN_VERSION <= number <= MAX_VERSION else None


def version_folders(names: Iterable[str]) -> List[Tuple[int, str]]:
    """list of (version, folder name). The versions among folder `names`
    (each without a trailing "/"), in order of version."""
    found = [(version_number(name), name.rstrip("/")) for name in names]
    return sorted((number, name) for number, name in found
                  if number is not None)


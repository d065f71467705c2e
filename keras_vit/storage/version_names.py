"""The version folders of a TF Serving model folder, by name.

TF Serving reads a version folder's name as a signed 64-bit integer in
ASCII digits and skips, without a word, one it cannot read. The export
writes by this rule and the readers list by it, so both take it from here.
"""

from __future__ import annotations

import re
from typing import Iterable, List, Optional

# The highest version TF Serving reads (a signed 64-bit integer).
MAX_VERSION = 2**63 - 1


def version_number(name: str) -> Optional[int]:
    """int or None. The version a folder named `name` holds for TF
    Serving (a trailing "/", as gs:// listings give, is dropped); None for
    a name it skips: not ASCII digits ("²" and "٣" pass str.isdigit, TF
    Serving reads neither) or past MAX_VERSION."""
    name = name.rstrip("/")
    if not re.fullmatch(r"[0-9]+", name) or int(name) > MAX_VERSION:
        return None
    return int(name)


def version_numbers(names: Iterable[str]) -> List[int]:
    """list of int. The versions among folder `names`, in order."""
    return sorted(number for number in map(version_number, names)
                  if number is not None)

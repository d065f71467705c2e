"""Folders a command writes before it publishes them, named after their
writer (`<host>-<pid>`), so that a later command removes the ones whose
writer was killed outright (kill -9, a machine's crash), and only those.

A writer of another machine sharing the folder is never judged: only
this machine's processes (by its host name) that are no longer running.
Containers that share a host name but not process numbers (a host
network) would judge each other's: give each its own host name.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import socket
from typing import Iterable, Optional, Pattern

from absl import logging

# This machine in a writer's name: letters, digits and dots only, a long
# name cut and told apart by its digest (names stay well below 255 bytes).
HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"
if len(HOST) > 24:
    HOST = (f"{HOST[:15]}_"
            f"{hashlib.sha256(HOST.encode()).hexdigest()[:8]}")
# A writer's name as `writer` makes it: (host)-(pid).
WRITER = r"([A-Za-z0-9._]+)-(\d+)"


def writer() -> str:
    """str. This process's name in its unpublished folders' names."""
    return f"{HOST}-{os.getpid()}"


def killed(host: Optional[str], pid: int) -> bool:
    """Whether the writer (`host`, `pid`) is gone: a process of this
    machine (None: a name without a machine, of earlier versions) that
    is no longer running."""
    return host in (None, HOST) and not _running(pid)


def remove_killed(folder: str, pattern: Pattern, what: str) -> None:
    """Removes the files and folders in the local `folder` that a killed
    writer left (`remove_killed_paths`)."""
    if "://" in folder or not os.path.isdir(folder):
        return
    remove_killed_paths((os.path.join(folder, name)
                         for name in os.listdir(folder)), pattern, what)


def remove_killed_paths(paths: Iterable[str], pattern: Pattern,
                        what: str) -> None:
    """Removes each of the local `paths` (files or folders) whose name
    `pattern` matches whole, its groups (host or None, pid) naming a
    `killed` writer; each logged as left by `what` ("an export") that
    was killed."""
    for path in paths:
        match = pattern.fullmatch(os.path.basename(path))
        if match and killed(match.group(1), int(match.group(2))):
            logging.info("Removing %s, left by %s that was killed.", path,
                         what)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.remove(path)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # another user's; no pid of ours
        return True
    return True

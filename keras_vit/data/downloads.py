"""What a user hears while TensorFlow Datasets downloads a data set.

TFDS fetches its files with `requests`, whose urllib3 pool tries each file
again ten times with growing pauses (about 3.5 minutes in all) and logs a
warning at every try: forty lines for a data set of four files on a machine
without network. `network_notices` says the first failure of each host
once, in one line that names how long the tries last and what to do
offline, and keeps the rest for --verbose (DEBUG); `failure_words` turns
the exception that ends the tries into the same words. `tfds_output` keeps
what TFDS prints (its "Downloading and preparing dataset ..." line) off
stdout, where the commands write their results, and shows its progress
bars only on a terminal.

Written here because neither library has a switch for it: TFDS builds its
urllib3 `Retry` inside its download function, and urllib3 logs each try.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from typing import Callable, Iterator, Optional

from keras_vit import progress

# The urllib3 logger that reports each try again.
_POOL_LOGGER = "urllib3.connectionpool"
_HOST = re.compile(r"host='([^']+)'")
# The reason inside urllib3's "connection broken by ..." text.
_REASONS = (
    (re.compile(r"Failed to resolve '[^']+' \(\[Errno -?\d+\] ([^\])]+)\)"),
     None),
    (re.compile(r"\[Errno -?\d+\] ([^'\"\]]+)"), None),
    (re.compile(r"(timed out)"), None),
    (re.compile(r"Max retries exceeded"), "no answer"),
)


# Exceptions (by name: requests', urllib3's, Python's) of no connection.
_NO_CONNECTION = ("ConnectionError", "MaxRetryError", "NameResolutionError",
                  "NewConnectionError", "ConnectTimeout",
                  "ConnectTimeoutError", "ConnectionRefusedError")


def _reason(text: str) -> str:
    for pattern, words in _REASONS:
        match = pattern.search(text)
        if match:
            return words or match.group(1).strip()
    return text[:200] or "no connection"


def offline_fix(name: str) -> str:
    """What a machine without network does for the TFDS data set `name`."""
    return (f"Without network here, prepare it where there is one (`tfds "
            f"build {name} --data_dir=DIR`), copy DIR to this machine and "
            "set config.input.data_dir=DIR.")


def manual_words(builder, label: str, manual: str, missing, files,
                 url: str, has_files: Callable[[], bool]) -> Optional[str]:
    """Why data set `label` (TFDS `builder`) cannot be prepared from the
    manual directory `manual`, or None: the `files` it needs, of which
    `missing` are not there (from `url`); else, for a builder whose data
    only a manual download gives (its MANUAL_DOWNLOAD_INSTRUCTIONS), an
    empty or absent directory (`has_files`, asked only then), with TFDS's
    instructions (TFDS itself would fail there with an AssertionError)."""
    name = builder.info.full_name.split("/")[0]
    build = (f"the next run prepares it (or run `tfds build {name} "
             f"--data_dir=... --manual_dir={manual}`).")
    if missing:
        return (f"{label} needs a manual download: get {url} and put "
                f"{', '.join(files)} into {manual}/ (missing: "
                f"{', '.join(missing)}); {build}")
    told = " ".join(str(getattr(builder, "MANUAL_DOWNLOAD_INSTRUCTIONS", "")
                        or "").split())
    if told and not files and not has_files():
        return (f"{label} needs a manual download into {manual}/ (or the "
                "folder config.input.manual_dir names), which has no "
                f"files. TFDS says: {told.rstrip('.')}. Then {build}")
    return None


class _FirstTryPerHost(logging.Filter):
    """urllib3's try-again warnings: the first of each host becomes one
    line of this run's log, the others are dropped (DEBUG keeps them)."""

    def __init__(self, label: str, name: str):
        super().__init__()
        self.label, self.name, self.hosts = label, name, set()

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if not text.startswith("Retrying"):
            return True
        if logging.getLogger("absl").isEnabledFor(logging.DEBUG):
            return True
        match = _HOST.search(text)
        host = match.group(1) if match else "the download server"
        if host not in self.hosts:
            self.hosts.add(host)
            logging.getLogger("absl").warning(
                "%s: cannot reach %s (%s). TFDS tries again for about 3.5 "
                "minutes; Ctrl-C stops. %s", self.label, host,
                _reason(text), offline_fix(self.name))
        return False


@contextlib.contextmanager
def tfds_output() -> Iterator[None]:
    """While TFDS downloads and prepares a data set: what it prints to
    stdout goes to stderr, and its progress bars (tqdm's, on stderr) are
    shown only when stderr is a terminal, not in a log file or a pipe.
    TFDS's progress-bar switch is put back as it was afterwards."""
    import tensorflow_datasets as tfds

    # TFDS's switch (tfds.display_progress_bar) has no getter.
    switch = sys.modules.get("tensorflow_datasets.core.utils.tqdm_utils")
    shown = bool(getattr(switch, "_active", True))
    tfds.display_progress_bar(shown and progress.is_terminal(sys.stderr))
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        tfds.display_progress_bar(shown)


# Set when Ctrl-C stopped a download: TFDS's download threads go on
# (trying again for minutes) and Python's exit would wait for them.
_abandoned = []


def abandoned() -> bool:
    """Whether Ctrl-C left download threads running in this process (the
    commands then end it without waiting for them)."""
    return bool(_abandoned)


@contextlib.contextmanager
def network_notices(label: str, name: str) -> Iterator[None]:
    """While TFDS downloads the data set `name` (called `label` in
    messages): one line per unreachable host instead of a warning per try
    (`_FirstTryPerHost`). On Ctrl-C the filter stays (the download threads
    go on) and `abandoned` says so."""
    pool = logging.getLogger(_POOL_LOGGER)
    notices = _FirstTryPerHost(label, name)
    pool.addFilter(notices)
    stopped = False
    try:
        yield
    except KeyboardInterrupt:
        stopped = True
        _abandoned.append(name)
        raise
    finally:
        if not stopped:
            pool.removeFilter(notices)


# The first download of this process that ended without a connection:
# later data sets (the other VTAB tasks, few-shot sets) are not tried
# (each would wait through TFDS's tries again).
_no_network = []


def no_network() -> Optional[str]:
    """How an earlier download of this process failed for want of a
    connection, or None."""
    return _no_network[0] if _no_network else None


def failure_words(error: BaseException, name: str) -> Optional[str]:
    """A download's end for want of a connection, in one sentence naming
    the host and the offline fix (remembered: `no_network`); None for any
    other failure."""
    chain, seen = error, set()
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        kind = type(chain).__name__
        if kind in _NO_CONNECTION:
            text = str(chain)
            match = _HOST.search(text)
            host = match.group(1) if match else "the download server"
            if not _no_network:
                _no_network.append(f"{host}: {_reason(text)}")
            return (f"cannot download from {host} ({_reason(text)}). "
                    f"{offline_fix(name)}")
        chain = chain.__cause__ or chain.__context__
    return None

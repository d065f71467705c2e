"""The commands' log: absl at INFO, TensorFlow's Python lines once each,
less the notices about TensorFlow's own work and JAX's INFO lines (kept
for --verbose)."""

from __future__ import annotations

import logging as std_logging
import os
from typing import Callable, Optional

from absl import logging

# TensorFlow INFO lines logged again at every trace of a distributed step
# (TF 2.21): kept for --verbose.
_TRACE_CHATTER = (
    "Collective all_reduce tensors",
    "Collective batch_all_reduce",
    "Collective all_reduce IndexedSlices",
    "Collective all_gather",
    "Reduce to ",  # "... then broadcast to" (MirroredStrategy)
)


# TensorFlow INFO lines about its own work, not the user's run: at every
# checkpoint save (functional_saver.py), a SavedModel signature's input
# names, renamed (signature_serialization.py: lines of thousands of
# characters), and a SavedModel's files in the folder it is written to
# before the command moves it (builder_impl.py, fingerprinting_utils.py),
# and a strategy's set-up and its preemption watchers (the commands say
# the replicas and workers themselves); kept for --verbose.
_TF_NOTICES = (
    "Sharding callback duration",
    "Function `%s` contains input name(s)",
    "Assets written to",
    "No assets to write",
    "Writing fingerprint to",
    "Using MirroredStrategy with devices",
    "Enabled multi-worker collective ops",
    "Check health not enabled",
    "MultiWorkerMirroredStrategy with cluster_spec",
    "Single-worker MultiWorkerMirroredStrategy with local_devices",
    # A TPU's start (tpu_strategy_util.py, tpu_system_metadata.py): the
    # commands say they connect, and the replicas.
    "Deallocate tpu buffers before initializing",
    "Initializing the TPU system",
    "Finished initializing TPU system",
    "Clearing out eager caches",
    "Found TPU system",
    "*** Num TPU",
    "*** Available Device",
    "PreemptionCheckpointHandler initialized or restored",
    "Start watcher for ",
    "Shut down watcher for ",
)


class _DropTraceChatter(std_logging.Filter):
    """Drops the INFO records whose message starts with one of `prefixes`."""

    def __init__(self, prefixes=_TRACE_CHATTER):
        super().__init__()
        self.prefixes = tuple(prefixes)

    def filter(self, record) -> bool:
        return not (
            record.levelno < std_logging.WARNING
            and str(record.msg).startswith(self.prefixes)
        )


class _DropDataLibraryInfo(std_logging.Filter):
    """Drops TensorFlow Datasets' INFO records (which folder it reads, how
    it builds the tf.data pipeline: the commands say what data they read)
    and its warning about a data set's version folder without
    dataset_info.json (an interrupted preparation, which the commands
    redo or name)."""

    def filter(self, record) -> bool:
        from_tfds = f"{os.sep}tensorflow_datasets{os.sep}" in str(
            record.pathname)
        return not from_tfds or (
            record.levelno >= std_logging.WARNING
            and "has no dataset_info.json" not in record.getMessage())


class _Reword(std_logging.Filter):
    """Words keras_vit's warnings as its errors are (`reword`: a config
    field as its override, --config.input.batch_size)."""

    def __init__(self, reword: Callable[[str], str]):
        super().__init__()
        self.reword = reword

    def filter(self, record) -> bool:
        if (record.levelno >= std_logging.WARNING
                and f"{os.sep}keras_vit{os.sep}" in str(record.pathname)):
            record.msg, record.args = self.reword(record.getMessage()), ()
        return True


def _add_filter(logger: std_logging.Logger, prefixes) -> None:
    if not any(isinstance(f, _DropTraceChatter) for f in logger.filters):
        logger.addFilter(_DropTraceChatter(prefixes))


def setup_logging(verbose: bool,
                  reword: Optional[Callable[[str], str]] = None) -> None:
    """absl logging at INFO (DEBUG when `verbose`), TensorFlow's Python
    log lines once each, and without the lines each trace repeats.

    TensorFlow gives its logger a handler of its own when it is imported
    before absl's is installed, so every line came twice (its format and
    absl's); absl's alone remains. `reword` words keras_vit's warnings for
    the command line.
    """
    logging.set_verbosity(logging.DEBUG if verbose else logging.INFO)
    tf_logger = std_logging.getLogger("tensorflow")
    for handler in list(tf_logger.handlers):
        tf_logger.removeHandler(handler)
    tf_logger.propagate = True
    # JAX's INFO lines (under the JAX backend: the platforms it probes and
    # does not find, "Unable to initialize backend 'tpu'") are about its
    # own start, not the run; its warnings stay, and a level the user set
    # (JAX_LOGGING_LEVEL) is theirs.
    if not verbose and not os.environ.get("JAX_LOGGING_LEVEL"):
        std_logging.getLogger("jax").setLevel(std_logging.WARNING)
    # matplotlib's INFO lines ("generated new fontManager", on a first run
    # with an empty cache) are about its cache, not the run; its DEBUG
    # font search (a line per font) and Pillow's (a line per PNG chunk)
    # would bury --verbose's own lines.
    for name in ("matplotlib", "PIL"):
        std_logging.getLogger(name).setLevel(
            std_logging.INFO if verbose else std_logging.WARNING)
    absl_logger = std_logging.getLogger("absl")
    if not verbose:
        _add_filter(tf_logger, _TRACE_CHATTER + _TF_NOTICES)
        _add_filter(absl_logger, _TF_NOTICES)
        if not any(isinstance(f, _DropDataLibraryInfo)
                   for f in absl_logger.filters):
            absl_logger.addFilter(_DropDataLibraryInfo())
    end_rewording()
    if reword is not None:
        absl_logger.addFilter(_Reword(reword))


def end_rewording() -> None:
    """Leaves keras_vit's warnings in the library's words again (a command
    run in-process has ended)."""
    absl_logger = std_logging.getLogger("absl")
    for old in [f for f in absl_logger.filters if isinstance(f, _Reword)]:
        absl_logger.removeFilter(old)

"""The flags train.py and evaluate.py share, the parser that turns a bad
flag or config field into one line, their logging, and their strategy
set-up (one line for each way it fails)."""

from __future__ import annotations

import logging as std_logging
import re
import sys
import traceback

from absl import flags, logging
from ml_collections import config_flags

from keras_vit import config as config_lib
from keras_vit.training import cluster, distribute

FLAGS = flags.FLAGS


def define_common_flags() -> None:
    """--config, --workdir, --strategy and --tpu (once)."""
    if "workdir" in FLAGS:
        return
    config_flags.DEFINE_config_file(
        "config",
        None,
        "Config file (configs/*.py; `path.py:arg` passes arg to get_config).",
        lock_config=True,
    )
    flags.DEFINE_string(
        "workdir", None,
        "A training run's directory (local path or gs://): train.py writes "
        "its config, checkpoints, summaries and metrics there; evaluate.py "
        "reads the trained model from it.",
    )
    flags.DEFINE_enum(
        "strategy", "auto", ["auto", "tpu", "mirrored", "multiworker", "cpu"],
        "tf.distribute strategy: auto picks a TPU if found, else GPUs, else "
        "the CPU.",
    )
    flags.DEFINE_string("tpu", None, 'TPU name or address; "local" on a TPU '
                        "VM.")
    flags.DEFINE_integer(
        "cpu_devices", 0,
        "Split the CPU into this many logical devices, one replica each "
        "for --strategy=mirrored (or auto) on a machine without GPUs: "
        "multi-device training on a laptop.",
    )
    flags.DEFINE_boolean(
        "verbose", False,
        "Debug logging, and the traceback behind a one-line error.",
    )


# TensorFlow INFO lines logged again at every trace of a distributed step
# (TF 2.21): kept for --verbose.
_TRACE_CHATTER = (
    "Collective all_reduce tensors",
    "Collective batch_all_reduce",
    "Collective all_reduce IndexedSlices",
    "Collective all_gather",
    "Reduce to ",  # "... then broadcast to" (MirroredStrategy)
)


class _DropTraceChatter(std_logging.Filter):
    def filter(self, record) -> bool:
        return not (
            record.levelno < std_logging.WARNING
            and str(record.msg).startswith(_TRACE_CHATTER)
        )


def setup_logging(verbose: bool) -> None:
    """absl logging at INFO (DEBUG when `verbose`), TensorFlow's Python
    log lines once each, and without the lines each trace repeats.

    TensorFlow gives its logger a handler of its own when it is imported
    before absl's is installed, so every line came twice (its format and
    absl's); absl's alone remains.
    """
    logging.set_verbosity(logging.DEBUG if verbose else logging.INFO)
    tf_logger = std_logging.getLogger("tensorflow")
    for handler in list(tf_logger.handlers):
        tf_logger.removeHandler(handler)
    tf_logger.propagate = True
    if not verbose and not any(
        isinstance(f, _DropTraceChatter) for f in tf_logger.filters
    ):
        tf_logger.addFilter(_DropTraceChatter())


def create_strategy_or_exit(config):
    """The strategy of --strategy, --tpu and --cpu_devices; a set-up that
    fails ends the process with one line naming the fix.

    Args:
        config: ConfigDict or None. Its connect_timeout_s bounds the wait
            for other workers or a remote TPU (None: the default).
    """
    timeout = None if config is None else config.connect_timeout_s
    try:
        return distribute.create_strategy(
            FLAGS.strategy, FLAGS.tpu, connect_timeout_s=timeout,
            cpu_devices=FLAGS.cpu_devices,
        )
    except cluster.SetupError as e:
        exit_with(e, e.exit_code)


def exit_with(error: BaseException, code: int = 1) -> None:
    """Ends the process with `error` as one line (`error: ...`; the
    traceback too with --verbose)."""
    if FLAGS.is_parsed() and FLAGS.verbose:
        logging.error("%s", "".join(traceback.format_exception(error)))
    message = f"error: {error}"
    logging.error("%s", error)
    if code == 1:
        raise SystemExit(message) from None
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(code) from None


def parse_flags_or_exit(argv) -> list:
    """absl flags parser that turns a misspelt config field or a missing or
    bad flag into one line naming it, not a traceback."""
    try:
        return FLAGS(argv)
    except (AttributeError, KeyError, flags.Error) as e:
        message = str(e.args[0]) if e.args else str(e)
        message = message.replace("\\n", " ").replace("\n", " ")
        message = message.replace("\\'", "'").strip('"')
        # ml_collections says "'field' Did you mean ...": name what it is.
        message = re.sub(
            r"^'+([\w.]+)'+\s*", r"unknown config field '\1'. ", message
        ).rstrip("'")
        if "Did you mean" not in message:
            message = _with_suggestion(message, argv)
        raise SystemExit(
            f"error: {message}\n(config fields: keras_vit/config.py; "
            "flags: --helpfull)"
        ) from None


def _with_suggestion(message: str, argv) -> str:
    """`message` about an unknown --config.<field> plus the closest real
    field (keras_vit/config.py), or the fields of its section."""
    match = re.match(r"unknown config field '([\w.]+)'", message)
    if not match:
        return message
    leaf = match.group(1).rpartition(".")[2]
    for arg in argv:
        path = re.match(r"--config\.([\w.]+)=?", str(arg))
        if path and path.group(1).rpartition(".")[2] == leaf:
            hint = config_lib.unknown_field_message(path.group(1))
            return f"{message.rstrip('. ')}: {hint}"
    return message

"""The flags train.py and evaluate.py share, and the parser that turns a bad
flag or config field into one line."""

from __future__ import annotations

import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from keras_vit import config as config_lib  # noqa: E402

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

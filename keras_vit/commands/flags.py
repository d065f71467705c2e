"""What the six commands share: one definition of each common flag
(`--model`, `--verbose`, `--config`, the run and shape-hint flags), the
model they name (`model_source`), and `run`, the one entry point with the
one error policy.

Each command defines its flags into a FlagValues of its own
(`define_flags(values, argv)`), so that several commands can be parsed in
one process (the tests do). `run` parses the command line into it and
calls the command's main:

- a `UsageError` (this project's checks of what the user gave), a missing
  or existing file, a missing optional package, a run that cannot go on
  (`TrainingError`) or a failed strategy set-up prints one line,
  `keras-vit-<command>: error: <message>`, and exits 1 (a set-up error:
  its own status); `--verbose` adds the traceback;
- so does a bad flag or config field;
- any other exception (a ValueError from inside Keras or TensorFlow
  included) propagates with its traceback.
"""

from __future__ import annotations

import logging as std_logging
import re
import sys
import traceback
from typing import Callable, Optional, Sequence, Tuple, Union

from absl import flags, logging
from ml_collections import config_flags

from keras_vit import config as config_lib
from keras_vit.checkpoint import loader
from keras_vit.checkpoint import workdir as wd
from keras_vit.errors import UsageError
from keras_vit.training import cluster, distribute
from keras_vit.training.resume import TrainingError

PREFIX = "keras-vit-"
# Errors that are the user's to fix: one line (the traceback with
# --verbose). SetupError is a ValueError with an exit status; a missing or
# existing file and a missing optional package are named by the message.
ONE_LINE = (UsageError, cluster.SetupError, TrainingError, FileNotFoundError,
            FileExistsError, ImportError)
HELP_ARGS = ("-h", "--help", "--helpshort", "--helpfull", "-?")
_VERBOSE = re.compile(r"--verbose(=(true|t|1|yes))?", re.I)

MODEL_HELP = (
    "The model: a training workdir, a .keras file, an official or AugReg "
    ".npz (local or gs://), or a Hugging Face / timm folder."
)


# ---------------------------------------------------------------- flags
def define_verbose(values: flags.FlagValues) -> None:
    flags.DEFINE_boolean(
        "verbose", False,
        "Debug logging, and the traceback behind a one-line error.",
        flag_values=values,
    )


def define_model(values: flags.FlagValues, required: bool = True,
                 extra: str = "", ema: bool = True) -> None:
    """--model (and, with `ema`, --no_ema, which picks a workdir's
    weights)."""
    flags.DEFINE_string("model", None, MODEL_HELP + extra,
                        flag_values=values, required=required)
    if not ema:
        return
    flags.DEFINE_boolean(
        "no_ema", False,
        "A training workdir: its raw weights, not the EMA (Polyak) average.",
        flag_values=values,
    )


def parse_image_size(text: str) -> Union[int, Tuple[int, int]]:
    """"384" -> 384; "384x512" or "384,512" -> (384, 512)."""
    parts = str(text).replace(",", "x").lower().split("x")
    try:
        sizes = [int(p) for p in parts]
    except ValueError:
        sizes = []
    if len(sizes) == 1:
        return sizes[0]
    if len(sizes) == 2:
        return sizes[0], sizes[1]
    raise UsageError(
        f"image size {text!r}: use an int (384) or HEIGHTxWIDTH (384x512)."
    )


class ImageSizeParser(flags.ArgumentParser):
    """absl parser of "384" or "384x512"."""

    def parse(self, argument):
        if argument is None or isinstance(argument, (int, tuple)):
            return argument
        try:
            return parse_image_size(argument)
        except UsageError as error:
            raise ValueError(str(error)) from None

    def flag_type(self) -> str:
        return "image size"


_HINTS = {
    "variant": lambda v, help_: flags.DEFINE_string(
        "variant", None, help_, flag_values=v),
    "num_classes": lambda v, help_: flags.DEFINE_integer(
        "num_classes", None, help_, flag_values=v),
    "image_size": lambda v, help_: flags.DEFINE(
        ImageSizeParser(), "image_size", None, help_, flag_values=v),
    "representation_size": lambda v, help_: flags.DEFINE_integer(
        "representation_size", None, help_, flag_values=v),
}
_HINT_HELP = {
    "variant": 'An .npz model: the variant it must be, e.g. "B/16" or '
    '"R50+B/16" (checked against the file; default: read from it).',
    "num_classes": "An .npz model: the head's class count (checked against "
    "the file's).",
    "image_size": "Input resolution, 384 or HEIGHTxWIDTH (position "
    "embeddings resized); default: the model's (an .npz: 224).",
    "representation_size": "An .npz model: its pre-logits width (default: "
    "the file's).",
}


def define_hints(values: flags.FlagValues, *names: str, **helps: str) -> None:
    """The shape hints of an .npz model, by name (variant, num_classes,
    image_size, representation_size); `helps` replaces a help text."""
    for name in names:
        _HINTS[name](values, helps.get(name, _HINT_HELP[name]))


def define_config(values: flags.FlagValues, argv: Sequence[str],
                  required: bool = False) -> None:
    """--config: a packaged config by name (`digits`) or a path, with an
    optional `:arg`; --config.FIELD=VALUE overrides its fields."""
    config_flags.DEFINE_config_file(
        "config", None,
        "A config: one shipped in keras_vit/configs by name (digits, "
        "finetune, ...) or a path (configs/digits.py); `NAME:arg` passes arg "
        "to its get_config. --config.FIELD=VALUE overrides a field.",
        flag_values=values, lock_config=True,
        sys_argv=[resolve_config_arg(a) for a in argv],
    )
    if required:
        flags.mark_flag_as_required("config", flag_values=values)


def define_run_flags(values: flags.FlagValues) -> None:
    """--workdir, --strategy, --tpu and --cpu_devices (train, evaluate)."""
    flags.DEFINE_string(
        "workdir", None,
        "A training run's directory (local path or gs://): train writes its "
        "config, checkpoints, summaries and metrics there; evaluate reads "
        "its model and writes results there.",
        flag_values=values,
    )
    flags.DEFINE_enum(
        "strategy", "auto", ["auto", "tpu", "mirrored", "multiworker", "cpu"],
        "tf.distribute strategy: auto picks a TPU if found, else GPUs, else "
        "the CPU.", flag_values=values,
    )
    flags.DEFINE_string("tpu", None, 'TPU name or address; "local" on a TPU '
                        "VM.", flag_values=values)
    flags.DEFINE_integer(
        "cpu_devices", 0,
        "Split the CPU into this many logical devices, one replica each "
        "for --strategy=mirrored (or auto) on a machine without GPUs: "
        "multi-device training on a laptop.", flag_values=values,
    )


def resolve_config_arg(arg: str) -> str:
    """`--config=NAME[:arg]` with a bare NAME of a packaged config becomes
    its path; other arguments are returned unchanged."""
    match = re.fullmatch(r"--config=([\w]+)((:.*)?)", str(arg), re.S)
    if not match:
        return arg
    path = config_lib.packaged_config(match.group(1))
    return arg if path is None else f"--config={path}{match.group(2)}"


# ----------------------------------------------------------- the model
def model_source(values: flags.FlagValues,
                 text: Optional[str] = None) -> loader.Source:
    """The Source that --model (or `text`) names, with the hints given."""
    text = values.model if text is None else text
    hints = dict(use_ema=not hint(values, "no_ema"))
    for name in ("variant", "posemb_grid"):
        if hint(values, name) is not None:
            hints[name] = hint(values, name)
    return loader.resolve(text, **hints)


def hint(values: flags.FlagValues, name: str):
    """The value of shape-hint flag `name`, None when the command has no
    such flag."""
    return values[name].value if name in values else None


def load_model(values: flags.FlagValues,
               source: Optional[loader.Source] = None, *,
               image_size=None, head: Optional[str] = None):
    """keras.Model. `loader.load_model` of the --model source (or
    `source`) with the shape hints the command line gives.

    Args:
        image_size: the resolution to load at; default --image_size.
        head: str or None. What the command does with the classifier
            ("serve", "predict with"): a model without a classification
            head is then an error naming the fix.
    """
    source = model_source(values) if source is None else source
    kwargs = {}
    if (source.npz or source.hub) and hint(values, "representation_size"):
        kwargs["representation_size"] = hint(values, "representation_size")
    size = image_size if image_size is not None else hint(values,
                                                          "image_size")
    model = loader.load_model(source, size, **kwargs)
    if head is None:
        return model
    if "head" not in {layer.name for layer in model.layers}:
        raise UsageError(
            f"{source.path} has no classification head (a backbone or an "
            f"MPP encoder): nothing to {head}. Fine-tune it first "
            f"(keras-vit-train --config.init.model={source.path} ...)."
        )
    wanted, width = hint(values, "num_classes"), int(model.output_shape[-1])
    if wanted is not None and wanted != width:
        raise UsageError(
            f"--num_classes {wanted} does not match the {width}-class head "
            f"of {source.path}; a new head would be untrained. Drop "
            f"--num_classes or pass {width}."
        )
    return model


def define_resize_size(values: flags.FlagValues) -> None:
    flags.DEFINE_integer(
        "resize_size", None,
        "Resize to this, then center-crop to the input size, as evaluation "
        "does with the same setting; default: resize directly (a training "
        "workdir: the run's eval_resize_size).", flag_values=values,
    )


def resize_size(values: flags.FlagValues,
                source: loader.Source) -> Optional[int]:
    """--resize_size, else a training workdir's eval_resize_size (the
    preprocessing the run evaluated with, which serving must match)."""
    if values.resize_size is not None or not source.workdir:
        return values.resize_size
    return wd.read_config(source.workdir).pp.eval_resize_size


def define_class_names_file(values: flags.FlagValues) -> None:
    flags.DEFINE_string(
        "class_names_file", None, "Class names, one per line, in label "
        "order (default: the model's own, e.g. a workdir's labels.txt or a "
        "Hugging Face config's id2label; else class indices).",
        flag_values=values,
    )


def read_lines(path: str) -> list:
    """The non-empty lines of a text file (class names), in order."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\r\n") for line in f if line.strip()]


# ------------------------------------------------------------- logging
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


def create_strategy(values: flags.FlagValues, config):
    """The strategy of --strategy, --tpu and --cpu_devices (a failed set-up
    raises cluster.SetupError, which `run` prints as one line).

    Args:
        config: ConfigDict or None. Its connect_timeout_s bounds the wait
            for other workers or a remote TPU (None: the default).
    """
    timeout = None if config is None else config.connect_timeout_s
    return distribute.create_strategy(
        values.strategy, values.tpu, connect_timeout_s=timeout,
        cpu_devices=values.cpu_devices,
    )


# ------------------------------------------------------------- running
def report(error: BaseException, program: str, verbose: bool) -> int:
    """Prints `error` as `program: error: message` (after its traceback
    with `verbose`); returns the exit status."""
    if verbose:
        print("".join(traceback.format_exception(error)), file=sys.stderr,
              end="", flush=True)
    message = " ".join(str(error).split()) if str(error) else repr(error)
    print(f"{program}: error: {message}", file=sys.stderr, flush=True)
    return int(getattr(error, "exit_code", 1))


def flag_error_message(error: BaseException, argv: Sequence[str]) -> str:
    """One line for a bad flag or config field (absl, ml_collections)."""
    message = str(error.args[0]) if error.args else str(error)
    message = message.replace("\\n", " ").replace("\n", " ")
    message = message.replace("\\'", "'").strip('"')
    # ml_collections says "'field' Did you mean ...": name what it is.
    named = re.sub(
        r"^'+([\w.]+)'+\s*", r"unknown config field '\1'. ", message
    )
    if named != message:
        message = named.rstrip("'")
    if "Did you mean" not in message:
        message = _with_suggestion(message, argv)
    where = ("config fields: keras_vit/config.py" if "config" in message
             else "flags: --help")
    return f"{message} ({where})"


def parse(values: flags.FlagValues, argv: Sequence[str]) -> list:
    """Parses `argv` (program first) into `values` and absl's own flags;
    the arguments left (program first). A bad flag or config field raises
    UsageError naming it."""
    argv = [resolve_config_arg(a) for a in argv]
    try:
        rest = flags.FLAGS(list(argv), known_only=True)
        return values(rest)
    except (AttributeError, KeyError, flags.Error) as error:
        raise UsageError(flag_error_message(error, argv)) from error


def help_text(program: str, doc: str, values: flags.FlagValues) -> str:
    """`program --help`: the command's doc, then its flags, those of every
    command first."""
    text = "\n" + values.get_help(include_special_flags=False)
    for module in values.flags_by_module_dict():
        title = ("flags of every command" if module == __name__
                 else f"flags of {program}")
        text = text.replace(f"\n{module}:\n", f"\n{title}:\n")
    return f"usage: {program} [flags]\n\n{doc.strip()}\n{text}"


def run(
    name: str,
    define: Callable[[flags.FlagValues, Sequence[str]], None],
    main: Callable[[flags.FlagValues, list], Optional[int]],
    argv: Optional[Sequence[str]] = None,
    doc: str = "",
) -> int:
    """Runs command `name` (keras-vit-`name`): defines its flags, parses
    `argv` (default sys.argv), calls `main(values, positional arguments)`
    and returns the exit status, with the error policy of the module doc.
    """
    program = PREFIX + name
    argv = list(sys.argv if argv is None else argv)
    values = flags.FlagValues()
    define_verbose(values)
    define(values, argv)
    if any(a in HELP_ARGS for a in argv[1:]):
        print(help_text(program, doc, values))
        return 0
    verbose = any(_VERBOSE.fullmatch(str(a)) for a in argv[1:])
    logging.use_absl_handler()
    try:
        rest = parse(values, argv)
        setup_logging(values.verbose)
        status = main(values, rest[1:])
    except ONE_LINE as error:
        return report(error, program, verbose)
    return 0 if status is None else int(status)


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

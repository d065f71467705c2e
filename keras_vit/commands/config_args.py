"""The command line's --config arguments before and after absl parses
them: `--config NAME` joined and a shipped config's NAME made its path,
overrides of fields that moved upgraded (`normalize_argv`), and one line
for a bad flag or config field (`flag_error_message`) or a config file
that fails to run (`config_file_error`); a library message worded with
the command's flags (`shell_words`)."""

from __future__ import annotations

import os
import re
import shlex
import traceback
from typing import List, Mapping, Optional, Sequence

import ml_collections
from absl import flags, logging
from ml_collections import config_flags
from ml_collections.config_flags.config_flags import ConfigFileFlagParser

from keras_vit import config as config_lib
from keras_vit import config_overrides
from keras_vit.errors import UsageError


def refuse_arguments(args: Sequence[str]) -> None:
    """One line for arguments a command does not take, each as the shell
    would need it typed (an empty one, from an unset variable, is '')."""
    if args:
        raise UsageError("Unexpected arguments: "
                         + " ".join(shlex.quote(str(a)) for a in args))


# ------------------------------------------------------------ --config
class WholeConfigParser(ConfigFileFlagParser):
    """--config's parser: the file's config laid over the schema's
    defaults (`config_lib.complete`) before the command line's overrides
    apply, so a field that a partial file (a dict, a partial ConfigDict,
    an earlier version's flat config) leaves out can be overridden too; a
    whole config is kept as the file made it (its field references)."""

    def parse(self, argument):
        config = super().parse(argument)
        if not isinstance(config, (ml_collections.ConfigDict, Mapping)):
            return config  # (None, a file not found: said after parsing)
        try:
            whole = config_lib.complete(config, where=argument.partition(
                ":")[0])
        except UsageError:  # (one line, as a get_config that raised)
            raise ValueError("Error whilst parsing config file:\n\n"
                             + traceback.format_exc()) from None
        if isinstance(config, ml_collections.ConfigDict) and set(
                config_lib.field_names(whole)) == set(
                    config_lib.field_names(config)):
            return config
        return whole


def resolve_config_arg(arg: str) -> str:
    """`--config=NAME[:arg]` with a bare NAME of a packaged config becomes
    its path; other arguments are returned unchanged."""
    match = re.fullmatch(r"--?config=([\w]+)((:.*)?)", str(arg), re.S)
    if not match:
        _check_config_path(str(arg))
        return arg
    try:
        path = config_lib.packaged_config(match.group(1))
    except UsageError as error:
        raise UsageError(f"--config={error}") from None
    return arg if path is None else f"--config={path}{match.group(2)}"


def _check_config_path(arg: str) -> None:
    """`--config=PATH[:arg]` names a file: one line where it does not
    (ml_collections would raise an OSError twice, with tracebacks)."""
    match = re.fullmatch(r"--?config=(.*)", arg, re.S)
    if not match:
        return
    path = match.group(1).split(":", 1)[0]
    if not path:
        raise UsageError("--config= names no config: give a shipped one "
                         f"({', '.join(config_lib.packaged_configs())}) or "
                         "a path (my_config.py).")
    if "://" not in match.group(1) and not os.path.isfile(path):
        raise UsageError(
            f"--config={match.group(1)}: {path} is no file. Give a shipped "
            f"config ({', '.join(config_lib.packaged_configs())}) or the "
            "path of a config file.")


def upgrade_override(arg: str, notes: Optional[List[str]] = None) -> str:
    """`--config.FIELD[=VALUE]` (or `--noconfig.FIELD`) of a field an
    earlier version had elsewhere, at its place now
    (`--config.batch_size=8` -> `--config.input.batch_size=8`), with a
    one-line notice (logged, or added to `notes` for the caller to log
    once the command's log is set up); any other argument as it is."""
    match = re.fullmatch(r"(--?(?:no)?config\.)([\w.]+)((=.*)?)", arg,
                         re.S)
    new = config_lib.moved_path(match.group(2)) if match else None
    if new is None:
        return arg
    flag = match.group(1).lstrip("-")
    note = f"--{flag}{match.group(2)} is now --{flag}{new}."
    if notes is None:
        logging.warning("%s", note)
    else:
        notes.append(note)
    return f"{match.group(1)}{new}{match.group(3)}"


def normalize_argv(argv: Sequence[str],
                   notes: Optional[List[str]] = None) -> List[str]:
    """`argv` with `--config NAME` and `--config.FIELD VALUE` (the space
    form) joined into `--config=NAME` and `--config.FIELD=VALUE`, a
    packaged config's NAME made its path, and the overrides of fields
    that moved since an earlier version upgraded (`upgrade_override`)."""
    out, args = [], list(argv)
    i = 0
    while i < len(args):
        arg = str(args[i])
        if re.fullmatch(r"--?config(\.[\w.]+)?", arg) and i + 1 < len(
                args) and not str(args[i + 1]).startswith("-"):
            arg = f"{arg}={args[i + 1]}"  # also --config.FIELD VALUE
            i += 1
        out.append(upgrade_override(resolve_config_arg(arg), notes))
        i += 1
    return out


def _config_given(argv: Sequence[str]) -> Optional[str]:
    """The last --config=VALUE of `argv` (its path and :argument), or
    None."""
    given = [re.sub(r"^--?config=", "", str(a)) for a in argv
             if re.match(r"^--?config=", str(a))]
    return given[-1] if given else None


def raised_in_config_file(error: BaseException,
                          argv: Sequence[str]) -> bool:
    """Whether `error` came from the code of the --config file in `argv`
    (a KeyError or AttributeError of its get_config, not of a field)."""
    given = _config_given(argv)
    return given is not None and any(
        os.path.basename(frame.filename)
        == os.path.basename(given.partition(":")[0])
        for frame in traceback.extract_tb(error.__traceback__))


def config_file_error(error: BaseException, argv: Sequence[str]) -> str:
    """One line for a --config file that failed to run (a syntax error, an
    import or an exception of its get_config): its name and line."""
    given = _config_given(argv)
    path = given.partition(":")[0] if given else "the config file"
    line, code = getattr(error, "lineno", None), ""
    for frame in traceback.extract_tb(error.__traceback__):
        if os.path.basename(frame.filename) == os.path.basename(path):
            line, code = frame.lineno, (frame.line or "").strip()
    text = (error.msg if isinstance(error, SyntaxError) and error.msg
            else str(error))
    where = f" at line {line}" if line else ""
    # ml_collections: a field the schema lacks, then a dump of the section.
    added = re.search(r'Key "(\w+)" does not exist and cannot be added '
                      r'since the config is locked', text)
    if added:
        guess = re.search(r'Did you mean "(\w+)"', text)
        return (f"--config={given or path} failed{where}"
                f"{f' ({code})' if code else ''}: the config has no field "
                f"{added.group(1)}"
                f"{f'; did you mean {guess.group(1)}?' if guess else '.'} "
                "The fields are those of keras_vit/config_schema.py.")
    return (f"--config={given or path} failed{where}: "
            f"{type(error).__name__}: {text}")


def flag_error_message(error: BaseException, argv: Sequence[str],
                       has_config: bool = True) -> str:
    """One line for a bad flag or config field (absl, ml_collections);
    `has_config`: the command takes --config."""
    message = str(error.args[0]) if error.args else str(error)
    # A config file's get_config raised: ml_collections puts the whole
    # traceback in the flag's message; its last line says what is wrong.
    head, marker, trace = message.partition(
        "Error whilst parsing config file:")
    if marker and "Traceback (most recent call last)" in trace:
        last = trace.strip().splitlines()[-1]
        if re.match(r"^[\w.]*UsageError: ", last):
            return re.sub(r"^[\w.]*UsageError: ", "", last)
        given = _config_given(argv) or "FILE"
        if ":" not in given and re.match(
                r"^TypeError: get_config\(\) missing 1 required "
                r"positional argument", last):
            return (f"--config={given}: its get_config(arg) needs an "
                    f"argument, given after a colon: --config="
                    f"{given.partition(':')[0]}:ARG")
        return f"{head.strip()} {re.sub(r'^[a-z_.]+[.]', '', last)}"
    given = _config_given(argv)
    if given and "Flag --config must have a value other than None" in message:
        return (f"--config={given}: its get_config() returned None: return "
                "the config (keras_vit.config.base_config() with the fields "
                "changed)")
    if "has no attribute 'get_config'" in message:
        return ("the --config file defines no get_config(arg=None) "
                "returning its config (see configs/digits.py)")
    required = re.match(r"flag --(\w+)=None: Flag --\1 must have a value "
                        r"other than None", message)
    if required:
        return f"--{required.group(1)} is required (flags: --help)"
    unknown = re.search(r"Unknown command line flag '-{0,2}config\.([\w.]+)'",
                        message)
    if unknown and not has_config:
        return (f"--config.{unknown.group(1)}: this command takes no "
                "--config (flags: --help)")
    if unknown and not given:
        return (f"--config.{unknown.group(1)} overrides a field of --config, "
                "which is not given: pass --config=NAME too (a shipped "
                "config, e.g. digits, or a config file), or the command's "
                "own flag for it (--help)")
    number = re.match(r"flag (--[\w.]+)=(.*): (invalid literal for int\(\)"
                      r"|could not convert string to float)", message)
    if number:  # (the words of Python's int() and float())
        return (f"{number.group(1)}={number.group(2)} is not a "
                f"{'whole ' if 'int()' in number.group(3) else ''}number.")
    # absl's boolean parser gives its ValueError's args, a tuple's repr.
    boolean = re.match(r"flag (--[\w.]+)=(.*): \('Non-boolean argument to "
                       r"boolean flag', ", message)
    if boolean:
        return (f"{boolean.group(1)}={boolean.group(2)} is not a boolean: "
                "use true or false (1 or 0)")
    section = config_overrides.section_refusal(typed_overrides(argv))
    if section:  # (with a field of it too: ml_collections refuses the
        return section  # pair, as the override of a field the file lacks)
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
    where = ("config fields: keras_vit/config_schema.py" if "config" in message
             else "flags: --help")
    return f"{message} ({where})"


def _with_suggestion(message: str, argv) -> str:
    """`message` about an unknown --config.<field> plus the closest real
    field (keras_vit/config_schema.py), or the fields of its section."""
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


def typed_overrides(argv: Sequence[str]) -> dict:
    """{FIELD: the text typed after --config.FIELD=} of `argv`."""
    out = {}
    for arg in argv:
        match = re.fullmatch(r"--?config\.([\w.]+)=(.*)", str(arg), re.S)
        if match:
            out[match.group(1)] = match.group(2)
    return out


# Library arguments that a flag of another name sets: their words in a
# library message -> (the flag, what the line says instead).
_RENAMED = {
    "`strict`=False": ("non_strict", "--non_strict"),
    "`keep_pre_logits`=True": ("config",
                               "--config.init.keep_pre_logits=True"),
    "`representation_size`": ("config", "--config.model.representation_size"),
    # A tuple's shell form.
    "`posemb_grid`=(rows, cols)": ("posemb_grid", "--posemb_grid=ROWSxCOLS"),
    "`image_size`=(height, width)": ("image_size", "--image_size=HxW"),
    "`keras_vit.list_models()`": ("list_models", "--list_models"),
}
# What a library sentence says where the command has no flag for it.
_UNFLAGGED = {
    "Pass `strict`=False to load what fits and get a report.": (
        "keras-vit-convert --non_strict loads what fits into a .keras "
        "file, with a report."),
    # keras-vit-train, whose config records no grid.
    "pass the grid it was trained with as `posemb_grid`=(rows, cols), or "
    "the `image_size`=(height, width) it was trained at.": (
        "convert it first with the grid it was trained with "
        "(keras-vit-convert --posemb_grid=ROWSxCOLS) and start from the "
        ".keras file."),
    ", or the `image_size`=(height, width) it was trained at": "",
    "Pass its grid as `posemb_grid`=(rows, cols):": (
        "Convert it first with its grid (keras-vit-convert "
        "--posemb_grid=ROWSxCOLS) and start from the .keras file:"),
}


def given_start(values: flags.FlagValues, argument: bool = True
                ) -> Optional[str]:
    """The config.init.model given on the command line: an override, or
    (with `argument`) the config argument's `init=` of a value; not a
    config file's own default. None where none is."""
    config = values.config
    if config is None:
        return None
    start = config_flags.get_override_values(values["config"]).get(
        "init.model")
    arg = config_flags.get_config_filename(values["config"]).partition(":")
    if argument and start is None and re.search(r"(?:^|,)\s*init=\s*[^,\s]",
                                                arg[2]):
        start = config.init.model  # the config argument's init=
    return start


def shell_words(message: str, values: Optional[flags.FlagValues]) -> str:
    """A library message worded for the shell: an argument named in
    backquotes (`variant`) that is one of the command's flags becomes the
    flag (--variant), one that a flag of another name sets becomes that
    flag (`strict`=False: --non_strict; `_RENAMED`), and a config field
    (config.init.model) becomes its override (--config.init.model) where
    the command takes --config, but not another's ("the run's
    config.input.train_split")."""
    if values is None:
        return message
    for words, (name, flag_words) in _RENAMED.items():
        if name in values:
            message = message.replace(words, flag_words)
    for words, instead in _UNFLAGGED.items():
        message = message.replace(words, instead)
    # The Python call that builds another model: a command builds the one
    # its source and flags describe.
    message = re.sub(r"\s*Build the model with keras_vit\.create_model\("
                     r"[^\n]*?\)( with the sizes above)?\.", "", message)

    def flag(match):
        name = match.group(1)
        return f"--{name}" if name in values else match.group(0)

    message = re.sub(r"`(\w+)`", flag, message)
    if "config" not in values:  # "--image_size (config.model.image_size)"
        message = re.sub(r"(--\w+) \(config\.[\w.]+\)", r"\1", message)
    else:
        message = re.sub(
            r"(?<![\w/.`-])(?<!'s )config\.(?!json\b|py\b)"
            r"([a-z_][\w.]*\w)",
            r"--config.\1", message)
        # "`image_size` (--config.model.image_size)" with no such flag:
        # the override alone.
        message = re.sub(r"`\w+` \((--config\.[\w.]+)\)", r"\1", message)
    return message

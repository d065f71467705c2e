"""`run`: the one entry point of the six commands, with the one error
policy, and the parsing of their command lines.

Each command defines its flags into a FlagValues of its own
(`define(values, argv)`), so that several commands can be parsed in one
process (the tests do). `run` parses the command line into it and calls
the command's main:

- a `UsageError` (this project's checks of what the user gave), a missing
  or existing file, a path the file system refuses (a folder where a file
  goes, a bucket out of reach; `exhausted`), memory or disk run out, a
  missing optional package, a run that cannot go on
  (`TrainingError`) or a failed strategy set-up prints one line,
  `keras-vit-<command>: error: <message>`, and exits 1 (a set-up error:
  its own status); `--verbose` adds the traceback. The library names its
  arguments (`variant`) and config fields (config.init.model); the line
  names the command's flags (--variant, --config.init.model);
- so does a bad flag or config field;
- a preempted run (`keras_vit.errors.Preempted`: it saved a checkpoint and
  stopped on SIGTERM) prints `keras-vit-<command>: preempted: <message>`
  (`stopped:` after Ctrl-C) and exits with PREEMPTED_EXIT_CODE (42,
  TensorFlow's restart status);
- Ctrl-C anywhere else, or a second one, prints one line and exits with
  INTERRUPTED_EXIT_CODE (130) (inside a long TensorFlow call: said at
  once, and a second stops at once, `second_press`); SIGTERM outside a
  training loop (which checkpoints on it) unwinds as Ctrl-C does, every
  clean-up included (`Terminated`), and prints `keras-vit-<command>:
  preempted: ...`, exiting with PREEMPTED_EXIT_CODE;
- any other exception (a ValueError from inside Keras or TensorFlow
  included) propagates with its traceback.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import re
import signal
import sys
import traceback
from typing import Callable, Optional, Sequence

from absl import flags, logging
from ml_collections import config_flags

from keras_vit import config_overrides, errors, progress, quiet_start
from keras_vit.commands import listing, second_press
from keras_vit.commands.config_args import (
    config_file_error,
    flag_error_message,
    normalize_argv,
    raised_in_config_file,
    shell_words,
    typed_overrides,
)
from keras_vit.commands.exhausted import exhausted_line, not_permitted
from keras_vit.commands.log_setup import end_rewording, setup_logging
from keras_vit.data import downloads
from keras_vit.errors import (
    INTERRUPTED_EXIT_CODE,
    PREEMPTED_EXIT_CODE,
    Preempted,
    SetupError,
    TrainingError,
    UsageError,
)
from keras_vit.storage import atomic
from keras_vit.version import __version__

PREFIX = "keras-vit-"


def one_line_errors() -> tuple:
    """Errors that are the user's to fix: one line (the traceback with
    --verbose). SetupError is a ValueError with an exit status; a missing
    or existing file, one this user may not write (a read-only workdir)
    and a missing optional package are named by the message."""
    return (UsageError, SetupError, TrainingError, FileNotFoundError,
            FileExistsError, PermissionError, ImportError)


def _tf_errors(*names) -> tuple:
    """TensorFlow's errors `names` (tf.errors) where TensorFlow is loaded;
    none where it is not: none of its errors was raised then, and the
    except clause loads no TensorFlow to find out."""
    tf_errors = getattr(sys.modules.get("tensorflow"), "errors", None)
    return tuple(getattr(tf_errors, n) for n in names) if tf_errors else ()


HELP_ARGS = quiet_start.HELP_ARGS
# The modules whose flags every command has.
SHARED_MODULES = (__name__, "keras_vit.commands.flags")


def define_verbose(values: flags.FlagValues) -> None:
    flags.DEFINE_boolean(
        "verbose", False,
        "Debug logging, and the traceback behind a one-line error.",
        flag_values=values,
    )


# ------------------------------------------------------------- running
def report(error: BaseException, program: str, verbose: bool,
           values: Optional[flags.FlagValues] = None,
           kind: str = "error") -> int:
    """Prints `error` as `program: error: message` (after its traceback
    with `verbose`), worded for the shell; returns the exit status."""
    progress.end_line()  # a count left on its line: the error below it
    if verbose:
        print("".join(traceback.format_exception(error)), file=sys.stderr,
              end="", flush=True)
    message = errors.flat_text(str(error)) or repr(error)
    # An atomic write's temporary file is named as the file it makes.
    message = shell_words(atomic.final_names(message), values)
    print(f"{program}: {kind}: {message}", file=sys.stderr, flush=True)
    return int(getattr(error, "exit_code", 1))


def parse(values: flags.FlagValues, argv: Sequence[str]) -> list:
    """Parses `argv` (program first) into `values` and absl's own flags;
    the arguments left (program first). A bad flag or config field raises
    UsageError naming it."""
    argv, held, pairs = normalize_argv(argv), {}, {}
    if "config" in values:  # --config.FIELD=None of an int field: after
        argv, held = config_overrides.held_nones(argv)
        argv, pairs = config_overrides.held_pairs(argv)  # image_size=HxW
    try:
        rest = flags.FLAGS(list(argv), known_only=True)
        rest = values(rest)
    except (AttributeError, KeyError, flags.Error) as error:
        if raised_in_config_file(error, argv):
            raise UsageError(config_file_error(error, argv)) from error
        raise UsageError(flag_error_message(
            error, argv, "config" in values)) from error
    except Exception as error:  # a config file's own code failed
        raise UsageError(config_file_error(error, argv)) from error
    if "config" in values and values.config is not None:
        overrides = config_flags.get_override_values(values["config"])
        values["config"].value = config_overrides.check_parsed(
            values.config, config_flags.get_config_filename(
                values["config"]).partition(":")[0], overrides)
        config_overrides.set_pairs(values.config, pairs)
        config_overrides.split_string_lists(values.config, overrides,
                                            typed_overrides(argv))
        # --config.model.variant=None: None, not the word.
        config_overrides.command_line_nones(values.config,
                                            {**overrides, **held})
        # --config.model.variant=Ti/16 switches the model, sizes included.
        config_overrides.command_line_variant(values.config, overrides)
        config_overrides.check_epochs(values.config, overrides)
    return rest


EVERY_COMMAND = "flags of every command"


def help_text(program: str, doc: str, values: flags.FlagValues) -> str:
    """`program --help`: the command's doc, then its flags under one
    heading each, those of every command first, by name."""
    titles = {module: (EVERY_COMMAND if module in SHARED_MODULES
                       else f"flags of {program}")
              for module in values.flags_by_module_dict()}
    sections = {}
    text = values.get_help(include_special_flags=False)
    # absl's help: per module, a "module:" line, then its flags, each
    # "  --name: help" and more indented lines.
    for block in re.split(r"\n(?=\S)", text.strip("\n")):
        head, _, body = block.partition("\n")
        title = titles.get(head.rstrip(":"), head.rstrip(":"))
        entries = re.split(r"\n(?=  -)", "\n" + body.rstrip())
        sections.setdefault(title, []).extend(e for e in entries if e)
    order = sorted(sections, key=lambda title: title != EVERY_COMMAND)
    text = "\n\n".join(
        f"{title}:\n" + "\n".join(sorted(sections[title], key=_flag_name))
        for title in order)
    return (f"usage: {program} [flags]\n\n{doc.strip()}\n\n{text}\n\n"
            f"keras-vision-transformer {__version__}")


def _flag_name(entry: str) -> str:
    return re.sub(r"^\s*--(\[no\])?", "", entry)


def _help_or_list(program: str, doc: str, values: flags.FlagValues,
                  argv: Sequence[str], verbose: bool) -> Optional[int]:
    """--help's text, or --list_models[=PATTERN]'s table (no other flag
    needed), and the exit status; None where neither is asked for."""
    pattern = listing.requested(values, argv[1:])
    if pattern is None and not any(a in HELP_ARGS for a in argv[1:]):
        return None
    quiet_start.release()
    if any(a in HELP_ARGS for a in argv[1:]):
        return listing.print_out(help_text(program, doc, values))
    try:
        return listing.print_out(listing.table(pattern))
    except UsageError as error:
        return report(error, program, verbose)


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
    In a command's own process, a Ctrl-C or SIGTERM after that (the
    interpreter's shutdown takes a second or more) ends it at once with
    that status: its work is done, and said."""
    if quiet_start.is_command():
        # What stdout's encoding cannot hold (a file name in another script
        # under a Latin-1 or ASCII locale) is printed escaped (\u516d), not
        # a UnicodeEncodeError once all the work is done.
        with contextlib.suppress(AttributeError, ValueError):
            sys.stdout.reconfigure(errors="backslashreplace")
    status = _run(name, define, main, argv, doc)
    if quiet_start.is_command():
        _exit_on_signal(status)
    return status


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # closed, a broken pipe
            stream.flush()


def _exit_on_signal(status: int) -> None:
    """Output written out now (not at the interpreter's end); then a
    signal exits at once with `status`, and, from the exit handlers on
    (after Python's own signal handling ends, a signal's default would
    kill the process), is ignored."""
    def leave(signum, frame) -> None:
        del signum, frame
        _flush()
        with contextlib.suppress(Exception):  # its lines copied out first
            quiet_start.stop_filtering(timeout=1.0)
        os._exit(status)

    _flush()
    with contextlib.suppress(ValueError):  # not the main thread
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, leave)
        atexit.register(lambda: [signal.signal(s, signal.SIG_IGN) for s in (
            signal.SIGINT, signal.SIGTERM)])


def _say(notes) -> None:
    """Logs each of `notes`, a warning line of the command's log."""
    for note in notes:
        logging.warning("%s", note)


def _run(name, define, main, argv, doc) -> int:
    program = PREFIX + name
    argv = sys.argv if argv is None else argv
    atomic.written_before_stop()  # one an earlier call left: not this one's
    errors.stop_seen()  # nor its stop
    verbose = quiet_start.verbose(argv[1:])
    moved = []  # notices of fields that moved, logged in the log's form
    try:
        argv = normalize_argv(argv, moved)
    except UsageError as error:  # an unknown --config NAME
        quiet_start.release()
        return report(error, program, verbose)
    values = flags.FlagValues()
    define_verbose(values)
    define(values, argv)
    early = _help_or_list(program, doc, values, argv, verbose)
    if early is not None:
        return early
    # A command's stderr, held since `import keras_vit`, goes back; from
    # here on TensorFlow's start-up notices are filtered out, whenever the
    # command's work loads it.
    quiet_start.release()
    if not verbose and quiet_start.is_command():
        quiet_start.filter_stderr()
    logging.use_absl_handler()
    quiet_start.started()
    previous = {}
    with contextlib.suppress(ValueError):  # not the main thread: as it was
        previous = {signum: signal.signal(signum, handler) for signum, handler
                    in ((signal.SIGINT, _interrupt),
                        (signal.SIGTERM, _terminate))}
    unraisable = sys.unraisablehook
    sys.unraisablehook = errors.quiet_unraisable(unraisable)
    watch = second_press.Watch(program).start()  # Ctrl-C inside TensorFlow
    try:
        rest = parse(values, argv)
        setup_logging(values.verbose,
                      functools.partial(shell_words, values=values))
        _say(moved)
        status = main(values, rest[1:])
        errors.check_stop()  # one a library's callback swallowed
    except (PermissionError, *_tf_errors("PermissionDeniedError")) as error:
        line = not_permitted(error, values)  # None: its own message
        return report(UsageError(line) if line else error, program,
                      verbose, values)
    except one_line_errors() as error:
        return report(error, program, verbose, values)
    except (MemoryError, OSError, *_tf_errors("OpError")) as error:
        line = exhausted_line(error, values)
        if line is None:
            raise  # another error: its traceback
        progress.end_line()
        if verbose:  # the allocation's (or write's) traceback, then the line
            print("".join(traceback.format_exception(error)),
                  file=sys.stderr, end="", flush=True)
        return report(UsageError(line), program, False, values)
    except Preempted as error:
        report(error, program, verbose, values, kind=error.kind)
        return PREEMPTED_EXIT_CODE
    except KeyboardInterrupt as error:
        return _interrupted(error, program, verbose, watch)
    except RuntimeError as error:
        stop = _stop_inside(error)
        if stop is None:
            raise
        stop.__context__ = error  # --verbose: TensorFlow's traceback
        return _interrupted(stop, program, verbose, watch)
    finally:
        watch.stop()
        for signum, handler in previous.items():
            if handler is not None:  # (None: not installed from Python)
                signal.signal(signum, handler)
        sys.unraisablehook = unraisable
        errors.stop_seen()
        end_rewording()
    return 0 if status is None else int(status)


class Terminated(KeyboardInterrupt):
    """SIGTERM outside a training loop's checkpointing: raised in the main
    thread so that it unwinds as Ctrl-C does (temporary files and partial
    exports removed), then reported as a preemption."""


def _terminate(signum, frame) -> None:
    del signum, frame
    raise errors.stop_raised(Terminated())


def _interrupt(signum, frame) -> None:
    """Ctrl-C: KeyboardInterrupt, as Python's own handler raises it,
    recorded in case a library's callback swallows it
    (`errors.check_stop`)."""
    del signum, frame
    raise errors.stop_raised(KeyboardInterrupt())


def _stop_inside(error: RuntimeError) -> Optional[KeyboardInterrupt]:
    """The Ctrl-C (or SIGTERM) that came while TensorFlow's C++ code was
    raising another error: pybind11 reports the two as a RuntimeError
    ("... ORIGINAL InvalidArgumentError REPLACED BY KeyboardInterrupt")."""
    found = re.search(r"REPLACED BY (\w+)", str(error))
    kinds = {"KeyboardInterrupt": KeyboardInterrupt, "Terminated": Terminated}
    kind = kinds.get(found.group(1)) if found else None
    return kind() if kind else None


def _interrupted(error: KeyboardInterrupt, program: str, verbose: bool,
                 watch: second_press.Watch) -> int:
    """Ctrl-C outside a training loop's checkpointing (or twice): one
    line, INTERRUPTED_EXIT_CODE; SIGTERM (`Terminated`): one line,
    PREEMPTED_EXIT_CODE. `watch`: the command acts on it now."""
    watch.settle()
    progress.end_line()  # a count left on its line: this line below it
    if verbose:
        print("".join(traceback.format_exception(error)), file=sys.stderr,
              end="", flush=True)
    terminated = isinstance(error, Terminated)
    written = atomic.written_before_stop()  # held until it was whole
    if not terminated:
        line = quiet_start.interrupted_line(program)
    else:
        line = quiet_start.preempted_line(program, again=not written)
    if written:
        line += (f" {', '.join(written)} was complete before the stop: no "
                 "need to write it again.")
    print(line, file=sys.stderr, flush=True)
    code = PREEMPTED_EXIT_CODE if terminated else INTERRUPTED_EXIT_CODE
    if downloads.abandoned():
        # TFDS's download threads would keep the process (Python's exit
        # joins them) for minutes of tries again: nothing else to wait for.
        sys.stdout.flush()
        os._exit(code)
    return code

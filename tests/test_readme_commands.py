"""Every shell command the documentation shows works as written.

README.md, benchmarks/README.md and docs/*.md show shell commands in
```bash / ```sh / ```console / ```shell blocks, and a few inline in the text
(`python scripts/reliability_table.py`). This file extracts all of them
(continuation lines joined, comments and `$ ` prompts dropped, `&&` chains
split) and checks each one as its own test case, named after its file and
line, so that a renamed flag fails here and not for a user:

- project commands (the six keras-vit-* console scripts, train.py,
  evaluate.py, benchmarks/, scripts/ and docs/ scripts) are parsed by
  their real parser without running: a command's absl flags as it defines
  and parses them (keras_vit.commands.flags.parse), the config loaded and
  every `--config.field` override applied (the configs are locked, so a
  misspelt field fails); argparse scripts with parse_args;
- pip lines are parsed (pip's options, each requirement with packaging's
  parser), and every extra they name must exist in setup.cfg;
- `mkdocs build` runs, strictly, into a temporary folder;
- external tools (TF Serving in docker, curl, TensorBoard, gsutil, CI) are
  not run; what they say about this project (the paths an export writes,
  model and signature names, the JSON of a request, a logdir) is checked
  against a real export and a real training run;
- the commands that work on scikit-learn's digits or on small local files
  run for real, shrunk to seconds (RUNS): the digits training, plain and
  few-shot evaluation of that run, two exports, saved_model_cli on an
  export, a checkpoint conversion, two analyses and a prediction.

The options and config fields that the text names outside commands
(`--config.trainer.ema_decay=0.9999`) must exist too.

`python tests/test_readme_commands.py` lists every command and what is done
with it.
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import dataclasses
import functools
import glob
import importlib
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

import pytest
from packaging.requirements import InvalidRequirement, Requirement

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", "benchmarks/README.md"] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs",
                                                             "*.md"))
)
SHELL_LANGUAGES = {"bash", "sh", "console", "shell"}
# Words that start a command written inline in the text.
INLINE_STARTERS = {
    "python", "python3", "pip", "pip3", "bash", "sh", "tensorboard",
    "saved_model_cli", "curl", "docker", "gsutil", "gcloud", "export",
}
OPERATORS = {"&&", "||", ";", "|", "&"}
PYTHONS = {"python", "python3"}
# The project's six commands: the module of each (keras_vit/commands/),
# whose define_flags(values, argv) defines its absl flags.
PARSERS = {
    kind: f"keras_vit.commands.{kind}"
    for kind in ("train", "evaluate", "export", "convert", "analysis",
                 "predict")
}
# Commands that take positional arguments (image files and folders).
POSITIONAL = {"analysis", "predict"}
# `python -m MODULE` commands of the project.
MODULES = {module: kind for kind, module in PARSERS.items()}
SCRIPTS = {"train.py": "train", "evaluate.py": "evaluate"}
# Console scripts (setup.cfg) by the module of their entry point.
ENTRY_MODULES = dict(MODULES)
# Tools outside this project that the documentation shows: not run here.
EXTERNAL = {
    "docker": "TF Serving in a container (needs Docker and the "
    "tensorflow/serving image); its mounts and model config are checked "
    "against a real export",
    "curl": "asks a running TF Serving server; the model name, signature "
    "and request JSON are checked against a real export",
    "tensorboard": "a server; its logdir is checked to be a training run's "
    "workdir holding summaries",
    "saved_model_cli": "ships with TensorFlow: runs on a real export (RUNS)",
    "tensorflow_model_server": "TF Serving's server (not on PyPI); the "
    "files it is given are checked against a real export",
    "gsutil": "Google Cloud SDK: needs a bucket",
    "gcloud": "Google Cloud SDK: needs a project",
    "hf": "the Hugging Face Hub's command line (huggingface_hub): a "
    "download, which needs the network",
    "bash": ".ci/run builds a fresh virtual environment from the package "
    "index; CI runs it",
    "mkdocs": "the documentation site (the docs extra): `mkdocs build` runs "
    "here, strictly, into a temporary folder; `mkdocs serve` is a server "
    "for the same site",
}
# Packages that pip lines name without setup.cfg declaring them.
UNDECLARED_PACKAGES = {
    "tokenizers": "keras-hub's tokenizer, installed beside it with "
    "--no-deps",
    "regex": "imported by keras-hub's tokenizers, installed beside it "
    "with --no-deps",
    "namex": "a Keras requirement, carried as a wheel",
    "optree": "a Keras requirement, carried as a wheel",
}
# `--config.` fields that the text misspells on purpose.
MISSPELT_ON_PURPOSE = {"model.hiden_size"}
# Minimum number of commands per class: a broken extractor fails here.
MIN_COMMANDS = {
    "train": 5, "evaluate": 8, "export": 3, "convert": 1, "analysis": 1,
    "script": 8, "pip": 8, "suite": 2, "env": 1, "external": 8,
    "snippet": 2,
}
RUN_TIMEOUT_S = 300


# ------------------------------------------------------------ extraction
@dataclasses.dataclass(frozen=True)
class Command:
    """One command of a document."""

    doc: str  # "README.md"
    line: int  # line of the document where the command starts
    env: Tuple[str, ...]  # leading VAR=value words
    argv: Tuple[str, ...]  # the command's words, shell quoting removed
    elided: bool = False  # the text writes "..." for options it leaves out
    inline: bool = False  # written in the text, not in a code block
    error: str = ""  # why the line could not be split into words

    @property
    def key(self) -> str:
        """The command as one string, quoting removed."""
        return " ".join(self.env + self.argv)

    @property
    def id(self) -> str:
        text = shlex.join(self.env + self.argv) if self.argv else self.error
        text = text if len(text) <= 80 else text[:77] + "..."
        return f"{self.doc}:{self.line}: {text}"


def _fences(lines):
    """(language, [(line number, text)]) of each fenced code block."""
    block, language, fence = None, None, None
    for number, line in enumerate(lines, start=1):
        match = re.match(r"^\s*(```+|~~~+)\s*([\w+-]*)", line)
        if block is None and match:
            block, language, fence = [], match.group(2).lower(), match.group(1)
        elif block is not None and line.strip().startswith(fence):
            yield language, block
            block = None
        elif block is not None:
            block.append((number, line))


def _logical_lines(block, language):
    """(first line, text) of a shell block's commands: `\\` continuations
    joined, prompts dropped; a console block's output lines are left out."""
    parts, first = [], None
    for number, raw in block:
        line = raw.rstrip()
        if not parts:
            line = line.strip()
            if language == "console" and not line.startswith("$"):
                continue  # output
            line = re.sub(r"^\$\s?", "", line)
            if not line or line.startswith("#"):
                continue
            first = number
        if line.endswith("\\"):
            parts.append(line[:-1].strip())
            continue
        parts.append(line.strip())
        yield first, " ".join(p for p in parts if p)
        parts = []
    if parts:
        yield first, " ".join(parts)


def split_commands(doc: str, line: int, text: str, inline=False):
    """Commands of one logical line: comments dropped, split at &&, ||, ;
    and |; leading VAR=value words kept apart; "..." marks elision."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError as error:
        return [Command(doc, line, (), (), inline=inline,
                        error=f"{text!r}: {error}")]
    commands, current = [], []
    for word in words + [";"]:
        if word not in OPERATORS:
            current.append(word)
            continue
        if current:
            env = []
            while current and re.match(r"^[A-Za-z_]\w*=", current[0]):
                env.append(current.pop(0))
            elided = "..." in current
            argv = tuple(w for w in current if w != "...")
            commands.append(Command(doc, line, tuple(env), argv, elided,
                                    inline))
        current = []
    return commands


def _is_command(span: str) -> bool:
    """Whether an inline code span is a command (`pip install ...`; a lone
    word such as `keras-vit-train` is a name)."""
    words = [w for w in span.split() if not re.match(r"^[A-Za-z_]\w*=", w)]
    return len(words) > 1 and (words[0] in INLINE_STARTERS
                            or words[0].startswith("keras-vit-"))


def extract(doc: str, text: Optional[str] = None) -> List[Command]:
    """Every shell command of a markdown document, in order."""
    if text is None:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
    lines = text.splitlines()
    commands = []
    in_block = set()
    for language, block in _fences(lines):
        in_block.update(n for n, _ in block)
        if language in SHELL_LANGUAGES:
            for line, logical in _logical_lines(block, language):
                commands.extend(split_commands(doc, line, logical))
    # Fence lines themselves are not prose either.
    fence_lines = {
        n for n, line in enumerate(lines, start=1)
        if re.match(r"^\s*(```|~~~)", line)
    }
    for number, line in enumerate(lines, start=1):
        if number in in_block or number in fence_lines:
            continue
        for span in re.findall(r"`([^`\n]+)`", line):
            if _is_command(span):
                commands.extend(split_commands(doc, number, span, True))
    return sorted(commands, key=lambda c: c.line)


def prose_spans(doc: str) -> List[Tuple[int, str]]:
    """(line, text) of the inline code spans outside code blocks."""
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        lines = f.read().splitlines()
    skip = {n for _, block in _fences(lines) for n, _ in block}
    skip |= {n for n, line in enumerate(lines, start=1)
             if re.match(r"^\s*(```|~~~)", line)}
    return [(n, span) for n, line in enumerate(lines, start=1)
            if n not in skip for span in re.findall(r"`([^`\n]+)`", line)]


# -------------------------------------------------------- classification
@functools.lru_cache(maxsize=None)
def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    return config


def entry_points() -> Dict[str, str]:
    """console script name -> its entry point, "module:function"
    (setup.cfg)."""
    text = setup_cfg()["options.entry_points"]["console_scripts"]
    return dict((s.strip() for s in line.split("=", 1))
                for line in text.strip().splitlines())


def console_scripts() -> Dict[str, str]:
    """console script name -> module of its entry point (setup.cfg)."""
    return {name: target.split(":")[0]
            for name, target in entry_points().items()}


def console_script_argv(name: str) -> List[str]:
    """The argv that runs console script `name` as setup.cfg declares it,
    with this interpreter and this checkout's code (an installed wrapper
    may predate the checkout's entry points)."""
    module, function = entry_points()[name].split(":")
    code = (f"import sys; from {module} import {function}; "
            f"sys.argv[0] = {name!r}; sys.exit({function}())")
    return [sys.executable, "-c", code]


def classify(command: Command) -> str:
    """The command's class: train, evaluate, export, convert, analysis,
    script, snippet (`python -c CODE`), pip, suite, env, external, or
    unknown."""
    argv = command.argv
    if not argv:
        return "unknown"
    exe = argv[0]
    if exe in PYTHONS:
        if argv[1:2] == ("-m",) and len(argv) > 2:
            if argv[2] == "pip":
                return "pip"
            if argv[2] == "pytest":
                return "suite"
            return MODULES.get(argv[2], "unknown")
        if argv[1:2] == ("-c",) and len(argv) == 3:
            return "snippet"
        if len(argv) > 1 and argv[1] in SCRIPTS:
            return SCRIPTS[argv[1]]
        if len(argv) > 1 and re.fullmatch(
            r"(benchmarks|scripts|docs)/\w+\.py", argv[1]
        ):
            return "script"
        return "unknown"
    if exe in console_scripts():
        return ENTRY_MODULES.get(console_scripts()[exe], "unknown")
    if exe in ("pip", "pip3"):
        return "pip"
    if exe == "export":
        return "env"
    if exe in EXTERNAL:
        return "external"
    return "unknown"


def project_args(command: Command) -> List[str]:
    """The arguments after the program (python X, python -m M, a console
    script)."""
    argv = list(command.argv)
    if argv[0] in PYTHONS:
        return argv[3:] if argv[1] == "-m" else argv[2:]
    return argv[1:]


@functools.lru_cache(maxsize=None)
def all_commands() -> Tuple[Command, ...]:
    return tuple(c for doc in DOCS for c in extract(doc))


# ---------------------------------------------------------------- parsing
class ParseError(AssertionError):
    pass


def _fail(command: Command, problem: str):
    raise ParseError(
        f"{command.doc} line {command.line} shows\n    {command.key}\n"
        f"which does not work: {problem}"
    )


@contextlib.contextmanager
def _in_root():
    old = os.getcwd()
    os.chdir(ROOT)
    try:
        yield
    finally:
        os.chdir(old)


def absl_flag_values(kind: str, argv=("program",)):
    """A fresh FlagValues with the flags of command `kind` ("train",
    "export", ...), defined by its module as the command does."""
    from absl import flags

    from keras_vit.commands import flags as cli

    values = flags.FlagValues()
    importlib.import_module(PARSERS[kind]).define_flags(values, list(argv))
    cli.define_verbose(values)
    return values


# absl's message for a required flag left out (an elided command may).
_REQUIRED = " is required (flags: --help)"


def parse_absl(command: Command, kind: str):
    """Parses a command's arguments as the program does: a config loaded
    with its argument and every --config.x override applied. Returns the
    FlagValues and the positional arguments."""
    from keras_vit.commands import flags as cli
    from keras_vit.commands import listing

    argv = [f"keras-vit-{kind}"] + project_args(command)
    listed = absl_flag_values(kind, argv)
    if listing.requested(listed, argv[1:]) is not None:
        # --list_models: the command prints the list before any flag is
        # checked (the run checks what it prints).
        listed.mark_as_parsed()
        return listed, []
    with _in_root():
        try:
            values = absl_flag_values(kind, argv)
            rest = cli.parse(values, argv)[1:]
        except Exception as error:  # absl, ml_collections and config errors
            if command.elided and _REQUIRED in str(error):
                values = absl_flag_values(kind, argv)
                values.mark_as_parsed()
                rest = [a for a in argv[1:] if not a.startswith("-")]
            else:
                message = str(error.args[0]) if error.args else str(error)
                _fail(command, f"{type(error).__name__}: "
                      + " ".join(message.split()))
    if rest and kind not in POSITIONAL:
        _fail(command, f"unexpected arguments {rest}")
    return values, rest


def check_train(command: Command) -> str:
    parse_absl(command, "train")
    return "parsed (absl flags, config and overrides)"


def check_evaluate(command: Command) -> str:
    values, _ = parse_absl(command, "evaluate")
    if command.elided:
        return "parsed (absl flags, config and overrides)"
    if values.mode in ("fewshot", "vtab"):
        for name in ("config",):
            if values[name].value is None:
                _fail(command, f"--mode={values.mode} needs --{name}")
        if not (values.output_dir or values.workdir):
            _fail(command, f"--mode={values.mode} needs --output_dir or "
                  "--workdir")
    if not (values.model or values.workdir):
        _fail(command, "name the model: --model or --workdir")
    if values.tasks:
        from keras_vit.data import vtab

        try:
            vtab.select_tasks(values.tasks)
        except ValueError as error:
            _fail(command, f"--tasks: {error}")
    return "parsed (absl flags, config and overrides)"


def parse_argparse(command: Command, parser: argparse.ArgumentParser,
                   args: List[str]) -> argparse.Namespace:
    if command.elided:  # the options left out may be required ones
        for action in parser._actions:
            action.required = False
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), \
                contextlib.redirect_stdout(io.StringIO()):
            return parser.parse_args(args)
    except SystemExit:
        _fail(command, err.getvalue().strip().splitlines()[-1])


def check_project_command(command: Command, kind: str) -> str:
    """export, convert, analysis, predict."""
    values, rest = parse_absl(command, kind)
    if command.elided:
        return "parsed (absl flags)"
    if kind == "analysis" and not values.curves and bool(rest) == (
            values.digits is not None):
        _fail(command, "give images (arguments) or --digits, one of them")
    if kind == "predict" and not rest:
        _fail(command, "give the images to classify as arguments")
    return "parsed (absl flags)"


def check_runnable_module(command: Command) -> None:
    """`python -m M` needs M to run something: a package's __main__ or a
    module's `if __name__ == "__main__"`."""
    if command.argv[0] not in PYTHONS or command.argv[1] != "-m":
        return
    name = command.argv[2]
    spec = importlib.util.find_spec(name)
    if spec is None:
        _fail(command, f"there is no module {name}")
    if spec.submodule_search_locations is not None:
        if importlib.util.find_spec(name + ".__main__") is None:
            _fail(command, f"package {name} has no __main__.py")
        return
    with open(spec.origin, encoding="utf-8") as f:
        if "__name__ == \"__main__\"" not in f.read():
            _fail(command, f"{name} does nothing when run: no "
                  "`if __name__ == \"__main__\"`")


def _load_script(path: str):
    """Imports a benchmarks/ or scripts/ file as `python path` would find
    its neighbours."""
    folder = os.path.dirname(os.path.join(ROOT, path))
    name = "readme_" + re.sub(r"\W", "_", path)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT,
                                                                     path))
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    sys.path[:0] = [folder, ROOT]
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    sys.modules[name] = module
    return module


_ONLY_CHECK_ARGS: Dict[Tuple[str, ...], subprocess.CompletedProcess] = {}


def check_script(command: Command) -> str:
    path = command.argv[1]
    if not os.path.exists(os.path.join(ROOT, path)):
        _fail(command, f"{path} does not exist")
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        source = f.read()
    args = project_args(command)
    if "app.run(" in source:
        # absl flags defined at import: parse in a process of its own.
        argv = (sys.executable, path, *args, "--only_check_args")
        if argv not in _ONLY_CHECK_ARGS:
            _ONLY_CHECK_ARGS[argv] = subprocess.run(
                argv, cwd=ROOT, env=_env(), capture_output=True, text=True,
                timeout=RUN_TIMEOUT_S,
            )
        result = _ONLY_CHECK_ARGS[argv]
        if result.returncode != 0:
            _fail(command, (result.stderr.strip() or "?").splitlines()[-1])
        return "parsed (absl --only_check_args, config and overrides)"
    module = _load_script(path)
    if hasattr(module, "parse_args") and not command.elided:
        # The script's own parse, with its checks of the values.
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                module.parse_args(args)
        except SystemExit:
            _fail(command, err.getvalue().strip().splitlines()[-1])
    elif hasattr(module, "build_parser"):
        parse_argparse(command, module.build_parser(), args)
    else:
        _fail(command, f"{path} has no build_parser() to check its "
              "options with")
    return "parsed (argparse)"


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    return _normal(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*",
                            requirement.strip()).group(0))


def declared_packages() -> Dict[str, str]:
    """package name -> where setup.cfg declares it."""
    config = setup_cfg()
    found = {}
    for line in config["options"]["install_requires"].strip().splitlines():
        found[_requirement_name(line)] = "install_requires"
    for extra, text in config["options.extras_require"].items():
        for line in text.strip().splitlines():
            found.setdefault(_requirement_name(line), f"extra {extra}")
    return found


# pip's options that README lines may use (pip has no public parser to
# import): flag(s) -> whether the option takes a value.
PIP_COMMANDS = ("install", "download", "wheel", "uninstall")
PIP_OPTIONS = {
    ("-e", "--editable"): True, ("-r", "--requirement"): True,
    ("-c", "--constraint"): True, ("-f", "--find-links"): True,
    ("-i", "--index-url"): True, ("--extra-index-url",): True,
    ("-t", "--target"): True, ("-d", "--dest"): True,
    ("--only-binary",): True, ("--no-binary",): True,
    ("--python-version",): True, ("--implementation",): True,
    ("--platform",): True, ("--abi",): True, ("--no-index",): False,
    ("--no-deps",): False, ("-U", "--upgrade"): False,
    ("-q", "--quiet"): False, ("--pre",): False,
    ("--force-reinstall",): False, ("--user",): False,
    ("--no-cache-dir",): False, ("--dry-run",): False,
    ("-y", "--yes"): False,
}


def _pip_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pip", allow_abbrev=False)
    parser.add_argument("requirements", nargs="*")
    for flags, takes_value in PIP_OPTIONS.items():
        if takes_value:
            parser.add_argument(*flags, action="append", default=[])
        else:
            parser.add_argument(*flags, action="store_true")
    return parser


def check_pip(command: Command) -> str:
    argv = list(command.argv)
    words = argv[3:] if argv[0] in PYTHONS else argv[1:]
    if not words or words[0] not in PIP_COMMANDS:
        _fail(command, f"not a pip command this check knows "
              f"({', '.join(PIP_COMMANDS)})")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            options = _pip_parser().parse_args(words[1:])
    except SystemExit as error:
        _fail(command, err.getvalue().strip() or repr(error))
    positional = list(options.requirements) + list(options.editable)
    extras = setup_cfg()["options.extras_require"]
    declared = declared_packages()
    for requirement in positional:
        project = re.fullmatch(r"\.(?:\[([^\]]*)\])?", requirement)
        if project:
            for extra in filter(None, (project.group(1) or "").split(",")):
                if extra.strip() not in extras:
                    _fail(command, f"setup.cfg has no extra {extra!r} "
                          f"(extras: {', '.join(extras)})")
            continue
        if "/" in requirement or requirement.endswith(".whl"):
            continue  # files made by an earlier command
        try:
            name = _normal(Requirement(requirement).name)
        except InvalidRequirement as error:
            _fail(command, f"{requirement!r} is not a requirement: {error}")
        if name not in declared and name not in UNDECLARED_PACKAGES:
            _fail(command, f"package {name} is neither declared in "
                  "setup.cfg nor listed in UNDECLARED_PACKAGES")
    return "parsed (pip's options; extras and packages checked)"


def check_snippet(command: Command) -> str:
    """`python -c CODE`: the code compiles (RUNS runs the ones whose
    output a documented command reads)."""
    try:
        compile(command.argv[2], f"{command.doc}:{command.line}", "exec")
    except SyntaxError as error:
        _fail(command, f"the Python code does not compile: {error}")
    return "compiled (Python)"


def check_suite(command: Command) -> str:
    args = project_args(command)
    for before, word in zip([""] + args, args):
        if before in ("-m", "-k", "-p"):  # a marker, keyword or plugin
            continue
        if before == "-n":  # pytest-xdist's worker count
            if word not in ("auto", "logical") and not word.isdigit():
                _fail(command, f"-n {word}: pytest-xdist takes a count, "
                      "auto or logical")
            continue
        if not word.startswith("-") and not os.path.exists(
            os.path.join(ROOT, word)
        ):
            _fail(command, f"{word} does not exist")
    return "checked (the test suite itself: CI runs it, not rerun here)"


def check_env(command: Command) -> str:
    for assignment in command.argv[1:]:
        name, _, value = assignment.partition("=")
        if name == "TF_CONFIG":
            try:
                tf_config = json.loads(value)
            except ValueError as error:
                _fail(command, f"TF_CONFIG is not JSON: {error}")
            task = tf_config.get("task", {})
            workers = tf_config.get("cluster", {}).get("worker", [])
            if not workers or task.get("type") != "worker" or not (
                0 <= task.get("index", -1) < len(workers)
            ):
                _fail(command, "TF_CONFIG needs cluster.worker and a "
                      "worker task whose index is one of them")
    return "checked (environment)"


def readme_train_workdirs() -> Dict[str, Command]:
    """--workdir of every train.py command -> that command."""
    found = {}
    for command in all_commands():
        if classify(command) == "train":
            found.setdefault(option(command, "workdir"), command)
    return found


def check_external(command: Command, workspace) -> str:
    exe = command.argv[0]
    args = list(command.argv[1:])
    if exe == "tensorboard":
        logdir = option(command, "logdir")
        if shutil.which("tensorboard", path=_bin_path()) is None:
            _fail(command, "tensorboard is not installed (setup.cfg "
                  "declares it)")
        run = readme_train_workdirs().get(logdir)
        if run is None:
            _fail(command, f"--logdir {logdir} is no README training "
                  "run's --workdir")
        if run_key(run):
            run_readme_command(workspace, run_key(run))
            events = glob.glob(os.path.join(workspace.path(logdir), "*",
                                            "events.out.tfevents.*"))
            if not events:
                _fail(command, f"{logdir} holds no TensorBoard summaries "
                      "after the run")
        return "external, not run: " + EXTERNAL[exe]
    if exe in ("docker", "curl", "tensorflow_model_server"):
        run_readme_command(workspace, EXPORT_VIT)
        exports = workspace.path(option(run_command(EXPORT_VIT),
                                        "export_dir"))
        with open(os.path.join(exports, "models.config"),
                  encoding="utf-8") as f:
            models = set(re.findall(r'name: "([^"]+)"', f.read()))
    if exe == "docker":
        mounts, model_config, model_name = {}, None, None
        for i, word in enumerate(args):
            if word == "--mount":
                fields = dict(f.split("=", 1) for f in args[i + 1].split(","))
                mounts[fields["target"]] = fields["source"]
            elif word.startswith("--model_config_file="):
                model_config = word.split("=", 1)[1]
            elif word.startswith("--batching_parameters_file="):
                batching = word.split("=", 1)[1]
                source = mounts.get(os.path.dirname(batching), "$PWD/?")
                if not os.path.exists(workspace.path(os.path.join(
                        source[5:], os.path.basename(batching)))):
                    _fail(command, f"{batching}: an export writes no such "
                          "file")
            elif word == "-e" and args[i + 1].startswith("MODEL_NAME="):
                model_name = args[i + 1].split("=", 1)[1]
        for target, source in mounts.items():
            if not source.startswith("$PWD/"):
                _fail(command, f"mount source {source} is not under $PWD")
            if not os.path.isdir(workspace.path(source[5:])):
                _fail(command, f"an export writes no {source[5:]}")
            if model_name and target != f"/models/{model_name}":
                _fail(command, f"MODEL_NAME={model_name} is not mounted "
                      f"at /models/{model_name}")
            if model_name and model_name not in models:
                _fail(command, f"no export named {model_name}")
        if model_config:
            target = os.path.dirname(model_config)
            path = os.path.join(mounts.get(target, "$PWD/?")[5:],
                                os.path.basename(model_config))
            if not os.path.exists(workspace.path(path)):
                _fail(command, f"{model_config} is {path} on the host, "
                      "which an export does not write")
        return "external, not run: " + EXTERNAL[exe]
    if exe == "tensorflow_model_server":
        for word in args:
            name, _, value = word.partition("=")
            if name.endswith("_file") and value:
                if not value.startswith("$PWD/") or not os.path.exists(
                    workspace.path(value[5:])
                ):
                    _fail(command, f"{name} {value}: an export writes no "
                          "such file under $PWD")
        return "external, not run: " + EXTERNAL[exe]
    if exe == "curl":
        from keras_vit.export import graph

        body = args[args.index("-d") + 1]
        try:
            request = json.loads(re.sub(r"\$\([^)]*\)", "AAAA", body))
        except ValueError as error:
            _fail(command, f"the request body is not JSON: {error}")
        signature = request.get("signature_name", "serving_default")
        if signature not in graph.SIGNATURES:
            _fail(command, f"an export has no signature {signature!r}")
        urls = [w for w in args if w.startswith("http")]
        match = re.search(r"/v1/models/([^/:]+)(?:/versions/\d+)?:predict$",
                          urls[0] if urls else "")
        if not match or match.group(1) not in models:
            _fail(command, f"{urls} names no exported model ({models})")
        return "external, not run: " + EXTERNAL[exe]
    if exe == "mkdocs":
        return check_mkdocs(command)
    if exe == "bash":
        script = args[0] if args else ""
        if not os.path.isfile(os.path.join(ROOT, script)):
            _fail(command, f"{script or 'bash'} does not exist")
        arms = _shell_options(os.path.join(ROOT, script))
        for word in args[1:]:
            if word.startswith("--") and word not in arms:
                _fail(command, f"{script} has no option {word}")
            if not word.startswith("-") and not os.path.exists(
                    os.path.join(ROOT, word)):
                _fail(command, f"{word} does not exist")
    return "external, not run: " + EXTERNAL[exe]


def check_mkdocs(command: Command) -> str:
    """`mkdocs build` runs strictly (a broken link or a missing API entry
    fails) into a temporary folder; `mkdocs serve` serves the same site."""
    args = list(command.argv[1:])
    if not os.path.exists(os.path.join(ROOT, "mkdocs.yml")):
        _fail(command, "there is no mkdocs.yml")
    found = shutil.which("mkdocs", path=_bin_path())
    if found is None:
        pytest.skip("mkdocs is not installed (the docs extra)")
    if args[:1] != ["build"]:
        return "external, not run: " + EXTERNAL["mkdocs"]
    site = tempfile.mkdtemp(prefix="keras_vit_site_")
    try:
        proc = subprocess.run(
            [found, "build", "--strict", "--site-dir", site], cwd=ROOT,
            env=_env(), capture_output=True, text=True,
            timeout=RUN_TIMEOUT_S)
    finally:
        shutil.rmtree(site, ignore_errors=True)
    if proc.returncode != 0:
        _fail(command, proc.stderr.strip()[-2000:])
    return "ran (mkdocs build --strict into a temporary folder)"


# ------------------------------------------------------------------ runs
TINY_TRAINING = (
    "--config.trainer.total_steps=20", "--config.trainer.steps_per_loop=10",
    "--config.log.every_steps=10", "--config.evals.test.every_steps=20",
    "--config.checkpoints.every_steps=20", "--config.schedule.warmup_steps=2",
    "--config.model.hidden_size=32", "--config.model.mlp_dim=64",
    "--config.model.num_layers=1", "--config.input.batch_size=32",
    "--config.trainer.jit_compile=False",
)
# RUNS' keys: the start of the command they run (whatever options the text
# gives after it run too).
TRAIN = "keras-vit-train --config=digits --workdir=/tmp/vit_digits"
EXPORT_VIT = ("keras-vit-export --model=model.keras --export_dir=exports "
              "--model_name=vit")


@dataclasses.dataclass(frozen=True)
class Run:
    """How a documented command runs here: `/tmp/` paths move into a fresh
    folder, which also holds the inputs the text assumes (model.keras,
    labels.txt, photos/, my_photos/, cat.jpg, ViT-B_16.npz) and links to
    configs/,
    train.py and evaluate.py; `python` is this interpreter."""

    check: Callable  # check(workspace, command, result) -> None
    after: Tuple[str, ...] = ()  # RUNS keys whose output this one reads
    extra: Tuple[str, ...] = ()  # arguments appended (shrink the run)
    replace: Tuple[Tuple[str, str], ...] = ()  # (written, used) words
    changed: str = "as written"  # what differs from the text
    env: Tuple[Tuple[str, str], ...] = ()  # variables set (/tmp/ moved)


def option(command: Command, name: str) -> Optional[str]:
    """The value of --name (`--name=v` or `--name v`) in a command."""
    value = None
    argv = command.argv
    for i, word in enumerate(argv):
        if word.startswith(f"--{name}="):
            value = word.split("=", 1)[1]
        elif word == f"--{name}" and i + 1 < len(argv):
            value = argv[i + 1]
    return value


def _assert_files(workspace, result, *paths):
    missing = [p for p in paths if not os.path.exists(workspace.path(p))]
    assert not missing, (
        f"`{result.key}` did not write {missing}\n{result.tail()}")


def _check_train(workspace, command, result):
    # What the README says the workdir collects.
    workdir = option(command, "workdir")
    _assert_files(workspace, result, *(
        os.path.join(workdir, name) for name in (
            "config.json", "labels.txt", "checkpoints", "train", "eval",
            "history.csv", "training_curves.png", "metrics.json")))
    with open(workspace.path(os.path.join(workdir, "metrics.json"))) as f:
        assert "test_accuracy" in json.load(f)


def _check_eval(workspace, command, result):
    assert '"accuracy"' in result.stdout, result.tail()


def _check_fewshot(workspace, command, result):
    out = option(command, "output_dir")
    _assert_files(workspace, result, os.path.join(out, "fewshot.json"),
                  os.path.join(out, "fewshot.md"))


def _check_vtab(workspace, command, result):
    out = option(command, "output_dir")
    _assert_files(workspace, result, *(os.path.join(out, name) for name in (
        "results.jsonl", "results.md", "results.csv", "summary.json")))
    with open(workspace.path(os.path.join(out, "results.jsonl"))) as f:
        assert [json.loads(line)["task"] for line in f] == ["dtd"]
    assert re.search(r"VTAB task \d+ of \d+: DTD", result.stderr), (
        result.tail())


def _check_fewshot_dtd(workspace, command, result):
    _check_fewshot(workspace, command, result)
    out = option(command, "output_dir")
    with open(workspace.path(os.path.join(out, "fewshot.json"))) as f:
        done = json.load(f)
    # DTD is prepared here, the pets are not (and not downloaded).
    assert list(done["results"]) == ["dtd"] and list(done["not_run"]) == [
        "pets"], done["not_run"]


# VTAB-1k and few-shot runs shrunk to seconds, on the DTD that the
# workspace prepared (TFDS, from a loopback download); nothing downloaded.
TINY_TRANSFER = (
    "--config.model.image_size=32", "--config.input.batch_size=8",
    "--config.evals.test.batch_size=32", "--config.trainer.total_steps=2",
    "--config.checkpoints.every_steps=0", "--config.trainer.jit_compile=False",
    "--config.input.shuffle_buffer=8", "--config.input.download=False",
    "--config.input.data_dir=/tmp/tfds",
)
TINY_FEWSHOT = ("--config.model.image_size=32",
                "--config.input.pp.eval_resize_size=32",
                "--config.input.batch_size=64", "--config.input.download=False",
                "--config.input.data_dir=/tmp/tfds")
# hf://google/vit-base-patch16-224 from an offline Hugging Face cache that
# holds a tiny stand-in under that name.
HF_STAND_IN = (("HF_HOME", "/tmp/hf_home"), ("HF_HUB_OFFLINE", "1"))
HF_CHANGED = ("google/vit-base-patch16-224: a tiny stand-in in an offline "
              "Hugging Face cache; ")
TRANSFER_CHANGED = ("a 2-step fine-tuning at 32 x 32, on DTD prepared from "
                    "a loopback download, other tasks not prepared")


def _doc_lines() -> List[str]:
    """The lines of every document, one after the other."""
    lines = []
    for doc in DOCS:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            lines += f.read().splitlines()
    return lines


def readme_export_layout() -> List[str]:
    """The files that the documentation says an export writes (its listing
    of exports/...)."""
    lines = _doc_lines()
    paths = []
    for language, block in _fences(lines):
        if language or not any("models.config" in t for _, t in block):
            continue
        for _, text in block:
            names = re.split(r"\s{2,}", text.strip())[0].split(", ")
            first = names[0]
            paths.append(first)
            paths += [os.path.join(os.path.dirname(first), n)
                      for n in names[1:]]
    return paths


def _check_export(workspace, command, result):
    export_dir = option(command, "export_dir")
    model_name = option(command, "model_name") or "vit"
    version = os.path.join(export_dir, model_name, "1")
    assert result.stdout.strip().splitlines()[-1] == version, result.tail()
    layout = readme_export_layout()
    assert layout, "the documentation lists no export layout"
    _assert_files(workspace, result, *(
        re.sub(r"^exports/(vit/)?",
               lambda m: export_dir + "/" + (model_name + "/" if m.group(1)
                                             else ""), p)
        for p in layout))


def _check_saved_model_cli(workspace, command, result):
    from keras_vit.export import graph

    for signature in graph.SIGNATURES:
        assert f"signature_def['{signature}']" in result.stdout, (
            result.tail())


def _check_convert(workspace, command, result):
    import keras

    import keras_vit  # noqa: F401  (registers the layers)

    output = option(command, "output")
    size = int(option(command, "image_size"))
    _assert_files(workspace, result, output)
    model = keras.saving.load_model(workspace.path(output), compile=False)
    assert tuple(model.input_shape) == (None, size, size, 3)
    assert model.output_shape[-1] == int(option(command, "num_classes"))


def _check_convert_features(workspace, command, result):
    import keras
    import numpy as np

    import keras_vit

    output = option(command, "output")
    _assert_files(workspace, result, output)
    assert "Dropped head/kernel" in result.stdout, result.tail()
    model = keras.saving.load_model(workspace.path(output), compile=False)
    run = keras_vit.load_model(workspace.path(option(command, "model")))
    assert model.output_shape == (None, run.architecture.hidden_size)
    x = np.random.default_rng(0).uniform(
        -1, 1, (2, *run.input_shape[1:])).astype("float32")
    np.testing.assert_allclose(model(x), keras_vit.features_model(run)(x),
                               atol=1e-6)


def _check_analysis(workspace, command, result):
    figures = re.findall(r"^\| `(\w+\.png)` \|", "\n".join(_doc_lines()),
                         re.M)
    assert len(figures) == 4, figures
    out = option(command, "output_dir")
    _assert_files(workspace, result, os.path.join(out, "analysis.json"),
                  *(os.path.join(out, name) for name in figures))


def _check_curves(workspace, command, result):
    path = os.path.join(option(command, "curves"), "training_curves.png")
    _assert_files(workspace, result, path)
    assert result.stdout.strip().endswith(path), result.tail()


def _check_predict(workspace, command, result):
    for name in sorted(os.listdir(workspace.path("photos"))):
        assert name in result.stdout, result.tail()


def _check_folder_train(workspace, command, result):
    _check_train(workspace, command, result)
    workdir = option(command, "workdir")
    with open(workspace.path(os.path.join(workdir, "config.json"))) as f:
        saved = json.load(f)
    # The resolution of the model it started from; 2 epochs of 20 photos
    # at batch 8; the held-out fifth scored.
    assert saved["model"]["image_size"] == 32, saved["model"]
    assert saved["trainer"]["total_steps"] == 5, saved["trainer"]
    assert saved["evals"]["test"]["split"] == "val"


def _check_predict_folder(workspace, command, result):
    folder = workspace.path([a for a in command.argv
                             if not a.startswith("-")][-1])
    for name in sorted(os.listdir(folder)):
        assert name in result.stdout, result.tail()


def _check_npy(workspace, command, result):
    import numpy as np

    name = re.search(r"np\.save\('([^']+)'", command.argv[2]).group(1)
    _assert_files(workspace, result, name)
    assert np.load(workspace.path(name)).shape[0] == 1  # a batch of one


def _check_listing(workspace, command, result):
    """The released models the pattern matches, a header first."""
    import keras_vit

    pattern = option(command, "list_models")
    lines = result.stdout.splitlines()
    assert lines[0].split()[-1] == "--model", result.tail()
    assert len(lines) == 1 + len(keras_vit.list_models(pattern)), lines


def _check_saved_model_run(workspace, command, result):
    """The outputs of the signature the command runs."""
    from keras_vit.export import graph

    signature = option(command, "signature_def")
    assert signature in graph.SIGNATURES, signature
    keys = (["features"] if signature == "features" else
            ["class_names", "classes", "probabilities", "scores"])
    for key in keys:
        assert f"Result for output key {key}:" in result.stdout, (
            result.tail())
    if signature != "features":  # labels.txt's names, as bytes
        assert re.search(r"\[\[b'\d'", result.stdout), result.tail()


# saved_model_cli with image bytes: the .npy files the text makes first.
CAT_NPY = ("python -c import numpy as np; np.save('cat.npy', np.array("
           "[open('cat.jpg', 'rb').read()], dtype=np.bytes_))")
PIXELS_NPY = ("python -c import numpy as np, tensorflow as tf; np.save("
              "'pixels.npy', tf.cast(tf.io.decode_jpeg(open('cat.jpg', "
              "'rb').read(), channels=3, dct_method='INTEGER_ACCURATE')"
              "[None], tf.float32).numpy())")
SAVED_MODEL_RUN = ("saved_model_cli run --dir exports/vit/1 --tag_set serve "
                   "--signature_def ")
CAT_CHANGED = "cat.jpg: a JPEG crop of scikit-learn's china.jpg"

# The README's own photos: the tiny model.keras in place of the download
# of ViT-B_16 (its 32 x 32 input the run takes), a short run.
FOLDER_TRAIN = "keras-vit-train --config=folder:my_photos"
FOLDER_CHANGED = ("my_photos/: 12 JPEG crops of each of scikit-learn's two "
                  "sample photos; ")

RUNS: Dict[str, Run] = {
    CAT_NPY: Run(_check_npy, changed=CAT_CHANGED),
    PIXELS_NPY: Run(_check_npy, changed=CAT_CHANGED),
    SAVED_MODEL_RUN + "serving_default --inputs image_bytes=cat.npy": Run(
        _check_saved_model_run, after=(EXPORT_VIT, CAT_NPY)),
    SAVED_MODEL_RUN + "features --inputs image_bytes=cat.npy": Run(
        _check_saved_model_run, after=(EXPORT_VIT, CAT_NPY)),
    SAVED_MODEL_RUN + "predict_images --inputs images=pixels.npy": Run(
        _check_saved_model_run, after=(EXPORT_VIT, PIXELS_NPY)),
    FOLDER_TRAIN: Run(
        _check_folder_train,
        replace=(("--model=ViT-B_16", "--model=model.keras"),),
        extra=("--config.trainer.epochs=2", "--config.input.batch_size=8",
               "--config.trainer.jit_compile=False"),
        changed=FOLDER_CHANGED + "--model=model.keras (a tiny ViT at 32 x "
        "32) in place of the download of ViT-B_16; 2 epochs at batch 8"),
    "keras-vit-evaluate --mode=eval --workdir=/tmp/vit_photos": Run(
        _check_eval, after=(FOLDER_TRAIN,)),
    "keras-vit-predict --model=/tmp/vit_photos my_photos/flower/": Run(
        _check_predict_folder, after=(FOLDER_TRAIN,),
        changed=FOLDER_CHANGED.rstrip("; ")),
    TRAIN: Run(_check_train, extra=TINY_TRAINING,
               changed="a 1-layer width-32 model for 20 steps"),
    "keras-vit-evaluate --mode=eval --workdir=/tmp/vit_digits": Run(
        _check_eval, after=(TRAIN,)),
    "keras-vit-evaluate --mode=fewshot --config=fewshot:digits":
        Run(_check_fewshot, after=(TRAIN,)),
    "keras-vit-evaluate --mode=vtab --config=vtab --tasks=natural "
    "--model=hf://google/vit-base-patch16-224": Run(
        _check_vtab, extra=TINY_TRANSFER, env=HF_STAND_IN,
        changed=HF_CHANGED + TRANSFER_CHANGED),
    "keras-vit-evaluate --mode=vtab --config=vtab --tasks=dtd "
    "--workdir=/tmp/vit_digits": Run(
        _check_vtab, after=(TRAIN,), extra=TINY_TRANSFER,
        changed=TRANSFER_CHANGED),
    "keras-vit-evaluate --mode=fewshot --config=fewshot:dtd,pets": Run(
        _check_fewshot_dtd, extra=TINY_FEWSHOT, env=HF_STAND_IN,
        changed=HF_CHANGED + "probes at 32 x 32 on DTD prepared from a "
        "loopback download, pets not prepared"),
    EXPORT_VIT: Run(_check_export,
                    changed="model.keras: a tiny 10-class ViT"),
    "keras-vit-export --model=/tmp/vit_digits --export_dir=exports "
    "--model_name=digits": Run(_check_export, after=(TRAIN,)),
    "saved_model_cli show --dir exports/vit/1": Run(
        _check_saved_model_cli, after=(EXPORT_VIT,)),
    "keras-vit-convert --model=imagenet21k+imagenet2012/ViT-B_16": Run(
        _check_convert, replace=(
            ("--model=imagenet21k+imagenet2012/ViT-B_16",
             "--model=ViT-B_16.npz"), ("--variant=B/16", "--variant=Ti/16")),
        changed="ViT-B_16.npz, a Ti/16 in the released layout, in place of "
        "the download of imagenet21k+imagenet2012/ViT-B_16; "
        "--variant=Ti/16"),
    "keras-vit-convert --list_models=*B_16*": Run(_check_listing),
    "keras-vit-convert --model=/tmp/vit_digits --num_classes=0": Run(
        _check_convert_features, after=(TRAIN,)),
    "keras-vit-analysis --model=vit.keras --output_dir=analysis/": Run(
        _check_analysis, changed="vit.keras: a tiny ViT; photos/: 2 PNGs"),
    "keras-vit-analysis --model=/tmp/vit_digits --digits=8": Run(
        _check_analysis, after=(TRAIN,)),
    "keras-vit-analysis --curves=/tmp/vit_digits": Run(
        _check_curves, after=(TRAIN,)),
    "keras-vit-predict --model=/tmp/vit_digits photos/": Run(
        _check_predict, after=(TRAIN,), changed="photos/: 2 PNGs"),
}


def run_key(command: Command) -> Optional[str]:
    """The RUNS key of a command, or None if it is not run."""
    for key in RUNS:
        if command.key == key or command.key.startswith(key + " "):
            return key
    return None


def run_command(key: str) -> Command:
    """The one documented command that RUNS[key] runs."""
    found = {c.key: c for c in all_commands() if run_key(c) == key}
    assert len(found) == 1, (
        f"RUNS[{key!r}] should match one documented command, not "
        f"{sorted(found)}")
    return next(iter(found.values()))


@dataclasses.dataclass
class Result:
    key: str
    argv: List[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def tail(self) -> str:
        return (f"argv: {self.argv}\nexit {self.returncode} after "
                f"{self.seconds:.0f} s\nstdout: {self.stdout[-1500:]}\n"
                f"stderr: {self.stderr[-3000:]}")


class Workspace:
    """The folder README commands run in, and what they did."""

    def __init__(self, folder: str):
        self.folder = folder
        self.results: Dict[str, Result] = {}

    def path(self, written: str) -> str:
        """Where a path of the text lies here."""
        if written.startswith("/tmp/"):
            return os.path.join(self.folder, "tmp", written[5:])
        return os.path.join(self.folder, written)

    def word(self, written: str) -> str:
        return written.replace("/tmp/", os.path.join(self.folder, "tmp", ""))


def _bin_path() -> str:
    return os.pathsep.join([os.path.dirname(sys.executable),
                            os.environ.get("PATH", "")])


def _env() -> Dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""),
        KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2",
        CUDA_VISIBLE_DEVICES="", PATH=_bin_path(),
    )
    return env


def run_readme_command(workspace: Workspace, key: str) -> Result:
    """Runs the documented command of RUNS[key] (once)."""
    if key in workspace.results:
        return workspace.results[key]
    spec = RUNS[key]
    for before in spec.after:
        earlier = run_readme_command(workspace, before)
        assert earlier.returncode == 0, (
            f"`{key}` needs `{before}` first, which failed:\n"
            f"{earlier.tail()}")
    command = run_command(key)
    replace = dict(spec.replace)
    argv = [workspace.word(replace.get(w, w)) for w in command.argv]
    argv += [workspace.word(w) for w in spec.extra]
    if argv[0] in PYTHONS:
        argv[0] = sys.executable
    elif argv[0] in entry_points():
        argv[:1] = console_script_argv(argv[0])
    else:
        found = shutil.which(argv[0], path=_bin_path())
        if found is None:
            pytest.skip(f"{argv[0]} is not installed")
        argv[0] = found
    env = _env()
    env.update(w.split("=", 1) for w in command.env)
    env.update((k, workspace.word(v)) for k, v in spec.env)
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=workspace.folder, env=env,
                              capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as error:
        code, out, err = -9, str(error.stdout or ""), (
            f"timed out after {RUN_TIMEOUT_S} s")
    result = Result(command.key, argv, code, out, err,
                    time.perf_counter() - start)
    workspace.results[key] = result
    return result


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A folder with the inputs the README's runnable commands assume."""
    import keras
    import numpy as np
    from PIL import Image

    import keras_vit
    from tests.photo_folder import write_photo_folder

    folder = str(tmp_path_factory.mktemp("readme"))
    os.makedirs(os.path.join(folder, "tmp"))
    for name in ("configs", "train.py", "evaluate.py"):
        os.symlink(os.path.join(ROOT, name), os.path.join(folder, name))
    keras.utils.set_random_seed(0)
    tiny = keras_vit.create_model(
        None, num_classes=10, image_size=32, patch_size=8, hidden_size=32,
        num_layers=1, num_heads=2, mlp_dim=64, head_zero_init=False)
    for name in ("model.keras", "vit.keras"):
        tiny.save(os.path.join(folder, name))
    with open(os.path.join(folder, "labels.txt"), "w") as f:
        f.write("\n".join(str(i) for i in range(10)) + "\n")
    write_photo_folder(os.path.join(folder, "my_photos"))
    shutil.copy(os.path.join(folder, "my_photos", "china", "china_00.jpg"),
                os.path.join(folder, "cat.jpg"))
    os.makedirs(os.path.join(folder, "photos"))
    rng = np.random.default_rng(0)
    for i in range(2):
        pixels = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(os.path.join(folder, "photos",
                                                  f"{i}.png"))
    # Released-checkpoint layout, at Ti/16 size to keep the run short.
    keras_vit.save_npz(keras_vit.create_model("Ti/16", num_classes=1000),
                       os.path.join(folder, "ViT-B_16.npz"))
    keras.backend.clear_session()
    # DTD prepared by TFDS from a loopback download (/tmp/tfds), and a tiny
    # model as google/vit-base-patch16-224 in a Hugging Face cache.
    from tensorflow_datasets.image_classification import dtd

    from keras_vit.data import vtab
    from tests import fake_tfds, model_cache

    www = os.path.join(folder, "www")
    os.makedirs(www)
    fake_tfds.write_dtd_archive(www)
    real_url = dtd._DATA_URL
    with fake_tfds.serve(www) as (url, _):
        dtd._DATA_URL = url
        try:
            vtab.prepare("dtd", os.path.join(folder, "tmp", "tfds"))
        finally:
            dtd._DATA_URL = real_url
    model_cache.fill_hf_cache(os.path.join(folder, "tmp", "hf_home", "hub"),
                              repo="google/vit-base-patch16-224")
    return Workspace(folder)


# ------------------------------------------------------------------ tests
def check_command(command: Command, workspace_getter) -> str:
    """Checks one command; returns what was done with it."""
    kind = classify(command)
    argv = command.argv
    if kind == "unknown" and argv[:2] in (("python", "-m"),
                                          ("python3", "-m")):
        _fail(command, f"python -m {argv[2]} is not a command line of "
              f"this project (those are: {', '.join(MODULES)})")
    if kind == "unknown":
        _fail(command, command.error or (
            "not a command this test knows: a stale module or script "
            "path? (a new tool: add it to EXTERNAL with the reason it is "
            "not run)"))
    if kind in PARSERS:
        check_runnable_module(command)
    if kind == "train":
        done = check_train(command)
    elif kind == "evaluate":
        done = check_evaluate(command)
    elif kind in PARSERS:
        done = check_project_command(command, kind)
    elif kind == "script":
        done = check_script(command)
    elif kind == "pip":
        done = check_pip(command)
    elif kind == "suite":
        done = check_suite(command)
    elif kind == "snippet":
        done = check_snippet(command)
    elif kind == "env":
        done = check_env(command)
    elif run_key(command) and command.doc in DOCS:
        done = "external"
    else:
        done = check_external(command, workspace_getter())
    # Only the documents' own commands run (a sample here is parsed).
    key = run_key(command) if command.doc in DOCS else None
    if key:
        spec = RUNS[key]
        result = run_readme_command(workspace_getter(), key)
        assert result.returncode == 0, (
            f"{command.doc} line {command.line}: `{command.key}` failed "
            f"when run ({spec.changed}):\n{result.tail()}")
        spec.check(workspace_getter(), command, result)
        done = f"ran ({spec.changed}) in {result.seconds:.0f} s"
    return done


# Processes the checks start: the slow tier (tests/tiers.py).
STARTS_A_PROCESS = {"tensorboard", "docker", "curl",
                    "tensorflow_model_server"}


def starts_a_process(command: Command) -> bool:
    """Whether checking the command runs it, or another documented
    command it needs, in a process of its own: a RUNS entry, a script
    parsed by absl's --only_check_args, a tool checked against a real run
    or export, `mkdocs build`."""
    kind, argv = classify(command), command.argv
    if command.doc in DOCS and run_key(command):
        return True
    if kind == "script":
        path = os.path.join(ROOT, argv[1])
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                return "app.run(" in f.read()
        return False
    return kind == "external" and (
        argv[0] in STARTS_A_PROCESS or argv[:2] == ("mkdocs", "build"))


def _tiered(commands):
    return [pytest.param(c, marks=pytest.mark.slow) if starts_a_process(c)
            else c for c in commands]


@pytest.mark.parametrize("command", _tiered(all_commands()),
                         ids=lambda c: c.id)
def test_readme_command(command, request):
    check_command(command, lambda: request.getfixturevalue("workspace"))


def test_every_command_found_and_classified():
    commands = all_commands()
    by_kind: Dict[str, List[Command]] = {}
    for command in commands:
        by_kind.setdefault(classify(command), []).append(command)
    assert "unknown" not in by_kind, [c.id for c in by_kind["unknown"]]
    counts = {kind: len(v) for kind, v in by_kind.items()}
    short = {k: (counts.get(k, 0), n) for k, n in MIN_COMMANDS.items()
             if counts.get(k, 0) < n}
    assert not short, f"(found, expected at least) per class: {short}"
    assert len(commands) >= sum(MIN_COMMANDS.values())


def test_runs_are_readme_commands():
    """Each run is one command the text shows, and at least one train,
    evaluate, export and convert command runs."""
    kinds = {classify(run_command(key)) for key in RUNS}
    assert {"train", "evaluate", "export", "convert"} <= kinds, kinds


def test_console_scripts_have_parsers():
    for name, module in console_scripts().items():
        assert module in ENTRY_MODULES, (
            f"console script {name} ({module}) has no class here")
        importlib.import_module(module)


SAMPLE = r"""
Some `python train.py --config=configs/digits.py --workdir=W` text and
`gsutil cp` and `not a command`.

```bash
# a comment
pip install -e . && python train.py --config=c.py \
    --workdir=/tmp/x   # trailing comment
FOO=1 BAR=2 python3 benchmarks/throughput.py ... --jax
```

```console
$ python evaluate.py --mode=eval \
    --workdir=/tmp/x
output line
```

```python
python not_a_command.py
```
"""


def test_extractor_on_a_sample():
    got = [(c.line, c.env, c.argv, c.elided, c.inline)
           for c in extract("sample.md", SAMPLE)]
    assert got == [
        (2, (), ("python", "train.py", "--config=configs/digits.py",
                 "--workdir=W"), False, True),
        (3, (), ("gsutil", "cp"), False, True),
        (7, (), ("pip", "install", "-e", "."), False, False),
        (7, (), ("python", "train.py", "--config=c.py", "--workdir=/tmp/x"),
         False, False),
        (9, ("FOO=1", "BAR=2"), ("python3", "benchmarks/throughput.py",
                                 "--jax"), True, False),
        (13, (), ("python", "evaluate.py", "--mode=eval",
                  "--workdir=/tmp/x"), False, False),
    ]


def test_a_renamed_flag_fails_naming_the_command():
    bad = Command("README.md", 1, (), (
        "python", "train.py", "--config=configs/digits.py", "--workdir=w",
        "--config.total_stepz=5"))
    with pytest.raises(ParseError,
                       match="(?s)README.md line 1 .*total_stepz.* did you "
                       "mean config.trainer.total_steps"):
        check_command(bad, lambda: None)
    bad = Command("README.md", 2, (), (
        "keras-vit-export", "--export_dir", "e", "--keras_model", "m.keras"))
    with pytest.raises(ParseError, match="keras_model"):
        check_command(bad, lambda: None)
    bad = Command("README.md", 3, (), (
        "python", "-m", "keras_vit.export.saved_model", "--export_dir", "e"))
    with pytest.raises(ParseError, match="is not a command line"):
        check_command(bad, lambda: None)


NEW_LANGUAGE = """
```bash
keras-vit-train --config=digits --workdir=/tmp/vit_digits
python train.py --config=configs/digits.py --workdir=/tmp/x
keras-vit-train --config=finetune:dataset=cifar10 --workdir=w --model=m.npz
keras-vit-evaluate --mode=fewshot --config=fewshot:digits --model=vit.keras \\
    --output_dir=/tmp/fs
keras-vit-export --model=/tmp/vit_digits --export_dir=exports
keras-vit-convert --model=ViT-B_16.npz --image_size=384 --output=x.keras
keras-vit-analysis --model=vit.keras --output_dir=out photos/
keras-vit-predict --model=exports/vit photos/ --top_k=3
keras-vit-export --model=x.keras ...
```
"""


def test_the_six_commands_parse():
    commands = extract("sample.md", NEW_LANGUAGE)
    assert {classify(c) for c in commands} == set(PARSERS)
    for command in commands:
        assert check_command(command, lambda: None).startswith("parsed")
    for argv, says in [
        (("keras-vit-predict", "--model=exports/vit"), "images"),
        (("keras-vit-export", "--model=x.keras", "--export_dir=e",
          "--npz=y.npz"), "Unknown command line flag 'npz'"),
        (("keras-vit-train", "--config=digits", "--workdir=w",
          "--config.init.npz=x.npz"), "config.init.npz is now "
         "config.init.model"),
    ]:
        with pytest.raises(ParseError, match=re.escape(says)):
            check_command(Command("README.md", 1, (), argv), lambda: None)


def test_a_shell_script_command_is_checked_against_its_options():
    def check(*argv):
        return check_external(Command("README.md", 1, (), argv), None)

    assert check("bash", "benchmarks/accelerator.sh", "--profile")
    for argv, says in [
        (("bash", "benchmarks/accelerator.sh", "--fast"),
         "benchmarks/accelerator.sh has no option --fast"),
        (("bash", "benchmarks/nowhere.sh"), "benchmarks/nowhere.sh does "
         "not exist"),
        (("bash", "benchmarks/accelerator.sh", "no/such/folder"),
         "no/such/folder does not exist"),
    ]:
        with pytest.raises(ParseError, match=re.escape(says)):
            check(*argv)


def _config_fields() -> set:
    """Every dotted field of every config in configs/ (default argument)."""
    fields = set()

    def walk(node, prefix):
        for key in node.keys():
            fields.add(prefix + key)
            if hasattr(node[key], "keys"):
                walk(node[key], prefix + key + ".")

    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "[!_]*.py"))):
        walk(_load_script(os.path.relpath(path, ROOT)).get_config(), "")
    return fields


def _project_options() -> set:
    """Every --option of the project's command lines."""
    options = set()
    for kind in PARSERS:
        options |= {f"--{name}" for name in absl_flag_values(kind)}
    parsers = []
    for path in sorted(glob.glob(os.path.join(ROOT, "benchmarks", "*.py"))
                       + glob.glob(os.path.join(ROOT, "scripts", "*.py"))):
        with open(path, encoding="utf-8") as f:
            if "def build_parser(" not in f.read():
                continue
        parsers.append(
            _load_script(os.path.relpath(path, ROOT)).build_parser())
    for parser in parsers:
        for action in parser._actions:
            options.update(action.option_strings)
    for path in glob.glob(os.path.join(ROOT, "benchmarks", "*.sh")):
        options |= _shell_options(path)
    return options | _saved_model_cli_options()


@functools.lru_cache(maxsize=None)
def _saved_model_cli_options() -> frozenset:
    """{str}. The options of TensorFlow's saved_model_cli (docs/export.md
    runs it), as its `--helpfull` lists them."""
    exe = shutil.which("saved_model_cli", path=os.pathsep.join(
        [os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    if exe is None:
        return frozenset()
    text = subprocess.run([exe, "run", "--helpfull"], capture_output=True,
                          text=True, timeout=120).stdout
    return frozenset(re.findall(r"(?<![\w-])--[a-z][\w]*", text))


def _shell_options(path: str) -> Set[str]:
    """{str}. A shell script's options: the arms of its `case` statement."""
    with open(path, encoding="utf-8") as f:
        return set(re.findall(r"^\s*(--[\w-]+)\)", f.read(), re.M))


def _xla_flags_set(path: str) -> set:
    """The XLA flags a shell script sets (accelerator.sh's XLA_OPTIONS:
    "TAG=--xla_...=VALUE --xla_...=VALUE"), which the text may name."""
    with open(path, encoding="utf-8") as f:
        entries = re.findall(r'^\s*"\w+=(--xla_[^"]*)"', f.read(), re.M)
    return {m for e in entries for m in re.findall(r"--xla_\w+", e)}


@pytest.mark.parametrize("doc", DOCS)
def test_flags_named_in_the_text_exist(doc):
    """`--flag` and `--config.field` in the text (outside the commands,
    which the tests above check) name options and config fields that
    exist."""
    fields, options = _config_fields(), None
    problems = []
    for line, span in prose_spans(doc):
        if _is_command(span):
            continue
        if re.fullmatch(r"keras-vit-[\w-]+", span) and (
            span not in console_scripts()
        ):
            problems.append(f"line {line}: setup.cfg declares no {span}")
        for flag in re.findall(r"(?<![\w-])--[A-Za-z][\w.-]*", span):
            flag = flag.rstrip(".-")
            if flag.startswith("--config."):
                field = flag[len("--config."):]
                if field not in fields and field not in MISSPELT_ON_PURPOSE:
                    problems.append(f"line {line}: {flag} is no config field")
                continue
            options = options or _project_options() | {
                f for path in glob.glob(os.path.join(ROOT, "benchmarks",
                                                     "*.sh"))
                for f in _xla_flags_set(path)}
            if flag not in options:
                problems.append(f"line {line}: {flag} is no option of the "
                                "project's command lines")
    assert not problems, f"{doc}:\n" + "\n".join(problems)


def _resolve(dotted: str):
    """Imports the longest module prefix of `a.b.c` and gets the rest."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


@pytest.mark.parametrize("doc", DOCS)
def test_paths_and_names_in_the_text_exist(doc):
    """Repository paths (`benchmarks/throughput.py`, `results/...` beside
    the document) and `keras_vit.x.y` names in the text exist."""
    folders = [ROOT, os.path.dirname(os.path.join(ROOT, doc))]
    problems = []
    for line, span in prose_spans(doc):
        if re.fullmatch(r"\.?[\w-]+/[\w./*-]*", span):
            top = span.split("/")[0]
            bases = [f for f in folders if os.path.isdir(os.path.join(f, top))]
            if bases and not any(
                glob.glob(os.path.join(base, span) + "*") for base in bases
            ):
                problems.append(f"line {line}: {span} does not exist")
        match = re.match(r"keras_vit(\.\w+)+", span)
        if match:
            try:
                _resolve(match.group(0))
            except (ImportError, AttributeError) as error:
                problems.append(f"line {line}: {match.group(0)}: {error!r}")
    assert not problems, f"{doc}:\n" + "\n".join(problems)


if __name__ == "__main__":
    for c in all_commands():
        kind = classify(c)
        mode = ("run" if run_key(c) else
                "external" if kind == "external" else "parse")
        print(f"{kind:9} {mode:8} {c.id}")

"""The import contracts in setup.cfg ([importlinter]) are kept: each
subpackage imports only the layers below it, and the model core (every
keras_vit/*.py and the package root) imports no subpackage and no
TensorFlow (function-level imports included). The root's lazily loaded
functions are the only imports the contract ignores, and `import keras_vit`
indeed loads no TensorFlow.

The same check from a shell: `lint-imports setup.cfg`.

No module of the package is over MAX_MODULE_LINES lines: a module that
grows past it is split along a seam of its own; no function is over
MAX_FUNCTION_LINES lines (the tables aside: the config schema and the
shipped configs), so that each reads on one screen.
"""

import ast
import configparser
import glob
import os
import subprocess
import sys

import pytest

import keras_vit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETUP_CFG = os.path.join(ROOT, "setup.cfg")
PREFIX = "importlinter:contract:"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def _contracts():
    parser = configparser.ConfigParser()
    parser.read(SETUP_CFG)
    return [s[len(PREFIX):] for s in parser.sections()
            if s.startswith(PREFIX)]


def test_setup_cfg_declares_the_contracts():
    assert set(_contracts()) >= {"layers", "core", "evaluators"}


@pytest.mark.parametrize("contract", _contracts())
def test_import_contract_is_kept(contract):
    pytest.importorskip("importlinter")
    run = subprocess.run(
        [sys.executable, "-c",
         "import sys; from importlinter.cli import lint_imports_command; "
         "sys.exit(lint_imports_command())",
         SETUP_CFG, "--contract", contract, "--no-cache",
         "--no-logo"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    report = run.stdout + run.stderr
    if "Broken contracts" in report:
        report = report[report.index("Broken contracts"):]
    assert run.returncode == 0, (
        f"Import contract {contract!r} is broken:\n{report}"
    )


def _lines(section, key):
    parser = configparser.ConfigParser()
    parser.read(SETUP_CFG)
    return [line.strip() for line in parser[PREFIX + section][key].splitlines()
            if line.strip()]


def test_core_contract_covers_every_core_module():
    core = {"keras_vit"} | {
        "keras_vit." + os.path.basename(path)[:-3]
        for path in glob.glob(os.path.join(ROOT, "keras_vit", "*.py"))
        if not path.endswith("__init__.py")
    }
    assert set(_lines("core", "source_modules")) == core
    packages = {
        "keras_vit." + os.path.basename(os.path.dirname(path))
        for path in glob.glob(os.path.join(ROOT, "keras_vit", "*",
                                           "__init__.py"))
    }
    forbidden = set(_lines("core", "forbidden_modules"))
    assert forbidden >= packages | {p + ".**" for p in packages}
    # Each subpackage is a layer of the layers contract.
    layered = {name.strip() for line in _lines("layers", "layers")
               for name in line.split("|")}
    assert layered == packages


def _type_checking_imports():
    """name -> module of the root's `if TYPE_CHECKING:` imports."""
    tree = ast.parse(open(keras_vit.__file__, encoding="utf-8").read())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == \
                "TYPE_CHECKING":
            for statement in node.body:
                for alias in statement.names:
                    found[alias.asname or alias.name] = statement.module
    return found


def test_lazy_names_are_visible_to_the_contracts():
    lazy = dict(keras_vit._LAZY)
    assert _type_checking_imports() == lazy
    ignored = {line.split("->")[1].strip()
               for line in _lines("core", "ignore_imports")}
    assert ignored == set(lazy.values())
    for name, module in lazy.items():
        value = getattr(keras_vit, name)
        assert value.__module__ == module, name  # defined there, not copied
        assert name in keras_vit.__all__


def test_the_subpackages_are_attributes_after_import_keras_vit():
    """`import keras_vit` then `keras_vit.analysis.attention_rollout` (as
    the docs write it) works without importing the subpackage first; a
    name that is none is still an AttributeError."""
    code = ("import keras_vit; "
            "print(keras_vit.analysis.attention_rollout.__module__); "
            "print(keras_vit.storage.atomic is None)\n"
            "try:\n    keras_vit.nothing\n"
            "except AttributeError as e:\n    print(e)")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines() == [
        "keras_vit.analysis.core", "False",
        "module 'keras_vit' has no attribute 'nothing'"]


@pytest.mark.slow
def test_import_keras_vit_loads_no_tensorflow():
    # The numpy backend: Keras itself then needs no TensorFlow either.
    code = ("import sys, keras_vit; keras_vit.create_model; "
            "print(sorted(m for m in sys.modules "
            "if m.split('.')[0] == 'tensorflow'))")
    env = dict(os.environ, KERAS_BACKEND="numpy", PYTHONPATH=ROOT)
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "[]"


def test_no_module_is_over_the_line_limit():
    sizes = {}
    for path in glob.glob(os.path.join(ROOT, "keras_vit", "**", "*.py"),
                          recursive=True):
        with open(path, encoding="utf-8") as f:
            sizes[os.path.relpath(path, ROOT)] = sum(1 for _ in f)
    assert len(sizes) > 100  # the whole package was read
    over = {path: n for path, n in sizes.items() if n > MAX_MODULE_LINES}
    assert over == {}, f"over {MAX_MODULE_LINES} lines: {over}"


def _functions(tree):
    """(qualified name, node) of every function and method in `tree`,
    nested ones included (`Class.method`, `outer.inner`)."""
    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + child.name, child
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    return walk(tree, "")


def _is_table(rel, name):
    """The functions that are tables, one line per entry: the config
    schema and the shipped configs."""
    return (rel, name) == ("keras_vit/config_schema.py", "base_config") or (
        rel.startswith("keras_vit/configs/") and name == "get_config")


def _package_functions():
    """(module path, qualified name, node) of every function of the
    package (`_functions` of each module)."""
    for path in glob.glob(os.path.join(ROOT, "keras_vit", "**", "*.py"),
                          recursive=True):
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for name, node in _functions(tree):
            yield rel, name, node


def test_no_function_is_over_the_line_limit():
    long_ones, count = {}, 0
    for rel, name, node in _package_functions():
        count += 1
        lines = node.end_lineno - node.lineno + 1
        if lines > MAX_FUNCTION_LINES and not _is_table(rel, name):
            long_ones[f"{rel}:{name}"] = lines
    assert count > 500  # every function was read
    assert long_ones == {}, (
        f"over {MAX_FUNCTION_LINES} lines (split along a seam: named "
        f"helpers that each do one thing): {long_ones}"
    )


def test_no_function_imports_a_module_of_the_package():
    """A module names what it needs at its top (a command: `lazy_module`,
    for a `--help` without TensorFlow); an import inside a function would
    hide a cycle from the contracts."""
    inside, count = [], 0
    for rel, name, node in _package_functions():
        count += 1
        for child in ast.walk(node):
            if isinstance(child, ast.Import):
                modules = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                modules = ["." if child.level else child.module or ""]
            else:
                continue
            if any(m == "." or m.split(".")[0] == "keras_vit"
                   for m in modules):
                inside.append(f"{rel}:{child.lineno} ({name})")
    assert count > 500  # every function was read
    assert inside == [], inside


def _source_interface():
    from keras_vit.checkpoint import sources

    names = {n for n in dir(sources.Source) if not n.startswith("_")}
    return names | {f.name for f in
                    __import__("dataclasses").fields(sources.Source)}


# Kind-specific attributes that shared code may read after it checked the
# kind (`source.kind == ...`): the export kinds' own.
_KIND_CHECKED = {("keras_vit/commands/predict.py", "version")}


def test_shared_code_asks_a_source_only_what_every_kind_answers():
    """Outside keras_vit/checkpoint/ (where the kinds live), a model
    source (a variable called `source`) is asked only for the interface
    of `sources.Source`, which every kind implements: an attribute of one
    kind (an .npz's `variant`) reached from shared code breaks every
    other kind (it broke `keras-vit-evaluate --mode=vtab` for all but an
    .npz)."""
    interface = _source_interface()
    found = []
    for path in glob.glob(os.path.join(ROOT, "keras_vit", "**", "*.py"),
                          recursive=True):
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        if rel.startswith("keras_vit/checkpoint/"):
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "source"
                    and node.attr not in interface
                    and (rel, node.attr) not in _KIND_CHECKED):
                found.append(f"{rel}:{node.lineno} source.{node.attr}")
    assert not found, found
    assert "variant" not in interface


MAX_CHECKPOINT_TOP_MODULES = 12


def test_checkpoint_is_laid_out_by_what_it_reads():
    """keras_vit/checkpoint/ keeps the way in at its top (the resolver,
    the source interface, the loader) and the readers in folders named
    by what they read: formats/, hub/, zoo/."""
    top = sorted(os.path.basename(p) for p in glob.glob(
        os.path.join(ROOT, "keras_vit", "checkpoint", "*.py")))
    assert len(top) <= MAX_CHECKPOINT_TOP_MODULES, top
    for folder, module in (("formats", "npz.py"), ("hub", "timm.py"),
                           ("zoo", "catalog.py")):
        assert os.path.exists(os.path.join(
            ROOT, "keras_vit", "checkpoint", folder, module)), folder

"""Every third-party module the project imports comes from a requirement
that setup.cfg declares: install_requires for the package, the command lines
and the configs; install_requires or an extra for tests, benchmarks and
scripts. A fresh `pip install -e .` then has everything the main job needs.

Imports are read from the source (inside functions too), not executed.
"""

import ast
import configparser
import functools
import importlib.metadata
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Code that `pip install -e .` must be enough for.
RUNTIME = ("keras_vit", "configs", "train.py", "evaluate.py")
# Code that may also use the extras.
WITH_EXTRAS = ("tests", "benchmarks", "scripts", "docs")

# Import names whose distribution is not found by importlib.metadata's
# file map (namespace packages or modules shipped inside another wheel).
KNOWN = {
    "google": "protobuf",
    "tensorflow_serving": "tensorflow-serving-api",
    "keras_hub": "keras-hub",  # optional: benchmarks only
    "kagglehub": "kagglehub",  # optional: kaggle:// downloads
    # The hub_reference extra, for scripts/make_hub_fixtures.py only (not
    # installed for the tests).
    "torch": "torch",
    "timm": "timm",
    "transformers": "transformers",
}

# Optional features of the package: imported lazily (inside a function,
# with an error that names the install command) from the extra named here.
OPTIONAL = {
    "tensorflow_serving": "serving",  # SavedModel warm-up records
    "keras_hub": "benchmark",  # benchmarks against keras-hub's ViT
    "kagglehub": "kaggle",  # keras-hub presets downloaded from Kaggle
    "jax": "jax",  # the JAX backend
    "ai_edge_litert": "litert",  # runs exported .tflite files
    "matplotlib": "figures",  # VTAB charts, analysis and MPP figures
}

# Features that need a distribution the code never imports by name.
IMPLIED = {
    # tf.summary writes TensorBoard events only when tensorboard is
    # installed (TensorFlow >= 2.21 no longer depends on it).
    r"\btf\.summary\.": "tensorboard",
}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(line: str) -> str:
    return _normalise(re.split(r"[\s<>=!~;\[]", line.strip(), maxsplit=1)[0])


def _requirements():
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    install = {
        _requirement_name(line)
        for line in parser["options"]["install_requires"].splitlines()
        if line.strip()
    }
    extras = {}
    for extra, text in parser["options.extras_require"].items():
        extras[extra] = {
            _requirement_name(line) for line in text.splitlines()
            if line.strip()
        }
    return install, extras


def _files(roots):
    for root in roots:
        path = os.path.join(ROOT, root)
        if os.path.isfile(path):
            yield path
            continue
        for folder, _, names in os.walk(path):
            for name in names:
                if name.endswith(".py"):
                    yield os.path.join(folder, name)


def _imports(path):
    """Top-level names of the absolute imports in `path`."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add(node.module.split(".")[0])
    return names, source


def _local_names():
    """Modules of this checkout (the package, tests, scripts, configs)."""
    names = {"keras_vit", "tests", "configs", "benchmarks", "scripts"}
    for root in ("configs", "tests", "benchmarks", "scripts", "docs"):
        folder = os.path.join(ROOT, root)
        if os.path.isdir(folder):
            names.update(
                n[:-3] for n in os.listdir(folder) if n.endswith(".py")
            )
    return names


@functools.lru_cache(maxsize=None)
def _packages_distributions():
    """Module -> distributions of the environment: read once, since it
    reads the file list of every installed distribution."""
    return importlib.metadata.packages_distributions()


def _distributions(module: str):
    if module in KNOWN:
        return {_normalise(KNOWN[module])}
    found = _packages_distributions().get(module)
    return {_normalise(d) for d in found or ()}


def _undeclared(roots, allowed):
    local = _local_names()
    missing = []
    for path in _files(roots):
        names, source = _imports(path)
        needed = {}
        for name in names - local - set(sys.stdlib_module_names):
            dists = _distributions(name)
            if not dists:
                missing.append(f"{path}: imports {name!r}, which no "
                               "installed distribution provides")
            elif not dists & allowed:
                needed[name] = dists
        for pattern, dist in IMPLIED.items():
            if re.search(pattern, source) and dist not in allowed:
                needed[pattern] = {dist}
        for name, dists in sorted(needed.items()):
            missing.append(
                f"{os.path.relpath(path, ROOT)}: {name!r} needs "
                f"{' or '.join(sorted(dists))}, which setup.cfg does not "
                "declare"
            )
    return missing


def _top_level_imports(path):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_runtime_imports_are_install_requires():
    install, extras = _requirements()
    assert "tensorboard" in install  # tf.summary: see IMPLIED
    for module, extra in OPTIONAL.items():
        assert _distributions(module) & extras[extra], (module, extra)
    optional = set().union(*(_distributions(m) for m in OPTIONAL))
    missing = _undeclared(RUNTIME, install | optional)
    assert not missing, "\n".join(missing)


# A module of one Keras backend's own, imported (by keras_vit.attention)
# only when Keras runs on that backend, whose framework it then imports.
BACKEND_MODULES = {"keras_vit/fused_attention.py": "jax"}


def test_optional_imports_are_lazy():
    """An optional dependency is never imported at module level, so that
    `import keras_vit...` works without it."""
    eager = [
        f"{os.path.relpath(path, ROOT)} imports {name} at module level"
        for path in _files(RUNTIME)
        for name in _top_level_imports(path) & set(OPTIONAL)
        if BACKEND_MODULES.get(os.path.relpath(path, ROOT)) != name
    ]
    assert not eager, "\n".join(eager)


def test_a_backend_module_loads_only_under_its_backend():
    """Under TensorFlow, the model never imports the JAX backend's own
    module (a fresh process: other tests import it on purpose)."""
    modules = [p[:-3].replace("/", ".") for p in BACKEND_MODULES]
    code = ("import sys, keras_vit, keras_vit.attention; "
            f"print([m for m in {modules!r} if m in sys.modules])")
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        env=dict(os.environ, KERAS_BACKEND="tensorflow"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_test_and_tool_imports_are_declared():
    install, extras = _requirements()
    allowed = install.union(*extras.values())
    missing = _undeclared(WITH_EXTRAS, allowed)
    assert not missing, "\n".join(missing)


def test_tests_need_only_the_test_extra():
    install, extras = _requirements()
    missing = _undeclared(("tests",), install | extras["test"])
    # keras-hub is optional in tests (they skip without it).
    missing = [m for m in missing if "keras-hub" not in m]
    assert not missing, "\n".join(missing)


def test_the_checker_finds_an_undeclared_import(tmp_path, monkeypatch):
    """The check itself: a file importing a module that setup.cfg does not
    declare (here tensorboard, with tensorboard taken off the list)."""
    bad = tmp_path / "bad.py"
    bad.write_text("import tensorboard\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    missing = _undeclared(("bad.py",), {"tensorflow"})
    assert missing and "tensorboard" in missing[0]


@pytest.mark.parametrize("name", ["keras-vit"])
def test_distribution_name_is_ours(name):
    """`keras-vit` on the package index is another project: ours must not
    be called that, or `pip install` of our name could fetch its code."""
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    assert _normalise(parser["metadata"]["name"]) != name

"""The two test tiers: slow tests are counted skips unless asked for.

A generated test file with one fast and one slow test runs under pytest in
a child process, with the tier hooks of tests/tiers.py as its conftest
(the same functions tests/conftest.py uses); each way of asking for the
slow tier is checked by the outcome counts pytest reports. The child
imports pytest only, not TensorFlow, so each run takes about a second.
"""

import os
import re
import subprocess
import sys

import pytest

from tests import conftest, tiers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TESTS = '''
import pytest


def test_fast():
    pass


@pytest.mark.slow
def test_slow():
    pass
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiers")
    (folder / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    slow: the slow tier\n")
    (folder / "conftest.py").write_text(
        "from tests.tiers import (  # noqa: F401\n"
        "    pytest_addoption,\n"
        "    pytest_collection_modifyitems,\n"
        ")\n")
    (folder / "test_generated.py").write_text(TESTS)
    return folder


def outcomes(project, *args, env=None):
    """{outcome: count} of a pytest run of the generated file, and its
    output."""
    environ = {k: v for k, v in os.environ.items()
               if k not in (tiers.SLOW_ENV, "PYTEST_ADDOPTS")}
    environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [ROOT, environ.get("PYTHONPATH")]))
    environ.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA",
         "-q", "test_generated.py", *args],
        cwd=project, env=environ, capture_output=True, text=True,
        timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = proc.stdout.strip().splitlines()[-1]
    counts = {word: int(n) for n, word in
              re.findall(r"(\d+) (passed|skipped|deselected|failed)",
                         summary)}
    return counts, proc.stdout


def test_the_suite_uses_the_tier_hooks():
    assert conftest.pytest_addoption is tiers.pytest_addoption
    assert (conftest.pytest_collection_modifyitems
            is tiers.pytest_collection_modifyitems)


def test_slow_tests_are_counted_skips_that_say_how_to_run_them(project):
    counts, out = outcomes(project)
    assert counts == {"passed": 1, "skipped": 1}
    assert "--run_slow" in out and tiers.SLOW_ENV in out


@pytest.mark.parametrize("args, env", [
    (("--run_slow",), None),
    ((), {tiers.SLOW_ENV: "1"}),
], ids=["option", "environment"])
def test_asking_for_the_slow_tier_runs_both_tiers(project, args, env):
    counts, _ = outcomes(project, *args, env=env)
    assert counts == {"passed": 2}


@pytest.mark.parametrize("args", [
    ("-m", "slow", "--run_slow"),
    ("-m", "slow"),
], ids=["marker-and-option", "marker"])
def test_the_marker_runs_only_the_slow_tier(project, args):
    counts, out = outcomes(project, *args)
    assert counts == {"passed": 1, "deselected": 1}
    assert "PASSED test_generated.py::test_slow" in out


def test_the_fast_tier_alone(project):
    counts, out = outcomes(project, "-m", "not slow")
    assert counts == {"passed": 1, "deselected": 1}
    assert "PASSED test_generated.py::test_fast" in out


def test_environment_zero_keeps_the_slow_tier_off(project):
    counts, _ = outcomes(project, env={tiers.SLOW_ENV: "0"})
    assert counts == {"passed": 1, "skipped": 1}

"""The two test tiers, as pytest hooks that tests/conftest.py imports.

The fast tier (`python -m pytest tests -q -n auto`, the README's test line) runs
every test not marked `slow`. The slow tier (multi-process clusters, child
processes killed on purpose, the documented commands run as subprocesses,
packaging resolution, the large fuzz corpora, the command-line journeys)
runs only when asked for, the way keras-hub runs its large tests:

    python -m pytest tests -q --run_slow          both tiers
    python -m pytest tests -q -m slow --run_slow  the slow tier only
    KERAS_VIT_SLOW=1 python -m pytest tests -q    both tiers

`-m slow` alone asks for the slow tier too. Without any of these, each slow
test is a counted skip whose reason says how to run it.
"""

import os

import pytest

SLOW_ENV = "KERAS_VIT_SLOW"
SLOW_REASON = (
    "slow tier: run with --run_slow (or KERAS_VIT_SLOW=1); "
    "-m slow --run_slow runs only the slow tier"
)


def pytest_addoption(parser):
    parser.addoption(
        "--run_slow", action="store_true", default=False,
        help="also run the tests marked slow (the slow tier); with "
        "-m slow, only those",
    )


def run_slow(config) -> bool:
    """Whether this run asked for the slow tier."""
    return (
        config.getoption("--run_slow")
        or os.environ.get(SLOW_ENV, "") not in ("", "0")
        or (config.getoption("markexpr") or "").strip() == "slow"
    )


def pytest_collection_modifyitems(config, items):
    if run_slow(config):
        return
    skip = pytest.mark.skip(reason=SLOW_REASON)
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)

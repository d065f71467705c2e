"""The import contracts in setup.cfg ([importlinter]) are kept: each
subpackage imports only the layers below it, and the model core imports no
subpackage and no TensorFlow (function-level imports included).

The same check from a shell: `lint-imports --config setup.cfg`.
"""

import configparser
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETUP_CFG = os.path.join(ROOT, "setup.cfg")
PREFIX = "importlinter:contract:"


def _contracts():
    parser = configparser.ConfigParser()
    parser.read(SETUP_CFG)
    return [s[len(PREFIX):] for s in parser.sections()
            if s.startswith(PREFIX)]


def test_setup_cfg_declares_the_contracts():
    assert set(_contracts()) >= {"layers", "core"}


@pytest.mark.parametrize("contract", _contracts())
def test_import_contract_is_kept(contract):
    pytest.importorskip("importlinter")
    run = subprocess.run(
        [sys.executable, "-c",
         "import sys; from importlinter.cli import lint_imports_command; "
         "sys.exit(lint_imports_command())",
         "--config", SETUP_CFG, "--contract", contract, "--no-cache",
         "--no-logo"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    report = run.stdout + run.stderr
    if "Broken contracts" in report:
        report = report[report.index("Broken contracts"):]
    assert run.returncode == 0, (
        f"Import contract {contract!r} is broken:\n{report}"
    )

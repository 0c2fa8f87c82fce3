"""The static checks run with the test suite, so a change that breaks any of them does not land.

Covers: mypy over ``hami_web`` and ``benchmarks`` with the configuration in pyproject.toml (mypy's strict flags
on the whole package, gunicorn typed by the stubs in typings/), ruff over the whole repository, and import-linter's
contracts in ``.importlinter`` (docs/architecture.md#layers: who may import whom). A failure shows the tool's own
report. The tools are in the ``test`` extras; mypy keeps its cache in ``.mypy_cache``, so only the first run in a
checkout pays for a full check.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL_TIMEOUT_SECONDS = 600


def _run(command: list[str], shown: str) -> None:
    """Run a command from the repository root; fail the test with its output unless it passes."""
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=TOOL_TIMEOUT_SECONDS,
                               check=False)
    if completed.returncode != 0:
        report = "\n".join(part for part in (completed.stdout.strip(), completed.stderr.strip()) if part)
        pytest.fail(f"`{shown}` exited with {completed.returncode}:\n{report}", pytrace=False)


def _run_tool(*arguments: str) -> None:
    """Run ``python -m <tool> ...``."""
    _run([sys.executable, "-m", *arguments], f"python -m {' '.join(arguments)}")


def test_the_type_checker_finds_no_errors() -> None:
    _run_tool("mypy", "--config-file", "pyproject.toml")


def test_the_linter_finds_no_problems() -> None:
    _run_tool("ruff", "check", ".")


def test_the_import_contracts_hold() -> None:
    # import-linter has no ``python -m`` entry point; its script is installed beside this interpreter.
    _run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], "lint-imports")

"""Fixtures of the end-to-end tier: one real control plane per test session (see `controlplane`).

Every test in ``tests/e2e`` carries the ``e2e`` marker; ``python -m pytest -m "not e2e"`` leaves the tier out.
Without the binaries (``KUBEBUILDER_ASSETS``) the tier is skipped with one line saying how to provide them.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .controlplane import SKIP_REASON, ControlPlane, find_assets

_names = itertools.count(1)
HAMI_WEB_ARGUMENTS = ("--enable-iluvatar", "--enable-ascend")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    assets = find_assets()
    if assets is None:
        pytest.skip(SKIP_REASON)
    # --enable-iluvatar, --enable-ascend: every family hami-web can schedule is on, as the shipped manifests allow for.
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"), assets,
                         hami_web_arguments=HAMI_WEB_ARGUMENTS).start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test (namespaces never finish deleting here: no namespace controller)."""
    name = control_plane.create_namespace(f"e2e-{next(_names)}")
    yield name
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        control_plane.report_logs()  # the last lines of each process's log, next to the failure


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Keep each phase's report on the item, so that fixtures can tell a failed test at teardown."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line saying whether the real control-plane tier ran, so a CI log shows it did not just skip."""
    def ours(report: pytest.TestReport, outcome: str) -> bool:
        phase_counts = outcome in ("error", "skipped") or report.when == "call"  # setup passes are not tests
        return phase_counts and report.nodeid.startswith("tests/e2e/")

    counts = {outcome: sum(1 for report in terminalreporter.stats.get(outcome, []) if ours(report, outcome))
              for outcome in ("passed", "failed", "error", "skipped")}
    if any(counts.values()):
        terminalreporter.write_line(
            "e2e tier (real kube-apiserver + kube-scheduler): "
            + ", ".join(f"{count} {outcome}" for outcome, count in counts.items() if count)
            + f"; KUBEBUILDER_ASSETS={os.environ.get('KUBEBUILDER_ASSETS') or '<unset>'}")

"""Fixtures of the operator-tool tests: the realistic cluster of ``cluster.yaml`` in the in-process API server,
and `Run`, which runs ``kubectl hami …`` or ``hami-web …`` in process and captures what it printed."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hami_web.cli import main as hami_web_main
from hami_web.localcluster import LocalCluster
from hami_web.ops.command import kubectl_main

CLUSTER = Path(__file__).parent / "cluster.yaml"
GOLDEN = Path(__file__).parent / "golden"


@dataclass(frozen=True, slots=True)
class Outcome:
    """Exit status and output of one command."""

    code: int
    out: str
    err: str


Run = Callable[..., Outcome]
"""``run("inspect", "-d", entry="kubectl")``: the command against the cluster (``--server`` added)."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """The realistic cluster, shared by a module's read-only tests."""
    with LocalCluster() as api:
        api.load_file(CLUSTER)
        yield api


@pytest.fixture
def run(cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> Run:
    """Run a command against `cluster` as ``kubectl hami`` (default) or ``hami-web``."""

    def invoke(*argv: str, entry: str = "kubectl", server: str | None = None) -> Outcome:
        capsys.readouterr()
        args = [*argv, "--server", server or cluster.url]
        code = kubectl_main(args) if entry == "kubectl" else hami_web_main(args)
        captured = capsys.readouterr()
        return Outcome(code=code, out=captured.out, err=captured.err)

    return invoke


def assert_golden(name: str, text: str) -> None:
    """``text`` equals ``golden/<name>``; ``UPDATE_GOLDEN=1`` rewrites the file (then read the diff)."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"output differs from {path}; UPDATE_GOLDEN=1 rewrites it"


def hami_pod(name: str, limits: dict[str, str], annotations: dict[str, str] | None = None,
             node: str | None = None) -> dict[str, Any]:
    """A pod of namespace ``ml`` for hami-scheduler asking ``limits``: Running on ``node`` (with ``annotations``, its
    booking) when given, else Pending."""
    spec: dict[str, Any] = {"schedulerName": "hami-scheduler",
                            "containers": [{"name": "main", "resources": {"limits": limits}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "annotations": dict(annotations or {})},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}

"""What stops the operator tools, and how they read the cluster.

Covers: a pod or node that does not exist, a node without GPUs, an unreachable API, an API that answers an
error (forbidden, server error), an unusable kubeconfig and a malformed pod argument are each one line on
stderr and exit status 1; ``--kubeconfig`` reaches the
API like ``--server``; every command only reads (GET requests only); lists are paginated (``limit`` and
``continue``) and the pages add up to the whole list; a bad continue token is a 400 from the API server.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest
import requests
import yaml

from hami_web.kube import Kube, join_pages
from hami_web.localcluster import LocalCluster

from .conftest import Run


def _refused_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(("argv", "message"), [
    pytest.param(["explain", "ml/nope"], 'Error from server (NotFound): pods "nope" not found in namespace "ml"',
                 id="missing-pod"),
    pytest.param(["inspect", "gpu-nope"], 'Error: node "gpu-nope" not found', id="missing-node"),
    pytest.param(["inspect", "cpu-0"], "Error: node \"cpu-0\" has no devices registered by HAMi's device plugins",
                 id="cpu-node"),
    pytest.param(["explain", "a/b/c"], "error: 'a/b/c' is not NAMESPACE/POD or POD", id="bad-pod-argument"),
])
def test_what_does_not_exist_is_one_line_and_exit_1(run: Run, argv: list[str], message: str) -> None:
    outcome = run(*argv)
    assert (outcome.code, outcome.out, outcome.err) == (1, "", message + "\n")


@pytest.mark.parametrize("command", [["inspect"], ["explain", "ml/big-train"], ["capacity"]])
def test_an_unreachable_api_is_one_line_and_exit_1(run: Run, command: list[str]) -> None:
    outcome = run(*command, server=_refused_url())
    assert outcome.code == 1
    assert outcome.out == ""
    assert outcome.err.startswith("cannot reach the Kubernetes API (--server http://")
    assert outcome.err.count("\n") == 1


def test_an_unreachable_api_logs_no_retry_warnings(run: Run, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    assert run("inspect", server=_refused_url()).code == 1
    assert not [record for record in caplog.records if record.name.startswith("urllib3")]


@pytest.mark.parametrize(("resource", "status"), [("nodes", 403), ("pods", 500)])
def test_an_api_error_answer_is_one_line_and_exit_1(run: Run, resource: str, status: int) -> None:
    with LocalCluster() as api:
        api.load_file(Path(__file__).parent / "cluster.yaml")
        api.inject_failure("GET", resource, status=status)
        outcome = run("inspect", server=api.url)
    assert (outcome.code, outcome.out) == (1, "")
    assert outcome.err == (f"Error from server: list {resource}: HTTP {status}: "
                           f"injected failure for GET {resource}\n")


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server}}], "users": [{"name": "test", "user": {}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}]}))
    return path


def test_kubeconfig_reaches_the_api(cluster: LocalCluster, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    from hami_web.ops.command import kubectl_main

    config = _kubeconfig(tmp_path / "config", cluster.url)
    assert kubectl_main(["inspect", "gpu-t4-0", "--kubeconfig", str(config), "-o", "json"]) == 0
    assert '"name": "gpu-t4-0"' in capsys.readouterr().out


def test_an_unusable_kubeconfig_is_one_line_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hami_web.ops.command import kubectl_main

    broken = tmp_path / "config"
    broken.write_text("clusters: [")
    assert kubectl_main(["inspect", "--kubeconfig", str(broken)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot use kubeconfig {broken}: ")
    assert err.count("\n") == 1


def test_the_tools_only_read(run: Run) -> None:
    with LocalCluster() as api:
        api.load_file(Path(__file__).parent / "cluster.yaml")
        writes_before = len(api.request_log)
        for argv in (["inspect", "-d"], ["explain", "ml/big-train"], ["explain", "prod/small-infer"],
                     ["capacity", "--gpumem", "1000"]):
            assert run(*argv, server=api.url).code == 0
        methods = {method for method, _ in api.request_log[writes_before:]}
        assert methods == {"GET"}


def test_lists_are_paginated_and_pages_add_up(cluster: LocalCluster) -> None:
    kube = Kube.for_url(cluster.url)
    try:
        before = len(cluster.request_log)
        nodes, _ = join_pages(kube.list_nodes(page_size=3))
        pods, _ = join_pages(kube.list_pods(page_size=5))
    finally:
        kube.close()
    assert [n["metadata"]["name"] for n in nodes] == sorted(n["metadata"]["name"] for n in cluster.list("nodes"))
    assert len(pods) == len(cluster.list("pods")) == 16
    calls = cluster.request_log[before:]
    assert calls.count(("GET", "/api/v1/nodes")) == 3  # 8 nodes, 3 a page
    assert calls.count(("GET", "/api/v1/pods")) == 4  # 16 pods, 5 a page


def test_a_bad_continue_token_is_a_bad_request(cluster: LocalCluster) -> None:
    response = requests.get(f"{cluster.url}/api/v1/nodes", params={"limit": "2", "continue": "%%%"}, timeout=5)
    assert response.status_code == 400
    assert "continue key is not valid" in response.json()["message"]

"""kubectl's conventions for ``kubectl hami``: which kubeconfig, which context, which namespace.

Covers: ``KUBECONFIG`` with two files merged as kubectl merges them (the first file's ``current-context`` and
the first definition of a context win), ``--context`` choosing another context, the context's namespace as
the default of ``explain``, ``--kubeconfig`` over ``KUBECONFIG``, exec credentials run through the official
client's loader, ``inspect -n`` listing one namespace's pods, and errors that name the file or the context.
All against the in-process API server.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_web.localcluster import LocalCluster
from hami_web.ops.command import kubectl_main

from .conftest import Outcome


def kubeconfig(path: Path, *, current: str, contexts: dict[str, tuple[str, str]],
               user: dict[str, Any] | None = None) -> Path:
    """A kubeconfig file: ``contexts`` maps a context name to (server URL, namespace)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": f"{name}-cluster", "cluster": {"server": server}}
                     for name, (server, _) in contexts.items()],
        "users": [{"name": "someone", "user": user or {"token": "t"}}],
        "contexts": [{"name": name, "context": {"cluster": f"{name}-cluster", "user": "someone",
                                                **({"namespace": namespace} if namespace else {})}}
                     for name, (_, namespace) in contexts.items()]}))
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Outcome:
    capsys.readouterr()
    code = kubectl_main(argv)
    captured = capsys.readouterr()
    return Outcome(code=code, out=captured.out, err=captured.err)


REFUSED = "http://127.0.0.1:1"


@pytest.fixture
def two_files(cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """KUBECONFIG=first:second. The first file's current context ``lab`` (namespace ml) reaches the cluster;
    the second file sets current-context ``dead`` and redefines ``lab`` to a dead server: kubectl ignores both."""
    first = kubeconfig(tmp_path / "first", current="lab", contexts={"lab": (cluster.url, "ml")})
    second = kubeconfig(tmp_path / "second", current="dead",
                        contexts={"lab": (REFUSED, "other"), "dead": (REFUSED, ""), "live": (cluster.url, "")})
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}:{second}")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return first, second


def test_kubeconfig_list_uses_the_first_current_context_and_its_namespace(
        two_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    outcome = run(["explain", "big-train", "-o", "json"], capsys)
    assert outcome.code == 0, outcome.err
    assert json.loads(outcome.out)["pod"] == "ml/big-train"  # the namespace came from the context


def test_context_flag_picks_a_context_defined_in_the_second_file(
        two_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    outcome = run(["inspect", "gpu-t4-0", "--context", "live", "-o", "json"], capsys)
    assert outcome.code == 0, outcome.err
    assert [node["name"] for node in json.loads(outcome.out)["nodes"]] == ["gpu-t4-0"]
    # "live" has no namespace: explain falls back to "default", and -n wins over both.
    assert run(["explain", "big-train", "--context", "live"], capsys).err == (
        'Error from server (NotFound): pods "big-train" not found in namespace "default"\n')
    assert run(["explain", "big-train", "--context", "live", "-n", "ml", "-o", "json"], capsys).code == 0


def test_an_unreachable_context_is_named_in_the_error(two_files: tuple[Path, Path],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    outcome = run(["inspect", "--context", "dead"], capsys)
    assert outcome.code == 1
    assert outcome.err.startswith(f"cannot reach the Kubernetes API (context dead of {two_files[1]}): ")
    assert outcome.err.count("\n") == 1


def test_an_unknown_context_lists_the_known_ones(two_files: tuple[Path, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    outcome = run(["inspect", "--context", "nope"], capsys)
    files = f"{two_files[0]}:{two_files[1]}"
    assert (outcome.code, outcome.err) == (1, f"error: kubeconfig {files}: context 'nope' not found "
                                              f"(contexts: dead, lab, live)\n")


def test_kubeconfig_flag_wins_over_the_environment(two_files: tuple[Path, Path], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    only_dead = kubeconfig(tmp_path / "dead-only", current="dead", contexts={"dead": (REFUSED, "")})
    outcome = run(["inspect", "--kubeconfig", str(only_dead)], capsys)
    assert outcome.err.startswith(f"cannot reach the Kubernetes API (context dead of {only_dead}): ")


def test_a_kubeconfig_list_of_missing_files_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    listed = f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    monkeypatch.setenv("KUBECONFIG", listed)
    outcome = run(["inspect"], capsys)
    assert (outcome.code, outcome.err) == (1, f"error: KUBECONFIG={listed}: none of these files exists\n")


def test_exec_credentials_go_through_the_official_loader(cluster: LocalCluster, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    ran = tmp_path / "plugin-ran"
    plugin = tmp_path / "credential-plugin"
    plugin.write_text(f"#!{sys.executable}\nimport json, pathlib\npathlib.Path({str(ran)!r}).write_text('yes')\n"
                      "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
                      "'kind': 'ExecCredential', 'status': {'token': 'from-exec'}}))\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    config = kubeconfig(tmp_path / "exec", current="lab", contexts={"lab": (cluster.url, "ml")},
                        user={"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                                       "interactiveMode": "Never"}})
    monkeypatch.setenv("KUBECONFIG", str(config))
    outcome = run(["inspect", "gpu-t4-0", "-o", "json"], capsys)
    assert outcome.code == 0, outcome.err
    assert ran.read_text() == "yes"


def test_inspect_namespace_lists_only_that_namespaces_pods(two_files: tuple[Path, Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    every = json.loads(run(["inspect", "-A", "-o", "json"], capsys).out)
    only_ml = json.loads(run(["inspect", "-n", "ml", "-o", "json"], capsys).out)
    namespaces = {pod["namespace"] for node in every["nodes"] for gpu in node["gpus"] for pod in gpu["pods"]}
    assert len(namespaces) > 1 and "ml" in namespaces
    assert {pod["namespace"] for node in only_ml["nodes"] for gpu in node["gpus"] for pod in gpu["pods"]} == {"ml"}
    assert only_ml["cluster"] == every["cluster"]  # totals count every pod

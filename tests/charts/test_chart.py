"""The Helm chart ``charts/hami-web``, rendered by the real Helm (no cluster: ``tests/e2e/test_chart.py`` installs it).

Covers: ``helm lint --strict`` without a warning over the values matrix; ``k8s/`` is exactly the chart rendered
(``charts/render_k8s.py --check``); ``values.schema.json`` refuses a misspelt key by name at any depth and a bad
value naming its key, describes every default value, and accepts HAMi v2.10's own values file (HAMi's keys we
ignore included) and the three ``--set`` lines of ``../shared/fixtures/hami-chart-v2.10.0`` with HAMi's meaning
(HAMi's ``scheduler.extender.extraArgs`` default ``--debug -v=4`` becomes ``--log-level=DEBUG``); over the values
matrix (defaults, every family on, HA, one replica without leader election, webhook off, monitoring on, renamed
resources) every object validates against the official client's models, the server's rendered command line is
accepted by ``hami-web serve``'s own parser with the rendered device config, and each switch changes what it says:
replicas, the Lease, the ``--enable-*`` flags, the webhook and its Service, the certificate job's webhook, the
ServiceMonitor (only where the cluster has its CRD), kube-scheduler's ``managedResources`` and the webhook's
``matchConditions`` domains following renamed resources.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from hami_web import __version__
from hami_web.cli import build_parser
from hami_web.core.families import gated_specs
from hami_web.settings import build_settings

from . import helm
from .helm import container, one, scheduler_config, template

MATRIX: dict[str, tuple[str, ...]] = {
    "defaults": (),
    "every-family": ("--set", "devices.iluvatar.enabled=true", "--set", "devices.ascend.enabled=true"),
    "ha-three": ("--set", "scheduler.replicas=3"),
    "single-no-election": ("--set", "scheduler.leaderElect=false"),
    "webhook-off": ("--set", "scheduler.admissionWebhook.enabled=false"),
    "monitoring": ("--set", "prometheus.enabled=true", "--set", "grafanaDashboard.enabled=true",
                   "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"),
    "renamed": ("--set", "resourceName=example.com/vgpu", "--set", "resourceMem=example.com/vgpu-memory"),
}
# The --set lines HAMi's chart was rendered with in ../shared/fixtures/hami-chart-v2.10.0 (its README).
HAMI_ALL_OPTIONS = ("devices.ascend.enabled=true", "devices.iluvatar.enabled=true", "scheduler.nodeLockExpire=10m",
                    "global.managedNodeSelectorEnable=true", "scheduler.nodeLabelSelector.gpu=on",
                    "scheduler.forceOverwriteDefaultScheduler=false", "legacyMetrics=true",
                    "scheduler.leaderElect=true", "scheduler.replicas=2", "scheduler.livenessProbe=true")


def _set(*pairs: str) -> tuple[str, ...]:
    return tuple(argument for pair in pairs for argument in ("--set", pair))


def _server_settings(documents: list[dict[str, Any]], tmp_path: Path) -> Any:
    """``hami-web serve``'s parser and settings over the rendered args, with the rendered device config."""
    device_config = one(documents, "ConfigMap", next(d["metadata"]["name"] for d in documents
                                                      if d["kind"] == "ConfigMap"
                                                      and "device-config.yaml" in (d.get("data") or {})))
    path = tmp_path / "device-config.yaml"
    path.write_text(device_config["data"]["device-config.yaml"])
    arguments = [re.sub(r"^--device-config-file=.*", f"--device-config-file={path}", argument)
                 for argument in container(documents, "hami-web")["args"]]
    parsed: argparse.Namespace = build_parser().parse_args(arguments)
    return build_settings(parsed, environ={})


# -- lint, render, version ------------------------------------------------------------------------------------


@pytest.mark.parametrize("settings", MATRIX.values(), ids=MATRIX.keys())
def test_lint_strict_has_no_warning(settings: tuple[str, ...]) -> None:
    # helm lint has no --api-versions: the monitoring entry lints without its ServiceMonitor.
    without_api_versions = [a for i, a in enumerate(settings)
                            if a != "--api-versions" and (i == 0 or settings[i - 1] != "--api-versions")]
    result = helm.run_helm("lint", "--strict", str(helm.CHART), "--namespace", helm.NAMESPACE, *without_api_versions)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


def test_k8s_is_the_chart_rendered() -> None:
    """One source of truth: ``k8s/`` differs from the chart's rendering in nothing (re-render to fix)."""
    problems = helm.render_k8s.differences(helm.render_k8s.render(helm.helm_binary()))
    assert problems == [], "run `python charts/render_k8s.py`:\n" + "\n".join(problems)


def test_the_chart_version_is_the_package_version() -> None:
    chart = yaml.safe_load((helm.CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == __version__


# -- the schema -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("values", "named"), [
    ({"scheduler": {"replcas": 2}}, "replcas"),
    ({"resourceNme": "nvidia.com/gpu"}, "resourceNme"),
    ({"devices": {"ascend": {"enabeld": True}}}, "enabeld"),
    ({"scheduler": {"admissionWebhook": {"failurPolicy": "Fail"}}}, "failurPolicy"),
    ({"dashbord": {"bind": "off"}}, "dashbord"),
    ({"scheduler": {"defaultSchedulerPolicy": {"nodeSchedulerPolicy": "tight"}}}, "nodeSchedulerPolicy"),
    ({"scheduler": {"nodeLockExpire": "five minutes"}}, "nodeLockExpire"),
    ({"resourceName": "gpu"}, "resourceName"),
], ids=["scheduler.replcas", "resourceNme", "devices.ascend.enabeld", "admissionWebhook.failurPolicy", "dashbord",
        "bad-policy", "bad-duration", "bad-resource-name"])
def test_a_misspelt_key_or_bad_value_is_refused_naming_it(values: dict[str, Any], named: str,
                                                             tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    result = helm.run_helm("template", helm.RELEASE, str(helm.CHART), "-f", str(path))
    assert result.returncode != 0
    assert "don't meet the specifications of the schema" in result.stderr and named in result.stderr, result.stderr


def _leaves(values: dict[str, Any], prefix: str = "") -> list[str]:
    paths = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        paths += _leaves(value, f"{path}.") if isinstance(value, dict) and value else [path]
    return paths


def test_every_default_value_is_described_in_the_schema() -> None:
    schema = yaml.safe_load((helm.CHART / "values.schema.json").read_text())
    values = yaml.safe_load((helm.CHART / "values.yaml").read_text())
    for path in _leaves(values):
        node = schema
        for key in path.split("."):
            if "properties" not in node:
                break  # a free-form map (resources, labels): described as a whole
            assert key in node["properties"], f"{path}: {key} is not in values.schema.json"
            node = node["properties"][key]
        assert node.get("description"), f"{path} has no description in values.schema.json"


def test_hami_values_file_carries_over(tmp_path: Path) -> None:
    """HAMi v2.10's whole values.yaml is accepted (its device-plugin and other vendors' keys are ignored)."""
    documents = template("-f", str(helm.HAMI_VALUES))
    arguments = container(documents, "hami-web")["args"]
    assert "--log-level=DEBUG" in arguments and not any(re.match(r"--?v=", a) for a in arguments)
    assert "--node-scheduler-policy=binpack" in arguments and "--gpu-scheduler-policy=spread" in arguments
    assert one(documents, "Deployment")["spec"]["replicas"] == 1  # HAMi's scheduler.replicas
    settings = _server_settings(documents, tmp_path)
    assert settings.scheduler_name == "hami-scheduler"


def test_hami_fixture_set_lines_mean_what_they_mean_in_hami(tmp_path: Path) -> None:
    """The all-options line of ../shared/fixtures/hami-chart-v2.10.0: families, node lock, label selector, HA."""
    documents = template(*_set(*HAMI_ALL_OPTIONS))
    arguments = container(documents, "hami-web")["args"]
    assert {"--enable-ascend", "--enable-iluvatar", "--node-lock-timeout=10m",
            "--node-label-selector=gpu=on"} <= set(arguments)
    assert one(documents, "Deployment")["spec"]["replicas"] == 2
    settings = _server_settings(documents, tmp_path)
    assert {"ascend", "iluvatar"} <= settings.enabled_families
    # forceOverwriteDefaultScheduler=false, legacyMetrics, leaderElect: HAMi's flags of serve, with HAMi's meaning.
    assert settings.force_overwrite_default_scheduler is False and settings.serving.legacy_metrics is True
    assert (settings.leader.leader_elect, settings.leader.leader_elect_resource_name,
            settings.leader.leader_elect_resource_namespace) == (True, "hami-scheduler", helm.NAMESPACE)
    no_webhook = template(*_set("scheduler.admissionWebhook.enabled=false"))
    assert not [d for d in no_webhook if d["kind"] == "MutatingWebhookConfiguration"]


def test_hami_runtime_class_and_core_policy_reach_the_webhook(tmp_path: Path) -> None:
    """HAMi's chart fills nvidia.runtimeClassName from devicePlugin.runtimeClassName and nvidia.gpuCorePolicy from
    devices.nvidia.gpuCorePolicy (templates/scheduler/device-configmap.yaml); so does ours, and the server's NVIDIA
    family then sets both on a GPU pod (docs/webhook-and-extender.md#the-admission-webhook-post-webhook)."""
    documents = template(*_set("devicePlugin.runtimeClassName=nvidia", "devices.nvidia.gpuCorePolicy=force"))
    rules = _server_settings(documents, tmp_path).devices["NVIDIA"].admission
    assert (rules.runtime_class_name, rules.every_container_env) == ("nvidia",
                                                                     (("GPU_CORE_UTILIZATION_POLICY", "force"),))
    default = _server_settings(template(), tmp_path).devices["NVIDIA"].admission
    assert (default.runtime_class_name, default.every_container_env) == ("", ())
    hami = _server_settings(template("-f", str(helm.HAMI_VALUES)), tmp_path).devices["NVIDIA"].admission
    assert (hami.runtime_class_name, hami.every_container_env) == ("", ())  # HAMi's defaults: "" and "default"


# -- the values matrix ----------------------------------------------------------------------------------------

API_MODELS = {"monitoring.coreos.com/v1": None}  # no client model: checked by the e2e tier's dry run


@pytest.mark.parametrize("settings", MATRIX.values(), ids=MATRIX.keys())
def test_every_object_validates_and_the_server_accepts_its_command_line(settings: tuple[str, ...],
                                                                        tmp_path: Path) -> None:
    documents = template(*settings)
    for document in documents:
        if document["apiVersion"] in API_MODELS:
            continue
        getattr(client, f"V1{document['kind']}").model_validate(document)
    settings_built = _server_settings(documents, tmp_path)
    configuration = scheduler_config(documents)
    assert [p["schedulerName"] for p in configuration["profiles"]] == [settings_built.scheduler_name]
    managed = {entry["name"] for entry in configuration["extenders"][0]["managedResources"]}
    assert set(settings_built.devices.managed_resources()) <= managed


def test_replicas_follow_leader_election(tmp_path: Path) -> None:
    for settings, replicas, lease in ((MATRIX["defaults"], 2, True), (MATRIX["ha-three"], 3, True),
                                      (MATRIX["single-no-election"], 1, False)):
        documents = template(*settings)
        assert one(documents, "Deployment")["spec"]["replicas"] == replicas
        assert scheduler_config(documents)["leaderElection"]["leaderElect"] is lease
        assert bool([d for d in documents if d["kind"] == "Lease"]) is lease
        # hami-web follows the same Lease, and may read it, exactly when kube-scheduler elects on it.
        assert _server_settings(documents, tmp_path).leader.leader_elect is lease
        assert bool([d for d in documents if d["kind"] == "Role" and d["metadata"]["name"] == "hami-web-leader"
                     and d["rules"][0]["resourceNames"] == ["hami-scheduler"]]) is lease


def test_every_family_on_adds_the_flags_and_keeps_the_resources() -> None:
    default, every = template(), template(*MATRIX["every-family"])
    assert not {"--enable-iluvatar", "--enable-ascend"} & set(container(default, "hami-web")["args"])
    assert {"--enable-iluvatar", "--enable-ascend"} <= set(container(every, "hami-web")["args"])
    # The managed resources and the webhook are the same either way: they list every family (inert when off).
    assert scheduler_config(default)["extenders"] == scheduler_config(every)["extenders"]
    assert one(default, "MutatingWebhookConfiguration") == one(every, "MutatingWebhookConfiguration")


def test_the_chart_gates_exactly_the_registry_s_gated_families(tmp_path: Path) -> None:
    """Each family the registry enables by a flag has its ``devices.<value>`` switch in the chart, and only those."""
    specs = gated_specs()
    assert specs
    default_arguments = container(template(), "hami-web")["args"]
    for spec in specs:
        documents = template("--set", f"devices.{spec.chart_value}=true")
        assert spec.flag in container(documents, "hami-web")["args"] and spec.flag not in default_arguments
        assert spec.name in _server_settings(documents, tmp_path).enabled_families
    enable_flags = {a for a in container(template(*MATRIX["every-family"]), "hami-web")["args"]
                    if a.startswith("--enable-")}
    assert enable_flags == {spec.flag for spec in specs}


def test_webhook_off_renders_no_webhook_no_service_and_certs_skip_it() -> None:
    documents = template(*MATRIX["webhook-off"])
    kinds = {(d["kind"], d["metadata"]["name"]) for d in documents}
    assert ("MutatingWebhookConfiguration", "hami-web") not in kinds and ("Service", "hami-web") not in kinds
    assert ("ClusterRole", "hami-web-certs") not in kinds
    job = one(documents, "Job")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--webhook-config=" in job  # the certificate is still issued: the extender listener is TLS


def test_monitoring_renders_the_service_monitor_only_where_the_crd_is() -> None:
    documents = template(*MATRIX["monitoring"])
    monitor = one(documents, "ServiceMonitor")
    service = one(documents, "Service", "hami-web-metrics")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert one(documents, "ConfigMap", "hami-web-grafana-dashboard")["metadata"]["labels"]["grafana_dashboard"] == "1"
    without_crd = template("--set", "prometheus.enabled=true")
    assert not [d for d in without_crd if d["kind"] == "ServiceMonitor"]
    assert one(without_crd, "Service", "hami-web-metrics")


def test_renamed_resources_reach_the_scheduler_the_webhook_and_the_server(tmp_path: Path) -> None:
    documents = template(*MATRIX["renamed"])
    managed = [entry["name"] for entry in scheduler_config(documents)["extenders"][0]["managedResources"]]
    assert "example.com/vgpu" in managed and "nvidia.com/gpu" not in managed
    expression = one(documents, "MutatingWebhookConfiguration")["webhooks"][0]["matchConditions"][0]["expression"]
    assert "'example.com/'" in expression
    settings = _server_settings(documents, tmp_path)
    assert settings.resources.count == "example.com/vgpu" and settings.resources.memory == "example.com/vgpu-memory"


def test_a_release_of_another_name_renames_every_object_consistently() -> None:
    documents = template(release="gpu", namespace="gpu-system")
    names = {d["metadata"]["name"] for d in documents}
    assert {"gpu-hami-web", "gpu-hami-web-tls", "gpu-hami-web-settings", "hami-scheduler"} <= names
    arguments = container(documents, "hami-web")["args"]
    assert "--settings-configmap=gpu-system/gpu-hami-web-settings" in arguments
    service = one(documents, "MutatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["service"]
    assert (service["name"], service["namespace"]) == ("gpu-hami-web", "gpu-system")

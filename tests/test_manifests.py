"""Deployment artefacts: the manifests in ``k8s/``, the Dockerfile and the certificate script.

``k8s/`` is the Helm chart ``charts/hami-web`` rendered with its default values (``charts/render_k8s.py``;
``tests/charts`` checks they are identical and covers the other values), so these checks hold for the chart too.

Covers: every manifest validates against the official client's models (kinds, required fields, no unknown
fields); the kustomization lists every file; names, ports, paths, namespace, Secret and scheduler name agree
across files and with the code (Service → container port, webhook → Service and ``/webhook``, the
KubeSchedulerConfiguration → the extender routes, the ``--scheduler-name`` default and the resource names of
every device family (Iluvatar and Ascend included, as with ``--enable-iluvatar``, ``--enable-ascend``),
the Secret the Job writes → the Secret the pod mounts → the files ``serve`` reads); RBAC subjects, roles and
resource names point at objects that exist; containers are non-root, read-only, capability-free and sized;
the webhook's selectors, versions and failure policy; the Dockerfile's user, entrypoint and port. Listeners:
the Service exposes only the webhook port; kube-scheduler calls the loopback extender listener; the metrics
port is declared and annotated for scraping. Identities: hami-web and kube-scheduler each have their own
ServiceAccount (the pod's token reaches only the hami-web container; kube-scheduler uses its own token
through a kubeconfig), and the server's role has only the verbs it uses. HAMi v2.10 conventions: the webhook's
``matchConditions`` (a resource of a device family's domain — nvidia.com/*, hygon.com/*, cambricon.com/*,
iluvatar.ai/*, huawei.com/* — in any container or init container, limits or requests),
``system-cluster-critical`` for the scheduler pod, and the optional ``components/monitoring`` (ServiceMonitor on
the metrics listener, a Grafana dashboard that queries only series we serve, an overlay that builds with
``kubectl kustomize``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from hami_web import __version__
from hami_web.core.families import build_catalog, gated_specs
from hami_web.server.app import create_app
from hami_web.server.listeners import ROUTES_BY_AUDIENCE
from hami_web.settings import ResourceNames, Settings, split_host_port

REPO_ROOT = Path(__file__).resolve().parents[1]
K8S = REPO_ROOT / "k8s"
NAMESPACE = "hami-system"

API_VERSIONS = {
    "Namespace": "v1", "ServiceAccount": "v1", "Service": "v1", "ConfigMap": "v1", "Secret": "v1",
    "Deployment": "apps/v1", "Job": "batch/v1", "CronJob": "batch/v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1", "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "Role": "rbac.authorization.k8s.io/v1", "RoleBinding": "rbac.authorization.k8s.io/v1",
    "MutatingWebhookConfiguration": "admissionregistration.k8s.io/v1", "PodDisruptionBudget": "policy/v1",
    "Lease": "coordination.k8s.io/v1",
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"}

# Field names of kubescheduler.config.k8s.io/v1 that this configuration may use (upstream Go json tags).
SCHEDULER_CONFIG_FIELDS = {"apiVersion", "kind", "leaderElection", "profiles", "extenders", "clientConnection",
                           "parallelism", "percentageOfNodesToScore", "podInitialBackoffSeconds",
                           "podMaxBackoffSeconds", "delayCacheUntilActive"}
LEADER_ELECTION_FIELDS = {"leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock",
                          "resourceName", "resourceNamespace"}
EXTENDER_FIELDS = {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS",
                   "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable"}
EXTENDER_TLS_FIELDS = {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"}


def _manifest_files() -> list[Path]:
    return sorted(path for path in K8S.glob("*.yaml") if path.name != "kustomization.yaml")


def _documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in _manifest_files():
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                found.append((path.name, document))
    return found


DOCUMENTS = _documents()


def _one(kind: str, name: str) -> dict[str, Any]:
    matches = [doc for _, doc in DOCUMENTS if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def _container(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod_spec["containers"] if c["name"] == name)


def _flag(arguments: list[str], flag: str) -> str:
    """Value of ``--flag=value`` or ``--flag value`` in a container's args."""
    for index, argument in enumerate(arguments):
        if argument.startswith(flag + "="):
            return argument.split("=", 1)[1]
        if argument == flag:
            return arguments[index + 1]
    raise AssertionError(f"{flag} not in {arguments}")


def _mount_path_of_volume(container: dict[str, Any], volume: str) -> str:
    return next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == volume)


def _volume(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in pod_spec["volumes"] if v["name"] == name)


DEPLOYMENT = _one("Deployment", "hami-web")
POD = DEPLOYMENT["spec"]["template"]["spec"]
SERVER = _container(POD, "hami-web")
SCHEDULER = _container(POD, "kube-scheduler")
(CERTS_JOB,) = [doc for _, doc in DOCUMENTS if doc["kind"] == "Job"]  # hami-web-certs-<hash of its pod>
JOB_POD = CERTS_JOB["spec"]["template"]["spec"]
CRON_POD = _one("CronJob", "hami-web-certs-renew")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
SCHEDULER_CONFIG_MAP = _one("ConfigMap", "hami-scheduler-config")
SCHEDULER_CONFIG = yaml.safe_load(SCHEDULER_CONFIG_MAP["data"]["config.yaml"])
SCHEDULER_KUBECONFIG = yaml.safe_load(SCHEDULER_CONFIG_MAP["data"]["kubeconfig.yaml"])
EXTENDER = SCHEDULER_CONFIG["extenders"][0]


# -- shape --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("file_name", "document"), DOCUMENTS,
                         ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in DOCUMENTS])
def test_manifest_validates_against_the_client_model(file_name: str, document: dict[str, Any]) -> None:
    kind = document["kind"]
    assert document["apiVersion"] == API_VERSIONS[kind], file_name
    model = getattr(client, f"V1{kind}")
    # Strict: required fields present, types right, and unknown (misspelt) fields rejected at any depth.
    model.model_validate(document)
    namespace = document["metadata"].get("namespace")
    if kind in CLUSTER_SCOPED:
        assert namespace is None
    else:
        assert namespace in (NAMESPACE, "kube-system")


def test_kustomization_lists_every_manifest_file() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    assert sorted(kustomization["resources"]) == [path.name for path in _manifest_files()]
    assert "namespace" not in kustomization  # it would move the kube-system RoleBinding


def test_object_names_are_unique_per_kind_and_namespace() -> None:
    keys = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for _, d in DOCUMENTS]
    assert len(keys) == len(set(keys))


# -- the Service, the webhook and the server agree ----------------------------------------------------------


def test_service_exposes_only_the_webhook_listener() -> None:
    service = _one("Service", "hami-web")
    assert len(service["spec"]["ports"]) == 1
    port = service["spec"]["ports"][0]
    container_ports = {p["name"]: p["containerPort"] for p in SERVER["ports"]}
    target = port["targetPort"]
    webhook_port = split_host_port(_flag(SERVER["args"], "--bind"))[1]
    assert container_ports.get(target, target) == webhook_port == Settings().serving.bind_host_port[1] == 8443
    assert port["port"] == 443
    assert "/filter" not in ROUTES_BY_AUDIENCE["webhook"] and "/metrics" not in ROUTES_BY_AUDIENCE["webhook"]
    labels = DEPLOYMENT["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert DEPLOYMENT["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_the_extender_listener_is_loopback_and_not_a_container_port() -> None:
    host, port = split_host_port(_flag(SERVER["args"], "--extender-bind"))
    assert (host, port) == ("127.0.0.1", 8444) == Settings().serving.extender_host_port
    assert port not in {p["containerPort"] for p in SERVER["ports"]}


def test_the_metrics_port_is_declared_and_annotated_for_scraping() -> None:
    _, port = split_host_port(_flag(SERVER["args"], "--metrics-bind-address"))
    assert port == Settings().serving.metrics_host_port[1] == 9395
    assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in SERVER["ports"]
    annotations = DEPLOYMENT["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(port)
    assert annotations["prometheus.io/path"] == "/metrics" and ROUTES_BY_AUDIENCE["metrics"] == {"/metrics"}
    assert annotations["prometheus.io/scheme"] == "http"


def test_webhook_calls_the_service_on_the_webhook_route() -> None:
    service = _one("Service", "hami-web")
    webhook = _one("MutatingWebhookConfiguration", "hami-web")["webhooks"][0]
    target = webhook["clientConfig"]["service"]
    assert (target["name"], target["namespace"]) == (service["metadata"]["name"], service["metadata"]["namespace"])
    assert target.get("port", 443) == service["spec"]["ports"][0]["port"]
    assert target["path"] == "/webhook"
    assert "caBundle" not in webhook["clientConfig"]  # the certificate job owns it
    routes = {rule.rule: rule.methods for rule in create_app(Settings()).url_map.iter_rules()}
    assert "POST" in routes["/webhook"]


def test_webhook_admission_settings() -> None:
    webhook = _one("MutatingWebhookConfiguration", "hami-web")["webhooks"][0]
    assert webhook["admissionReviewVersions"] == ["v1", "v1beta1"]
    assert webhook["sideEffects"] == "None"
    assert webhook["timeoutSeconds"] == 10
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                 "resources": ["pods"], "scope": "Namespaced"}]
    ignore = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    assert ignore in webhook["namespaceSelector"]["matchExpressions"]
    assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
            "values": [NAMESPACE]} in webhook["namespaceSelector"]["matchExpressions"]
    assert webhook["objectSelector"]["matchExpressions"] == [ignore]
    assert _one("Namespace", NAMESPACE)["metadata"]["labels"]["hami.io/webhook"] == "ignore"


def test_probes_use_the_health_routes_over_https() -> None:
    routes = {rule.rule for rule in create_app(Settings()).url_map.iter_rules()}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        check = SERVER[probe]["httpGet"]
        assert (check["path"], check["scheme"], check["port"]) == (path, "HTTPS", "https")
        assert path in routes
    for probe in ("livenessProbe", "readinessProbe"):
        assert SCHEDULER[probe]["httpGet"]["scheme"] == "HTTPS"


# -- kube-scheduler and the extender agree -----------------------------------------------------------------


def test_scheduler_configuration_uses_only_known_fields() -> None:
    assert SCHEDULER_CONFIG["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert SCHEDULER_CONFIG["kind"] == "KubeSchedulerConfiguration"
    assert set(SCHEDULER_CONFIG) <= SCHEDULER_CONFIG_FIELDS
    assert set(SCHEDULER_CONFIG["leaderElection"]) <= LEADER_ELECTION_FIELDS
    assert set(EXTENDER) <= EXTENDER_FIELDS
    assert set(EXTENDER["tlsConfig"]) <= EXTENDER_TLS_FIELDS
    assert re.fullmatch(r"\d+(ms|s|m)", EXTENDER["httpTimeout"])


def test_profile_scheduler_name_is_the_one_the_webhook_sets() -> None:
    assert [p["schedulerName"] for p in SCHEDULER_CONFIG["profiles"]] == [Settings().scheduler_name]
    assert _flag(SERVER["args"], "--scheduler-name") == Settings().scheduler_name


def test_extender_points_at_the_loopback_extender_listener_in_the_same_pod() -> None:
    assert EXTENDER["urlPrefix"] == f"https://{_flag(SERVER['args'], '--extender-bind')}" == "https://127.0.0.1:8444"
    assert {"/filter", "/bind", "/preempt"} <= ROUTES_BY_AUDIENCE["extender"]
    assert EXTENDER["enableHTTPS"] is True
    assert (EXTENDER["filterVerb"], EXTENDER["preemptVerb"], EXTENDER["bindVerb"]) == ("filter", "preempt", "bind")
    assert EXTENDER["nodeCacheCapable"] is True and EXTENDER["weight"] == 1 and EXTENDER["httpTimeout"] == "30s"
    routes = {rule.rule: rule.methods for rule in create_app(Settings()).url_map.iter_rules()}
    assert "POST" in routes["/filter"] and "POST" in routes["/bind"] and "POST" in routes["/preempt"]


# Every family hami-web can schedule, Iluvatar's and Ascend's chips included: the shipped configuration must serve a
# server started with --enable-iluvatar or --enable-ascend (the entries are inert without: the webhook routes no such
# pod to us), as HAMi's chart lists them all.
ALL_FAMILIES = build_catalog(enable={spec.name for spec in gated_specs()})


def test_extender_manages_every_device_resource_name_of_every_family() -> None:
    entries = [entry["name"] for entry in EXTENDER["managedResources"]]
    assert len(entries) == len(set(entries)), "a resource is listed twice"
    managed = {entry["name"]: entry["ignoredByScheduler"] for entry in EXTENDER["managedResources"]}
    assert managed == dict.fromkeys(ALL_FAMILIES.managed_resources(), True)
    names = ResourceNames()
    assert {*names.managed(), names.priority} <= managed.keys()  # NVIDIA as the flags name it by default
    assert set(Settings().devices.managed_resources()) <= managed.keys()  # the default server's families
    assert {"hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores", "iluvatar.ai/MR-V100-vgpu",
            "iluvatar.ai/MR-V100.vMem", "iluvatar.ai/BI-V100.vCore", "cambricon.com/vmlu",
            "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore", "huawei.com/Ascend910B3",
            "huawei.com/Ascend910B4-1-memory", "huawei.com/Ascend910C-core"} <= managed.keys()


def test_scheduler_reads_its_config_and_the_ca_it_verifies_the_extender_with() -> None:
    config_path = _flag(SCHEDULER["command"], "--config")
    volume = next(v for v in POD["volumes"] if v.get("configMap", {}).get("name") == "hami-scheduler-config")
    assert config_path == f"{_mount_path_of_volume(SCHEDULER, volume['name'])}/config.yaml"
    assert EXTENDER["tlsConfig"]["insecure"] is False
    ca_dir, ca_file = EXTENDER["tlsConfig"]["caFile"].rsplit("/", 1)
    ca_mount = next((m for m in SCHEDULER["volumeMounts"] if m["mountPath"] == ca_dir), None)
    assert ca_mount is not None, f"kube-scheduler does not mount {ca_dir}"
    ca_volume = _volume(POD, ca_mount["name"])
    assert ca_volume["secret"]["secretName"] == _volume(POD, "tls")["secret"]["secretName"]
    assert [item["path"] for item in ca_volume["secret"]["items"]] == [ca_file] == ["ca.crt"]


def test_leader_election_lease_is_granted() -> None:
    election = SCHEDULER_CONFIG["leaderElection"]
    assert election["leaderElect"] is True
    assert (election["resourceName"], election["resourceNamespace"]) == ("hami-scheduler", NAMESPACE)
    role = _one("Role", "hami-web-leader-election")
    named = [rule for rule in role["rules"] if rule.get("resourceNames")]
    assert named[0]["resourceNames"] == ["hami-scheduler"] and "update" in named[0]["verbs"]


# -- the certificate: job writes, pod mounts, server reads ----------------------------------------------------


def test_the_secret_the_job_writes_is_the_one_the_server_reads() -> None:
    tls_volume = _volume(POD, "tls")
    mount = _mount_path_of_volume(SERVER, "tls")
    assert "subPath" not in next(m for m in SERVER["volumeMounts"] if m["name"] == "tls")  # or no hot reload
    assert _flag(SERVER["args"], "--cert-file") == f"{mount}/tls.crt"
    assert _flag(SERVER["args"], "--key-file") == f"{mount}/tls.key"
    for pod in (JOB_POD, CRON_POD):
        arguments = _container(pod, "certs")["args"]
        assert arguments[0] == "certs" and "--in-cluster" in arguments
        assert _flag(arguments, "--secret") == tls_volume["secret"]["secretName"]
        assert _flag(arguments, "--service") == _one("Service", "hami-web")["metadata"]["name"]
        assert _flag(arguments, "--namespace") == NAMESPACE
        assert _flag(arguments, "--webhook-config") == _one("MutatingWebhookConfiguration", "hami-web")[
            "metadata"]["name"]
    assert JOB_POD["containers"] == CRON_POD["containers"]


def test_the_job_may_write_exactly_its_secrets_and_webhook() -> None:
    arguments = _container(JOB_POD, "certs")["args"]
    role = _one("Role", "hami-web-certs")
    named = next(rule for rule in role["rules"] if rule.get("resourceNames"))
    assert sorted(named["resourceNames"]) == sorted([_flag(arguments, "--secret"), _flag(arguments, "--ca-secret")])
    assert {"get", "update"} <= set(named["verbs"])
    webhook_rule = _one("ClusterRole", "hami-web-certs")["rules"][0]
    assert webhook_rule["resourceNames"] == [_flag(arguments, "--webhook-config")]
    assert set(webhook_rule["verbs"]) == {"get", "patch"}


# -- RBAC ----------------------------------------------------------------------------------------------------


def test_bindings_point_at_existing_service_accounts_and_roles() -> None:
    accounts = {(d["metadata"]["namespace"], d["metadata"]["name"]) for _, d in DOCUMENTS
                if d["kind"] == "ServiceAccount"}
    built_in = {"system:kube-scheduler", "system:volume-scheduler", "extension-apiserver-authentication-reader"}
    for _, binding in DOCUMENTS:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        for subject in binding["subjects"]:
            assert (subject["namespace"], subject["name"]) in accounts
        reference = binding["roleRef"]
        if reference["name"] not in built_in:
            _one(reference["kind"], reference["name"])
    assert (NAMESPACE, POD["serviceAccountName"]) in accounts
    assert (NAMESPACE, JOB_POD["serviceAccountName"]) in accounts
    assert POD["serviceAccountName"] != JOB_POD["serviceAccountName"]  # the server cannot write Secrets


def test_server_role_is_least_privilege() -> None:
    rules = {(rule["apiGroups"][0], resource): set(rule["verbs"])
             for rule in _one("ClusterRole", "hami-web")["rules"] for resource in rule["resources"]}
    # Events go through core/v1 (Kube.create_event); events.k8s.io is not used, so not granted.
    # Preemption (docs/preemption.md): delete victims, patch pods/status, read PodDisruptionBudgets; the same
    # rights extender.preempting.RIGHTS checks at start-up.
    assert rules == {("", "nodes"): {"get", "list", "watch", "patch"},
                     ("", "pods"): {"get", "list", "watch", "patch", "delete"},
                     ("", "pods/status"): {"patch"},
                     ("policy", "poddisruptionbudgets"): {"list", "watch"},
                     ("", "pods/binding"): {"create"},
                     ("", "resourcequotas"): {"list", "watch"},
                     ("", "events"): {"create", "patch"}}


def test_the_server_may_write_only_the_settings_configmap_it_publishes() -> None:
    namespace, name = _flag(SERVER["args"], "--settings-configmap").split("/")
    role = _one("Role", "hami-web-settings")
    assert role["metadata"]["namespace"] == namespace == NAMESPACE
    rules = [(rule["resources"], set(rule["verbs"]), rule.get("resourceNames")) for rule in role["rules"]]
    # create cannot be limited by name; reading and updating are limited to the one ConfigMap.
    assert rules == [(["configmaps"], {"create"}, None), (["configmaps"], {"get", "update"}, [name])]


def _roles_bound_to(account: str) -> set[str]:
    return {binding["roleRef"]["name"] for _, binding in DOCUMENTS
            if binding["kind"] in ("ClusterRoleBinding", "RoleBinding")
            and any(subject["name"] == account for subject in binding["subjects"])}


def test_the_server_and_kube_scheduler_have_separate_service_accounts() -> None:
    assert POD["serviceAccountName"] == "hami-web"
    assert _roles_bound_to("hami-web") == {"hami-web", "hami-web-settings", "hami-web-leader"}
    assert _roles_bound_to("hami-scheduler") == {"system:kube-scheduler", "system:volume-scheduler",
                                                 "hami-web-leader-election",
                                                 "extension-apiserver-authentication-reader"}


def test_the_pod_token_reaches_only_the_server_container() -> None:
    assert POD["automountServiceAccountToken"] is False
    token_mount = "/var/run/secrets/kubernetes.io/serviceaccount"
    projected = _volume(POD, next(m["name"] for m in SERVER["volumeMounts"] if m["mountPath"] == token_mount))
    sources = projected["projected"]["sources"]
    assert [s["serviceAccountToken"]["path"] for s in sources if "serviceAccountToken" in s] == ["token"]
    assert all(m["mountPath"] != token_mount for m in SCHEDULER["volumeMounts"])


def test_kube_scheduler_uses_its_own_token_through_its_kubeconfig() -> None:
    kubeconfig_path = SCHEDULER_CONFIG["clientConnection"]["kubeconfig"]
    config_dir = _mount_path_of_volume(SCHEDULER, "scheduler-config")
    assert kubeconfig_path == f"{config_dir}/kubeconfig.yaml"
    assert _flag(SCHEDULER["command"], "--authentication-kubeconfig") == kubeconfig_path
    assert _flag(SCHEDULER["command"], "--authorization-kubeconfig") == kubeconfig_path
    user = SCHEDULER_KUBECONFIG["users"][0]["user"]
    cluster = SCHEDULER_KUBECONFIG["clusters"][0]["cluster"]
    token_dir = _mount_path_of_volume(SCHEDULER, "scheduler-token")
    assert (user["tokenFile"], cluster["certificate-authority"]) == (f"{token_dir}/token", f"{token_dir}/ca.crt")
    secret = _one("Secret", _volume(POD, "scheduler-token")["secret"]["secretName"])
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"]["kubernetes.io/service-account.name"] == "hami-scheduler"


# -- containers ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pod", [POD, JOB_POD, CRON_POD], ids=["deployment", "job", "cronjob"])
def test_containers_are_locked_down_and_sized(pod: dict[str, Any]) -> None:
    assert pod["securityContext"]["runAsNonRoot"] is True
    for container in pod["containers"]:
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert {"cpu", "memory"} <= set(container["resources"]["requests"])
        assert "memory" in container["resources"]["limits"]


def test_two_replicas_spread_over_nodes_with_a_disruption_budget_and_the_images_of_this_release() -> None:
    assert DEPLOYMENT["spec"]["replicas"] == 2
    assert DEPLOYMENT["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    (term,) = DEPLOYMENT["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    pod_labels = DEPLOYMENT["spec"]["template"]["metadata"]["labels"]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    budget = _one("PodDisruptionBudget", "hami-web")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["metadata"]["namespace"] == DEPLOYMENT["metadata"]["namespace"]
    assert budget["spec"]["selector"]["matchLabels"] == DEPLOYMENT["spec"]["selector"]["matchLabels"]
    assert SERVER["image"] == f"hami-web:{__version__}" == _container(JOB_POD, "certs")["image"]
    assert SCHEDULER["image"] == "registry.k8s.io/kube-scheduler:v1.32.0"
    assert SERVER["args"][0] == "serve"


# -- Dockerfile ------------------------------------------------------------------------------------------------


def test_dockerfile_runs_hami_web_serve_as_a_non_root_user() -> None:
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim AS build", dockerfile, re.MULTILINE)
    assert re.search(r"^USER 10001", dockerfile, re.MULTILINE)
    assert 'ENTRYPOINT ["hami-web"]' in dockerfile
    assert 'CMD ["serve"]' in dockerfile
    assert re.search(r"^EXPOSE 8443$", dockerfile, re.MULTILINE)
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    assert ".git" in ignored and ".venv" in ignored


# -- HAMi v2.10 deployment conventions ----------------------------------------------------------------------------


def test_webhook_only_receives_pods_asking_for_device_resources() -> None:
    # The expression itself is run by a real kube-apiserver in tests/admission/test_webhook_match_conditions.py.
    webhook = _one("MutatingWebhookConfiguration", "hami-web")["webhooks"][0]
    (condition,) = webhook["matchConditions"]
    expression = " ".join(condition["expression"].split())
    for part in ("object.spec.containers.exists(c,", "has(object.spec.initContainers) && "
                 "object.spec.initContainers.exists(c,", "c.resources.limits.exists(r,",
                 "c.resources.requests.exists(r,"):
        assert part in expression
    # One prefix list, the same in all four places (containers and init containers, limits and requests) ...
    lists = re.findall(r"\[([^\]]*)\]\.exists\(p, r\.startsWith\(p\)\)", expression)
    assert len(lists) == 4 and len(set(lists)) == 1, lists
    prefixes = re.findall(r"'([^']+)'", lists[0])
    assert "startsWith" not in re.sub(r"\.exists\(p, r\.startsWith\(p\)\)", "", expression)
    # ... holding exactly the domains of every family's resources (Iluvatar's too: --enable-iluvatar needs them).
    domains = {name.split("/", 1)[0] + "/" for name in ALL_FAMILIES.managed_resources()}
    assert sorted(prefixes) == sorted(domains) == ["amd.com/", "aws.amazon.com/", "birentech.com/",
                                                   "cambricon.com/", "enflame.com/",
                                                   "huawei.com/",
                                                   "hygon.com/", "iluvatar.ai/", "kunlunxin.com/", "metax-tech.com/",
                                                   "mthreads.com/",
                                                   "nvidia.com/", "vastaitech.com/"]


def test_scheduler_pod_is_system_cluster_critical() -> None:
    assert POD["priorityClassName"] == "system-cluster-critical"


MONITORING = K8S / "components" / "monitoring"


def _monitoring(name: str) -> dict[str, Any]:
    return yaml.safe_load((MONITORING / name).read_text())


def _exposed_metric_names() -> set[str]:
    from hami_web.metrics import Metrics
    from hami_web.state.cache import ClusterCache
    from hami_web.state.sync import ResourceSync

    class _Sync:
        nodes, pods = ResourceSync("nodes"), ResourceSync("pods")

        @classmethod
        def statuses(cls) -> list[ResourceSync]:
            return [cls.nodes, cls.pods]

        @staticmethod
        def refresh_age_seconds(_resource: str) -> float:
            return 1.0

        @staticmethod
        def silence_seconds(_resource: str) -> float:
            return 1.0

    registry = Metrics(ClusterCache(), _Sync()).registry
    suffixes = ("", "_total", "_bucket", "_count", "_sum")
    return {family.name + suffix for family in registry.collect() for suffix in suffixes}


def test_monitoring_component_scrapes_the_metrics_listener() -> None:
    kustomization = _monitoring("kustomization.yaml")
    assert kustomization["kind"] == "Component"
    assert sorted(kustomization["resources"]) == ["dashboard.yaml", "service.yaml", "servicemonitor.yaml"]
    service, monitor = _monitoring("service.yaml"), _monitoring("servicemonitor.yaml")
    client.V1Service.model_validate(service)
    assert service["spec"]["selector"].items() <= DEPLOYMENT["spec"]["template"]["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    # The server's --metrics-bind-address as deployed (HAMi's :9395, plain HTTP), a declared container port.
    metrics_port = split_host_port(_flag(SERVER["args"], "--metrics-bind-address"))[1]
    assert port["targetPort"] == metrics_port == 9395
    assert metrics_port in {container_port["containerPort"] for container_port in SERVER["ports"]}
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["kind"] == "ServiceMonitor"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == (port["name"], "/metrics", "http")
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]] == [NAMESPACE]


def test_grafana_dashboard_queries_only_series_we_serve() -> None:
    config_map = _monitoring("dashboard.yaml")
    client.V1ConfigMap.model_validate(config_map)
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    (text,) = config_map["data"].values()
    dashboard = json.loads(text)
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = {name for expr in expressions for name in re.findall(r"\bhami_\w+", expr)}
    assert used - _exposed_metric_names() == set()
    assert {"hami_web_request_duration_seconds_bucket", "hami_web_filter_node_rejections_total",
            "hami_gpu_memory_allocated_bytes"} <= used  # latency, rejections and usage
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl (kustomize built in)")
def test_overlay_with_the_monitoring_component_builds(tmp_path: Path) -> None:
    shutil.copytree(K8S, tmp_path / "k8s")
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [k8s]\n"
        "components: [k8s/components/monitoring]\n")
    built = subprocess.run(["kubectl", "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60,
                           check=False)
    assert built.returncode == 0, built.stderr
    objects = [doc for doc in yaml.safe_load_all(built.stdout) if doc]
    kinds = {(doc["kind"], doc["metadata"]["name"]) for doc in objects}
    assert {("ServiceMonitor", "hami-web"), ("Service", "hami-web-metrics"),
            ("ConfigMap", "hami-web-grafana-dashboard"), ("Deployment", "hami-web")} <= kinds
    assert len(objects) == len(DOCUMENTS) + 3


def test_the_role_grants_every_right_preemption_checks_for() -> None:
    """`extender.preempting.RIGHTS` (checked at start-up; without them preemption turns itself off) are all granted."""
    from hami_web.extender.preempting import RIGHTS
    rules = {(rule["apiGroups"][0], resource): set(rule["verbs"])
             for rule in _one("ClusterRole", "hami-web")["rules"] for resource in rule["resources"]}
    for verb, resource, subresource, group in RIGHTS:
        assert verb in rules[(group, f"{resource}/{subresource}" if subresource else resource)]

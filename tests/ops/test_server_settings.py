"""The server's settings without typing: published at start-up, read by ``explain`` and ``capacity``.

Covers: the published data round-trips through each flag's own parser, and a bad published value is an error
naming the ConfigMap and the key; a running server writes the ConfigMap once (an unchanged restart does not
write it again, a changed one updates it); ``explain`` with no flags then decides as ``/filter`` of that
server does and says the settings came from the ConfigMap; a flag overrides one value and is named; with no
ConfigMap (or ``--settings-configmap off``) the tools fall back to the defaults and say why; a failed write is
retried, a forbidden one (HAMi's chart's RBAC) is given up at once.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.ops.command import kubectl_main
from hami_web.server.publication import publish_settings, start_publishing
from hami_web.server.runtime import build_runtime
from hami_web.settings import (
    DEFAULT_SETTINGS_CONFIGMAP,
    ResourceNames,
    Settings,
    SettingsError,
    published_settings,
    settings_from_published,
)

from .conftest import CLUSTER

SERVER = Settings.of(node_scheduler_policy="spread", gpu_scheduler_policy="binpack,numa", default_mem_mib=12000,
                  default_cores=10, default_gpu=2, node_label_selector="gpu=yes", scheduler_name="gpu-sched",
                  resources=ResourceNames(count="example.com/gpu"))


@pytest.mark.parametrize("settings", [Settings(), SERVER], ids=["defaults", "everything-changed"])
def test_published_settings_round_trip(settings: Settings) -> None:
    published = settings_from_published(published_settings(settings), where="ConfigMap x/y")
    assert published_settings(published) == published_settings(settings)


@pytest.mark.parametrize(("key", "value", "named"), [
    ("node-scheduler-policy", "fastest", "--node-scheduler-policy"),
    ("default-mem", "-1", "--default-mem"),
    ("gpu-scheduler-policy", "binpak", "--gpu-scheduler-policy"),
])
def test_a_bad_published_value_names_the_configmap_and_key(key: str, value: str, named: str) -> None:
    with pytest.raises(SettingsError, match=f"^ConfigMap ns/cm: invalid value for {named}"):
        settings_from_published({key: value}, where="ConfigMap ns/cm")


def test_unknown_published_keys_are_ignored() -> None:
    assert settings_from_published({"from-a-newer-server": "x"}, where="c") == Settings()


def test_the_configmap_is_written_once_and_updated_when_settings_change() -> None:
    with LocalCluster() as api:
        kube = Kube.for_url(api.url)
        namespace, name = DEFAULT_SETTINGS_CONFIGMAP.split("/")
        publish_settings(kube, SERVER)
        first = api.get("configmaps", name, namespace) or {}
        assert first["data"] == published_settings(SERVER)
        publish_settings(kube, SERVER)  # a restart with the same settings
        assert (api.get("configmaps", name, namespace) or {})["metadata"]["resourceVersion"] == \
            first["metadata"]["resourceVersion"]
        publish_settings(kube, Settings())
        assert (api.get("configmaps", name, namespace) or {})["data"]["default-mem"] == "0"
        kube.close()


@pytest.mark.parametrize(("method", "status", "attempts"), [
    pytest.param("GET", 500, 3, id="failure-retried-then-given-up"),
    pytest.param("POST", 403, 1, id="forbidden-given-up-at-once"),  # HAMi's chart grants no ConfigMap create
])
def test_a_failed_publication_never_stops_anything(method: str, status: int, attempts: int) -> None:
    """A failure is retried and given up; a 403 at once, RBAC does not change between attempts."""
    with LocalCluster() as api:
        api.inject_failure(method, "configmaps", status=status, count=10)
        kube = Kube.for_url(api.url)
        outcomes: list[bool] = []
        thread = start_publishing(kube, SERVER, stopping=threading.Event(), attempts=3, backoff_seconds=0.01,
                                  done=outcomes.append)
        assert thread is not None
        thread.join(5.0)
        assert outcomes == [False]
        assert api.get("configmaps", "hami-web-settings", "hami-system") is None
        assert len([1 for sent, path in api.request_log if sent == method and "configmaps" in path]) == attempts
        kube.close()


def _explain(url: str, *flags: str, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    capsys.readouterr()
    assert kubectl_main(["explain", "lab/plain", "--server", url, "-o", "json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_explain_with_no_flags_decides_as_the_running_server(capsys: pytest.CaptureFixture[str]) -> None:
    server = Settings.of(node_scheduler_policy="spread", gpu_scheduler_policy="binpack",
                     default_mem_mib=40000, refresh_interval_seconds=300.0)
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": "lab", "uid": "u-plain"},
             "spec": {"schedulerName": "hami-scheduler",
                      "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    with LocalCluster(bookmark_interval_seconds=0.1) as api:
        api.load_file(CLUSTER)
        api.load([plain])
        kube = Kube.for_url(api.url)
        runtime = build_runtime(server, kube=kube)
        runtime.start()
        try:
            assert runtime.cache.wait_synced(5.0)
            deadline = time.monotonic() + 5.0
            while api.get("configmaps", "hami-web-settings", "hami-system") is None:
                assert time.monotonic() < deadline, "the server did not publish its settings"
                time.sleep(0.05)
            explained = _explain(api.url, capsys=capsys)
            guessed = _explain(api.url, "--settings-configmap", "off", capsys=capsys)
            overridden = _explain(api.url, "--default-mem", "0", capsys=capsys)
            pod = api.get("pods", "plain", "lab")
            answer = runtime.app.test_client().post("/filter", json={
                "Pod": pod, "NodeNames": list(explained["node_reasons"]) or [explained["node"]]}).get_json()
        finally:
            runtime.stop()
    assert explained["settings_source"] == "ConfigMap hami-system/hami-web-settings (published by the server)"
    assert explained["verdict"] == "fits" and answer["NodeNames"] == [explained["node"]]
    # 40000 MiB by default: only an A40 or A100 GPU takes it, and spread picks the emptiest node.
    assert [gpu["memory_mib"] for gpus in explained["placement"].values() for gpu in gpus] == [40000]
    assert guessed["settings_source"] == "defaults (--settings-configmap off)"
    assert [gpu["memory_mib"] for gpus in guessed["placement"].values() for gpu in gpus] != [40000]
    assert overridden["settings_source"] == ("ConfigMap hami-system/hami-web-settings (published by the "
                                             "server), overridden by --default-mem")


def test_without_a_configmap_the_tools_say_they_use_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with LocalCluster() as api:
        api.load_file(CLUSTER)
        capsys.readouterr()
        assert kubectl_main(["capacity", "--server", api.url, "--limit", "1"]) == 0
        assert "Settings:     defaults (ConfigMap hami-system/hami-web-settings not found)" in capsys.readouterr().out

"""Adding a family is one module and one registry line (docs/device-families.md#device-families, adding a family).

Covers: the made-up Zeta family of `newfamily.zeta` (the one module) added by one line of
``hami_web.core.families.registry.REGISTRY`` (here: the registry with ``zeta.SPEC`` appended), nothing else touched;
then, end to end in process against the API: the webhook routes a pod asking ``zeta.example.com/zpu`` to hami-scheduler,
``/filter`` places it on the node whose ``hami.io/node-zeta-register`` lists a free ZPU, ``/bind`` writes exactly the
annotation its device plugin reads (``hami.io/zeta-devices-allocated``, no ``…-to-allocate``) under hami-web's own bind
lock (the family has no HAMi lock) and removes that lock once bound; a second pod finds the one ZPU taken; the device
config's ``zeta`` section renames its resource; the catalog, the extender's managed resources and the published
settings list it.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.devices import Device, encode_register_json
from hami_web.core.families import build_catalog, config_document, parse_device_config, registry
from hami_web.core.nodelocks import BIND_LOCK
from hami_web.localcluster import LocalCluster

from .helpers import RuntimeFactory, Scheduler, annotations_of, container, gpu_pod, plain_node
from .newfamily import zeta

# What adding Zeta needed: the family's module, and one line in the registry. The test checks the first exists and
# that the registry line is all the rest (the monkeypatch below is that line).
FILES_NEEDED = (Path(zeta.__file__).name, "hami_web/core/families/registry.py (one line: zeta.SPEC)")


@pytest.fixture(autouse=True)
def zeta_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one registry line: ``REGISTRY = (..., zeta.SPEC)``."""
    monkeypatch.setattr(registry, "REGISTRY", (*registry.REGISTRY, zeta.SPEC))


def _zeta_node(name: str, zpus: int = 1) -> dict[str, Any]:
    node = plain_node(name)
    devices = [Device(uuid=f"{name}-zpu{i}", index=i, count=1, memory_mib=32768, cores=100, type="Zeta-Z1",
                      family=zeta.CW) for i in range(zpus)]
    node["metadata"].setdefault("annotations", {})["hami.io/node-zeta-register"] = encode_register_json(devices)
    node["status"]["allocatable"][zeta.DEFAULT_RESOURCES.count] = str(zpus)
    return node


def test_the_made_up_family_needed_one_module_and_one_registry_line() -> None:
    assert FILES_NEEDED == ("zeta.py", "hami_web/core/families/registry.py (one line: zeta.SPEC)")
    catalog = build_catalog()
    assert catalog.get("Zeta") == zeta.zeta_family(zeta.DEFAULT_RESOURCES)
    assert "zeta.example.com/zpu" in catalog.managed_resources()
    assert BIND_LOCK.key in catalog.lock_keys()


def test_its_config_section_is_read_and_published() -> None:
    config = parse_device_config({"zeta": {"resourceCountName": "zeta.example.com/zpu-v2"}})
    assert build_catalog(config=config)["Zeta"].resources.count == "zeta.example.com/zpu-v2"
    assert config_document(config) == {"zeta": {"resourceCountName": "zeta.example.com/zpu-v2"}}


def test_a_zeta_pod_is_admitted_placed_and_bound_end_to_end(apiserver: LocalCluster,
                                                            make_runtime: RuntimeFactory) -> None:
    apiserver.load([_zeta_node("zeta-node"), plain_node("cpu-node")])
    runtime = make_runtime()
    pod = gpu_pod("z1", containers=[container("main", {"zeta.example.com/zpu": "1"})])
    pod["spec"].pop("schedulerName")
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "r1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                          "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
                          "namespace": "default", "object": pod}}
    answer = runtime.app.test_client().post("/webhook", data=json.dumps(review),
                                            content_type="application/json").get_json()["response"]
    assert answer["allowed"] is True
    patch = json.loads(base64.b64decode(answer["patch"]))
    assert {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in patch
    apiserver.load([gpu_pod("z1", containers=[container("main", {"zeta.example.com/zpu": "1"})]),
                    gpu_pod("z2", containers=[container("main", {"zeta.example.com/zpu": "1"})])])
    scheduler = Scheduler(runtime.app.test_client(), apiserver)

    assert scheduler.schedule("z1", ["cpu-node", "zeta-node"]) == "zeta-node"

    stored = annotations_of(apiserver, "pods", "z1")
    assert {key: value for key, value in stored.items() if "-devices-" in key} == {
        "hami.io/zeta-devices-allocated": "zeta-node-zpu0,Zeta,32768,100:;"}  # the whole ZPU
    assert stored[names.POD_ASSIGNED_NODE] == "zeta-node"
    assert BIND_LOCK.key not in annotations_of(apiserver, "nodes", "zeta-node")  # removed once bound
    refused = scheduler.filter("z2", ["zeta-node"])
    assert refused["NodeNames"] == [] and "zeta-node" in refused["FailedNodes"]

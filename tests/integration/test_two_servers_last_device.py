"""Two hami-web servers racing for the last device of a family: only one gets it
(docs/device-families.md#device-families).

Covers: two runtimes on one API server each place a different pod on the one free device, both believing it free (each
filtered before the other bound); both binds run at once. For a family HAMi binds under ``hami.io/mutex.lock``
(Vastai's last free die of a card) and for one HAMi binds without a lock (Enflame's last GCU, under hami-web's own bind
lock): exactly one bind succeeds, the other is refused, and the pods in the API hold the device once; the bind lock is
gone from the node afterwards.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.core.devices import Device, encode_register_json
from hami_web.core.nodelocks import BIND_LOCK
from hami_web.localcluster import LocalCluster

from .helpers import RuntimeFactory, Scheduler, annotations_of, bind_at_once, container, gpu_pod, release_lock

VASTAI_NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "va", "annotations": {
    "hami.io/node-va-register": encode_register_json([
        Device(uuid="die-0", index=0, count=1, memory_mib=1, cores=100, type="Vastai", family="Vastai", card="1"),
        Device(uuid="die-1", index=1, count=1, memory_mib=1, cores=100, type="Vastai", family="Vastai", card="1")]),
    "hami.io/node-handshake-va": "Requesting_2099-01-01 00:00:00"}},
    "status": {"allocatable": {"vastaitech.com/va": "2"}}}
GCU_NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gcu", "annotations": {}},
            "status": {"capacity": {"enflame.com/gcu": "1"}, "allocatable": {"enflame.com/gcu": "1"}}}


@pytest.mark.parametrize(("node", "resource", "taken", "allocated_key"), [
    pytest.param(VASTAI_NODE, "vastaitech.com/va", "die-0", "hami.io/Vastai-devices-allocated", id="last-die"),
    pytest.param(GCU_NODE, "enflame.com/gcu", None, "hami.io/enflame-gcu-devices-allocated", id="last-gcu"),
])
def test_two_servers_racing_for_the_last_device_book_it_once(
        apiserver: LocalCluster, make_runtime: RuntimeFactory, node: dict[str, Any], resource: str,
        taken: str | None, allocated_key: str) -> None:
    name = node["metadata"]["name"]
    pods = [gpu_pod(f"p{i}", containers=[container("main", {resource: "1"})]) for i in range(3)]
    apiserver.load([node, *pods])
    servers = [make_runtime(), make_runtime()]
    if taken is not None:  # another pod holds one die: one is left
        assert Scheduler(servers[0].app.test_client(), apiserver).schedule("p2", [name]) == name
        release_lock(servers[0].kube, "p2", name)  # its device plugin is done with it
        for server in servers:
            server.sync.sync_now()
    schedulers = [Scheduler(server.app.test_client(), apiserver) for server in servers]
    for index, scheduler in enumerate(schedulers):  # each places its pod before either binds
        answer = scheduler.filter(f"p{index}", [name])
        assert answer["NodeNames"] == [name], answer
    answers = bind_at_once(schedulers, name)
    assert sorted(answer["Error"] == "" for answer in answers.values()) == [False, True], answers
    holders = [pod for pod in ("p0", "p1") if annotations_of(apiserver, "pods", pod).get(allocated_key)
               and annotations_of(apiserver, "pods", pod).get("hami.io/bind-phase") != "failed"]
    assert len(holders) == 1
    assert BIND_LOCK.key not in annotations_of(apiserver, "nodes", name)

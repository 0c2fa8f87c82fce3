"""The store's indexes of held pods (`hami_web.state.store.CacheStore.held_on`, ``priorities``) stay in step with what
it holds, whatever changes it: list, watch events that add, move, re-prioritise and delete pods, a filter's placement
and its abandonment.

Device-aware preemption reads them instead of the held pods (docs/preemption.md): ``priorities`` to look no further
when no pod of lower priority holds a device, ``held_on`` to copy only its candidates' pods under the lock. A drift
would make a preemption miss victims or take pods that are gone, so a seeded random walk checks them after every step.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from hami_web.core import names
from hami_web.core.devices import Device, encode_register_json
from hami_web.core.options import PodOptions
from hami_web.core.requests import ContainerRequest, PodRequest
from hami_web.state.cache import ClusterCache
from hami_web.state.nodes import node_record
from hami_web.state.pods import PodRecord, pod_record

NODES = ("n1", "n2", "n3")


def _node(name: str) -> dict[str, Any]:
    devices = [Device(uuid=f"{name}-g{i}", index=i, count=10, memory_mib=16000, cores=100, type="NVIDIA-A40")
               for i in range(2)]
    return {"metadata": {"name": name, "annotations": {names.NODE_REGISTER: encode_register_json(devices),
                                                        names.NODE_HANDSHAKE: "Reported_2099-01-01 00:00:00"}}}


def _pod(uid: str, node: str, priority: int) -> PodRecord:
    devices = f"{node}-g{int(uid[1:]) % 2},NVIDIA,1000,10:;"
    return pod_record({"metadata": {"uid": uid, "namespace": "ns", "name": uid, "annotations": {
        names.POD_ASSIGNED_NODE: node, names.POD_DEVICES_ALLOCATED: devices}},
        "spec": {"priority": priority, "nodeName": node,
                 "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"}})


def _assert_in_step(cache: ClusterCache) -> None:
    store = cache._store
    by_node: dict[str, dict[str, object]] = {}
    for uid, held in store.held.items():
        by_node.setdefault(held.usage.node, {})[uid] = held
    assert store.held_on == by_node
    assert store.priorities == dict(Counter(held.usage.priority for held in store.held.values()))


def test_the_indexes_follow_every_change() -> None:
    rng = random.Random(39)
    cache = ClusterCache(clock=lambda: 1_000_000.0)
    cache.replace_nodes([node_record(_node(name)) for name in NODES])
    ask = PodRequest(containers=(ContainerRequest(name="c", init=False, count=1, memory_mib=1000),))
    live: dict[str, PodRecord] = {}
    for step in range(400):
        uid = f"p{rng.randrange(30)}"
        roll = rng.random()
        if roll < 0.45:  # added, moved to another node, or given another priority
            live[uid] = _pod(uid, rng.choice(NODES), rng.randrange(4))
            cache.apply_pod_events([("MODIFIED", live[uid])])
        elif roll < 0.6 and uid in live:
            cache.apply_pod_events([("DELETED", live.pop(uid))])
        elif roll < 0.75:  # a filter places a pending pod; half the time the bind is abandoned
            pending = f"q{step}"
            cache.place(uid=pending, namespace="ns", name=pending, request=ask, options=PodOptions(),
                        candidates=list(NODES), priority=rng.randrange(4))
            if rng.random() < 0.5:
                cache.forget(pending)
        elif roll < 0.8:  # a list that shows only some of the pods
            shown = [record for record in live.values() if rng.random() < 0.8]
            cache.replace_pods(shown, listed_at=1_000_000.0)
            live = {record.uid: record for record in shown}
        _assert_in_step(cache)
    assert cache._store.held_on and len(cache._store.priorities) > 1  # the walk reached varied states

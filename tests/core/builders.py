"""Small builders for the core tests: GPUs, nodes, views, container asks, the booking of a placement and the placement
fitting every node gives."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from hami_web.core.choose import NoPlacement, Placement, choose_node, rank_nodes
from hami_web.core.devices import Device, NodeInventory
from hami_web.core.fit import PodFit, fit_pod
from hami_web.core.grants import DeviceGrant, PodGrants
from hami_web.core.options import PodOptions
from hami_web.core.requests import ContainerRequest, PodRequest
from hami_web.core.usage import DeviceUsage, NodeView, build_node_view, pod_booking, with_booking

A40 = "NVIDIA-NVIDIA A40"


def gpu(index: int, *, uuid: str | None = None, count: int = 10, memory_mib: int = 8000, cores: int = 100,
        type: str = A40, numa: int = 0, healthy: bool = True) -> Device:
    """A GPU named ``GPU-<index>`` unless ``uuid`` is given."""
    return Device(uuid=uuid or f"GPU-{index}", index=index, count=count, memory_mib=memory_mib, cores=cores,
                  type=type, numa=numa, healthy=healthy)


def inventory(name: str, devices: Sequence[Device], *, pair_scores: Mapping[str, Mapping[str, int]] | None = None,
              cordoned: Sequence[str] = ()) -> NodeInventory:
    """A node's inventory."""
    return NodeInventory(name=name, devices=tuple(devices), pair_scores=pair_scores or {},
                         cordoned=frozenset(cordoned))


def view(node: NodeInventory, usage: Mapping[str, DeviceUsage] | None = None) -> NodeView:
    """The node joined with ``usage`` (by UUID)."""
    return build_node_view(node, usage or {})


def ask(count: int = 1, *, memory_mib: int = 0, memory_percent: int = 100, cores: int = 0, name: str = "main",
        init: bool = False) -> ContainerRequest:
    """One container's ask."""
    return ContainerRequest(name=name, init=init, count=count, memory_mib=memory_mib,
                            memory_percent=memory_percent, cores=cores)


def pod(*containers: ContainerRequest) -> PodRequest:
    """A pod of ``containers`` (init containers must come first)."""
    return PodRequest(containers=tuple(containers))


def grant(uuid: str, memory_mib: int, cores: int) -> DeviceGrant:
    """One device grant."""
    return DeviceGrant(uuid=uuid, memory_mib=memory_mib, cores=cores)


def book(node_view: NodeView, grants: Sequence[Sequence[DeviceGrant]], *, init_count: int) -> NodeView:
    """``node_view`` after a pod holding ``grants`` is added to its usage, as the cache would rebuild it."""
    return with_booking(node_view, pod_booking(tuple(tuple(c) for c in grants), init_count=init_count))


def fitted_everywhere(request: PodRequest, options: PodOptions, views: Sequence[NodeView],
                      busy: frozenset[str]) -> tuple[str, float, PodGrants] | None:
    """The placement without any bound (node, total, grants), against which the filter's bounded searches are checked:
    every node fitted in rank order (busy nodes last, only when no other fits), the best total wins, ties to the
    earlier node (HAMi fits every node and sorts by score). A pod whose families add their own node-score term (Metax
    GPU's topology) counts it in the total, read from each node's annotations here, and its ties go to the node first
    by name (the term reorders the plain ranking)."""
    spread = options.node_policy == "spread"
    ranked = rank_nodes(views, options.node_policy, busy)
    if request.node_terms:
        ranked = sorted(ranked, key=lambda node: (node.name in busy, node.name))
    best: tuple[float, NodeView, PodFit] | None = None
    for node in ranked:
        if best is not None and node.name in busy and best[1].name not in busy:
            break
        fit = fit_pod(request, node, options)
        if isinstance(fit, PodFit):
            score = node.score + node_terms_on(request, node, options.node_policy)
            total = score - fit.group_score if spread else score + fit.group_score
            if best is None or (total < best[0] if spread else total > best[0]):
                best = (total, node, fit)
    return None if best is None else (best[1].name, best[0], best[2].grants)


def place_as_everywhere(request: PodRequest, options: PodOptions, views: dict[str, NodeView],
                        busy: frozenset[str]) -> None:
    """One step of a random cross-check: the filter's placement of ``request`` among ``views`` (all candidates, ``busy``
    binding) is `fitted_everywhere`'s (node, reported score, grants), or, where nothing fits, a reason for every node
    (its fit's); the placement is then booked into ``views``, as the cache books it, for the next step."""
    expected = fitted_everywhere(request, options, list(views.values()), busy)
    placed = choose_node(request, options, sorted(views), views, busy=busy)
    if expected is None:  # a reason for every node, the full fit's, those the ranking left out unseen included
        assert isinstance(placed, NoPlacement)
        assert placed.reasons == {name: failure.summary() for name in sorted(views)
                                  if not isinstance(failure := fit_pod(request, views[name], options), PodFit)}
        return
    assert isinstance(placed, Placement)
    assert (placed.node, placed.node_score, placed.grants) == expected
    views[placed.node] = book(views[placed.node], placed.grants, init_count=request.init_count)


def node_terms_on(request: PodRequest, node: NodeView, policy: str) -> float:
    """The pod's families' own node-score terms on ``node``, from the annotations its inventory keeps (0 without)."""
    annotations = json.loads(node.inventory.annotations) if node.inventory.annotations else {}
    return sum((rule.term(annotations, devices, policy) for rule, devices in request.node_terms), 0.0)


# HAMi's A100-SXM4-40GB dynamic MIG table as its device plugin registers it (``migProfiles``; memory in MiB, cores
# in percent of the card, placements in memory slices of 8).
A100_MIG_PROFILES = [
    {"name": "1g.5gb", "memoryMB": 4864, "core": 14, "sliceCount": 1,
     "placements": [{"start": start, "size": 1} for start in range(7)]},
    {"name": "1g.10gb", "memoryMB": 9856, "core": 14, "sliceCount": 1,
     "placements": [{"start": start, "size": 2} for start in (0, 2, 4, 6)]},
    {"name": "2g.10gb", "memoryMB": 9984, "core": 29, "sliceCount": 2,
     "placements": [{"start": start, "size": 2} for start in (0, 2, 4)]},
    {"name": "3g.20gb", "memoryMB": 19968, "core": 43, "sliceCount": 3,
     "placements": [{"start": 0, "size": 4}, {"start": 4, "size": 4}]},
    {"name": "4g.20gb", "memoryMB": 19968, "core": 57, "sliceCount": 4, "placements": [{"start": 0, "size": 4}]},
    {"name": "7g.40gb", "memoryMB": 40192, "core": 100, "sliceCount": 7, "placements": [{"start": 0, "size": 8}]},
]


def a100_mig_register(*uuids: str, numa: tuple[int, ...] = ()) -> str:
    """The JSON register annotation of A100-40GB GPUs in dynamic MIG mode."""
    return json.dumps([{"id": uuid, "index": index, "count": 7, "devmem": 40960, "devcore": 100,
                        "type": "NVIDIA-NVIDIA A100-SXM4-40GB", "numa": numa[index] if numa else 0, "mode": "mig",
                        "health": True, "migProfiles": A100_MIG_PROFILES} for index, uuid in enumerate(uuids)])

"""Property-based tests (hypothesis) of the scheduling core.

Covers, for random nodes (1–8 GPUs with random count, memory, cores, health, cordon, type, NUMA node, pair
scores and prior usage that is itself within limits) and random pods (1–3 containers, init containers first,
0–3 GPUs each, memory in MiB or percent, cores 0–100) under random policies and type / UUID selections:
- a placement (from `fit_pod` or `choose_node`) plus the prior usage never exceeds any GPU's task slots,
  memory or cores; every container gets exactly ``count`` distinct GPUs, each healthy, uncordoned and allowed
  by the type and UUID rules, under ``mutex`` (alone or in a chain) only GPUs no task used before, all on one
  NUMA node under numa-bind, booked with the container's memory and
  cores; encode∘decode of the grants is identity;
- a refusal accounts for every GPU of the node once (or is ``NodeInsufficientDevice`` alone);
- `may_fit` False ⇒ `fit_pod` fails, and so do fewer usable devices than the largest container asks
  (`NodeView.container_devices`, by which the ranking leaves nodes out);
- `choose_node` picks the first node in policy rank order that fits, or gives a reason for every candidate
  (and then no candidate fits);
- decoders never raise anything but `AnnotationError`, and register / pod device codecs round-trip.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_web.core.choose import Placement, choose_node, rank_nodes
from hami_web.core.devices import (
    AnnotationError,
    Device,
    NodeInventory,
    decode_pair_scores,
    decode_register,
    encode_register_json,
    encode_register_text,
)
from hami_web.core.fit import PodFit, fit_pod, may_fit
from hami_web.core.grants import DeviceGrant, decode_pod_devices, encode_pod_devices
from hami_web.core.names import NODE_INSUFFICIENT_DEVICE
from hami_web.core.options import PodOptions, ScoringWeights
from hami_web.core.requests import ContainerRequest, PodRequest
from hami_web.core.usage import DeviceUsage, NodeView, build_node_view, pod_booking

CARD_TYPES = ("NVIDIA-NVIDIA A40", "NVIDIA-NVIDIA A100-SXM4-80GB", "NVIDIA-Tesla T4", "AMD-MI100")
SHORT_TYPES = ("A40", "A100", "T4", "TESLA", "NVIDIA")
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Usage = dict[str, DeviceUsage]
GPU_POLICIES = ("binpack", "spread", "topology-aware", "mutex", "numa", "binpack,numa", "numa,spread",
                "mutex,binpack,numa", "mutex,topology-aware", "topology-aware,binpack")
WEIGHTS = (ScoringWeights(), ScoringWeights(slot=0, core=0, memory=1), ScoringWeights(slot=3, core=1, memory=0))


@st.composite
def nodes(draw: st.DrawFn, name: str = "node") -> tuple[NodeInventory, Usage]:
    """A node of 1–8 random GPUs with random pair scores and cordons, and prior usage within limits."""
    size = draw(st.integers(1, 8))
    indexes = draw(st.permutations(range(size)))
    devices = []
    usage: Usage = {}
    for position in range(size):
        uuid = f"GPU-{name}-{position}"
        device = Device(uuid=uuid, index=indexes[position], count=draw(st.integers(0, 10)),
                        memory_mib=draw(st.sampled_from([0, 1000, 8000, 16384, 46068, 81920])),
                        cores=draw(st.sampled_from([0, 50, 100, 100, 200])), type=draw(st.sampled_from(CARD_TYPES)),
                        numa=draw(st.integers(0, 2)), healthy=draw(st.booleans() | st.just(True)))
        devices.append(device)
        usage[uuid] = DeviceUsage(tasks=draw(st.integers(0, device.count)),
                                  memory_mib=draw(st.integers(0, device.memory_mib)),
                                  cores=draw(st.integers(0, device.cores)))
    uuids = [d.uuid for d in devices]
    pair_scores = {a: {b: draw(st.integers(0, 300)) for b in uuids if b != a and draw(st.booleans())} for a in uuids}
    cordoned = frozenset(draw(st.lists(st.sampled_from(uuids), max_size=2)))
    return NodeInventory(name=name, devices=tuple(devices), pair_scores=pair_scores, cordoned=cordoned), usage


@st.composite
def containers(draw: st.DrawFn) -> ContainerRequest:
    """One container's ask: 0–3 GPUs, memory in MiB or percent, cores 0–100."""
    in_mib = draw(st.booleans())
    return ContainerRequest(name=f"c{draw(st.integers(0, 99))}", init=draw(st.booleans()),
                            count=draw(st.integers(0, 3)),
                            memory_mib=draw(st.integers(1, 40000)) if in_mib else 0,
                            memory_percent=100 if in_mib else draw(st.integers(1, 100)),
                            cores=draw(st.sampled_from([0, 100]) | st.integers(0, 100)))


pods = st.lists(containers(), min_size=1, max_size=3).map(
    lambda asks: PodRequest(containers=tuple(sorted(asks, key=lambda c: not c.init))))


@st.composite
def options(draw: st.DrawFn, uuids: list[str]) -> PodOptions:
    """Random policies, numa-bind and type / UUID selections (UUIDs drawn from the node's)."""
    maybe_uuids = st.lists(st.sampled_from(uuids), max_size=3) if uuids else st.just([])
    return PodOptions(
        node_policy=draw(st.sampled_from(["binpack", "spread"])),
        gpu_policy=draw(st.sampled_from(GPU_POLICIES)),
        scoring_weights=draw(st.sampled_from(WEIGHTS)),
        numa_bind=draw(st.booleans()),
        use_types=tuple(draw(st.lists(st.sampled_from(SHORT_TYPES), max_size=2))),
        nouse_types=tuple(draw(st.lists(st.sampled_from(SHORT_TYPES[:3]), max_size=1))),
        use_uuids=frozenset(draw(maybe_uuids)) if draw(st.integers(0, 3)) == 0 else frozenset(),
        nouse_uuids=frozenset(draw(maybe_uuids)),
    )


def assert_placement_is_sound(request: PodRequest, view: NodeView, pod_options: PodOptions,
                              grants: tuple[tuple[DeviceGrant, ...], ...]) -> None:
    """Every invariant a placement on ``view`` must keep."""
    devices = {d.uuid: d for d in view.inventory.devices}
    assert len(grants) == len(request.containers)
    for container, given_gpus in zip(request.containers, grants, strict=True):
        assert len(given_gpus) == container.count
        assert len({g.uuid for g in given_gpus}) == container.count
        if pod_options.selection("NVIDIA").numa_bind:
            assert len({devices[g.uuid].numa for g in given_gpus}) <= 1
        for given_gpu in given_gpus:
            device = devices[given_gpu.uuid]
            assert device.healthy
            assert device.uuid not in view.inventory.cordoned
            assert pod_options.selection("NVIDIA").type_allowed(device.type)
            assert pod_options.selection("NVIDIA").uuid_allowed(device.uuid)
            assert given_gpu.memory_mib == container.booked_memory_mib(device.memory_mib)
            assert given_gpu.cores == container.cores
            if pod_options.gpu.mutex:
                # mutex never lands on a used GPU: nobody before this pod, and no earlier container of it.
                assert view.usage[view.inventory.devices.index(device)].tasks == 0
        if pod_options.gpu.mutex and not container.init:
            taken = [g.uuid for c, gs in zip(request.containers, grants, strict=True) if not c.init for g in gs]
            assert len(taken) == len(set(taken))
    booking = pod_booking(grants, init_count=request.init_count)
    for device, prior in zip(view.inventory.devices, view.usage, strict=True):
        after = prior + booking.get(device.uuid, DeviceUsage())
        assert after.tasks <= device.count
        assert after.memory_mib <= device.memory_mib
        assert after.cores <= device.cores
    assert decode_pod_devices(encode_pod_devices(grants)) == grants


@FAST
@given(data=st.data(), node=nodes(), request=pods)
def test_fit_pod_never_overbooks_a_gpu(data: st.DataObject, node: tuple[NodeInventory, Usage],
                                       request: PodRequest) -> None:
    inventory, usage = node
    view = build_node_view(inventory, usage)
    pod_options = data.draw(options([d.uuid for d in inventory.devices]))
    result = fit_pod(request, view, pod_options)
    if isinstance(result, PodFit):
        assert may_fit(request, view, pod_options)
        assert view.container_devices >= request.largest_count  # the ranking never leaves out a node that fits
        assert_placement_is_sound(request, view, pod_options, result.grants)
        return
    counts = dict(result.reasons)
    if NODE_INSUFFICIENT_DEVICE in counts:
        assert counts == {NODE_INSUFFICIENT_DEVICE: counts[NODE_INSUFFICIENT_DEVICE]}
        assert counts[NODE_INSUFFICIENT_DEVICE] > result.total
    else:
        assert sum(counts.values()) == result.total == len(inventory.devices)


@FAST
@given(data=st.data(), node_count=st.integers(1, 4), request=pods)
def test_choose_node_picks_first_fitting_node_in_rank_order(data: st.DataObject, node_count: int,
                                                           request: PodRequest) -> None:
    drawn = [data.draw(nodes(name=f"n{i}")) for i in range(node_count)]
    views = {inventory.name: build_node_view(inventory, usage) for inventory, usage in drawn}
    uuids = [d.uuid for inventory, _ in drawn for d in inventory.devices]
    pod_options = data.draw(options(uuids))
    candidates = data.draw(st.lists(st.sampled_from([*views, "ghost"]), min_size=1, max_size=6))
    result = choose_node(request, pod_options, candidates, views)
    known = [views[name] for name in dict.fromkeys(candidates) if name in views]
    fits = {v.name: isinstance(fit_pod(request, v, pod_options), PodFit) for v in known}
    if isinstance(result, Placement):
        view = views[result.node]
        assert result.node in candidates
        assert_placement_is_sound(request, view, pod_options, result.grants)
        ranked = [v.name for v in rank_nodes(known, pod_options.node_policy)]
        assert next(name for name in ranked if fits[name]) == result.node
    else:
        assert list(result.reasons) == list(dict.fromkeys(candidates))
        assert not any(fits.values())
        assert all(result.reasons[name] for name in result.reasons)


def _never_raises_other_than_annotation_error(decode: Callable[[str], object], text: str) -> None:
    with contextlib.suppress(AnnotationError):
        decode(text)


annotation_like_text = st.text(alphabet=st.sampled_from(list(',:;[]{}"-. 0123456789aeflrstuxGPUNVIDA')), max_size=80)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=60) | annotation_like_text)
def test_decoders_raise_only_annotation_errors(text: str) -> None:
    for decode in (decode_register, decode_pair_scores, decode_pod_devices):
        _never_raises_other_than_annotation_error(decode, text)


safe_names = st.text(alphabet=st.sampled_from(list("abcdefGPU0123456789-")), min_size=1, max_size=12)


@st.composite
def registered_devices(draw: st.DrawFn) -> tuple[Device, ...]:
    """Devices with unique UUIDs and text-safe names, as a device plugin would register them."""
    uuids = draw(st.lists(safe_names, min_size=1, max_size=8, unique=True))
    return tuple(Device(uuid=uuid, index=draw(st.integers(0, 15)), count=draw(st.integers(0, 100)),
                        memory_mib=draw(st.integers(0, 200_000)), cores=draw(st.integers(0, 400)),
                        type=draw(st.sampled_from(CARD_TYPES)), numa=draw(st.integers(0, 7)),
                        healthy=draw(st.booleans()), mode=draw(st.sampled_from(["", "hami-core", "mig"])))
                 for uuid in uuids)


@settings(max_examples=100, deadline=None)
@given(devices=registered_devices())
def test_register_codecs_round_trip(devices: tuple[Device, ...]) -> None:
    assert decode_register(encode_register_json(devices)) == devices
    assert decode_register(encode_register_text(devices)) == devices


grants_strategy = st.lists(st.lists(st.builds(DeviceGrant, uuid=safe_names, memory_mib=st.integers(0, 1 << 19),
                                              cores=st.integers(0, 100)), max_size=3).map(tuple),
                           max_size=4).map(tuple)


@settings(max_examples=100, deadline=None)
@given(grants=grants_strategy)
def test_pod_devices_codec_round_trip(grants: tuple[tuple[DeviceGrant, ...], ...]) -> None:
    assert decode_pod_devices(encode_pod_devices(grants)) == grants

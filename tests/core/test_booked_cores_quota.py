"""Namespace quotas on the cores of the families whose devices book cores in their own unit (AMD's compute units, AWS
Neuron's core bitmasks; docs/quotas.md#namespace-quotas, docs/compatibility.md#quotas).

Covers: what admission counts of such a pod, as HAMi v2.10.0's webhook does (``pkg/scheduler/webhook.go``
``fitResourceQuota``: ``Coresreq × Nums`` from each backend's ``GenerateResourceRequests``), never more; that the filter
checks every device of such a pod against the namespace's room whatever the ask (what a grant books depends on the
device: ``pkg/device/amd/device.go`` ``Fit`` books ``Totalcore × Coresreq / 100`` units, ``pkg/device/awsneuron``
``Fit`` the core mask), so it places only what the bind's re-check, counting the booked units, lets stand; and the
admission warning that says so where the namespace limits the family's cores.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.core import names
from hami_web.core.choose import NoPlacement, Placement, choose_node
from hami_web.core.devices import Device, encode_register_json
from hami_web.core.families import DEFAULT_CATALOG
from hami_web.core.options import pod_options
from hami_web.core.quota import NamespaceQuota, booking_quota_use, family_quota_names, quota_resources
from hami_web.core.requests import RequestDefaults, pod_request
from hami_web.core.usage import build_node_view, pod_booking
from hami_web.state.nodes import node_record, node_state

DEFAULTS = RequestDefaults.of(DEFAULT_CATALOG)
AMD = DEFAULT_CATALOG["AMD"]
AMD_COUNT, AMD_MEM, AMD_CORES = "amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores"
NEURON_COUNT, NEURON_CORES = "aws.amazon.com/neuron", "aws.amazon.com/neuroncore"


def pod(limits: dict[str, str], *, init: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c0", "resources": {"limits": limits}}]}
    if init is not None:
        spec["initContainers"] = [{"name": "i0", "resources": {"limits": init}}]
    return {"metadata": {"uid": "u1", "name": "p", "namespace": "team-a", "annotations": {}}, "spec": spec,
            "status": {"phase": "Pending"}}


def amd_node(compute_units: int) -> dict[str, Any]:
    gpus = [Device(uuid=f"GPU-{i}", index=i, count=4, memory_mib=196608, cores=compute_units,
                   type="AMD_Instinct_MI300X_VF", family="AMD") for i in range(2)]
    return {"metadata": {"name": "n", "annotations": {AMD.register_key: encode_register_json(gpus)}},
            "status": {"capacity": {AMD_COUNT: "2"}}}


def neuron_node() -> dict[str, Any]:
    return {"metadata": {"name": "n", "labels": {"node.kubernetes.io/instance-type": "trn1.32xlarge"}},
            "status": {"capacity": {NEURON_COUNT: "2", NEURON_CORES: "4"}}}


@pytest.mark.parametrize(("family", "limits", "init", "counted"), [
    pytest.param("AMD", {AMD_COUNT: "1"}, None, (0, 100), id="amd-no-cores-is-100-percent"),
    pytest.param("AMD", {AMD_COUNT: "2", AMD_CORES: "30", AMD_MEM: "1000"}, None, (2000, 60),
                 id="amd-percent-x-gpus"),
    pytest.param("AMD", {AMD_COUNT: "1", AMD_CORES: "10"}, {AMD_COUNT: "1", AMD_CORES: "50"}, (0, 50),
                 id="amd-init-peak"),
    pytest.param("AMD", {AMD_CORES: "50"}, None, (0, 0), id="amd-cores-without-a-count-ask-nothing"),
    pytest.param("AWSNeuron", {NEURON_CORES: "1"}, None, (0, 1), id="neuron-one-core"),
    pytest.param("AWSNeuron", {NEURON_CORES: "4"}, None, (0, 4), id="neuron-four-cores-two-devices"),
    pytest.param("AWSNeuron", {NEURON_COUNT: "2"}, None, (0, 0), id="neuron-devices-count-no-cores"),
])
def test_admission_counts_the_cores_as_hamis_webhook_at_most(family: str, limits: dict[str, str],
                                                             init: dict[str, str] | None,
                                                             counted: tuple[int, int]) -> None:
    """HAMi v2.10.0 ``fitResourceQuota``: memory and cores ``× Nums``, the larger of the containers' sum and the
    largest init container. AMD: ``GenerateResourceRequests`` gives ``Coresreq`` 100 when absent, nothing without a
    count. Neuron: a core ask is ``splitCoreRequest``'s devices × cores, its total as asked; a device ask counts
    ``coresPerAWSNeuron × Nums`` there, learnt from the last node HAMi read, which admission here does not know, so it
    counts 0: never stricter than HAMi."""
    request = pod_request(pod(limits, init=init), DEFAULTS)
    memory, cores = counted
    resources = DEFAULT_CATALOG[family].resources
    limit = {name: amount for name, amount in ((resources.memory, memory), (resources.cores, cores)) if name}
    assert NamespaceQuota("team-a", limit, {}).admission_excess(request, DEFAULT_CATALOG) is None
    over = {name: amount - 1 for name, amount in limit.items() if amount}
    excess = NamespaceQuota("team-a", over, {}).admission_excess(request, DEFAULT_CATALOG)
    assert (excess is not None) is bool(over)
    if excess is not None:
        assert excess.request == limit[excess.resource]


def place(the_node: dict[str, Any], limits: dict[str, str], quota: NamespaceQuota) -> Placement | NoPlacement:
    state = node_state(node_record(the_node, catalog=DEFAULT_CATALOG), now=0.0, catalog=DEFAULT_CATALOG)
    assert state.inventory is not None, state.error
    request = pod_request(pod(limits), DEFAULTS)
    options = pod_options({}, node_policy="binpack", gpu_policy="binpack", catalog=DEFAULT_CATALOG)
    return choose_node(request, options, ["n"], {"n": build_node_view(state.inventory, {})},
                       quota=quota.pod_quota(request, DEFAULT_CATALOG))


def booked(placement: Placement) -> dict[str, int]:
    """What the bind's re-check counts of the placement against the namespace."""
    booking = pod_booking(placement.grants, init_count=0)
    return booking_quota_use(booking, placement.grants, quota_resources(DEFAULT_CATALOG),
                             family_quota_names(DEFAULT_CATALOG))


@pytest.mark.parametrize(("the_node", "limits", "room", "outcome"), [
    # 100 percent of a 304-unit GPU books 304 units: over a room of 200, which the ask (100) is not.
    pytest.param(amd_node(304), {AMD_COUNT: "1"}, {AMD_CORES: 200}, f"2/2 {names.RESOURCE_QUOTA_NOT_FIT}",
                 id="amd-whole-gpu-of-304-units-over-200"),
    pytest.param(amd_node(104), {AMD_COUNT: "1"}, {AMD_CORES: 200}, {AMD_CORES: 104, AMD_MEM: 196608},
                 id="amd-whole-gpu-of-104-units-within-200"),
    pytest.param(amd_node(304), {AMD_COUNT: "1", AMD_CORES: "50"}, {AMD_CORES: 152}, {AMD_CORES: 152,
                                                                                      AMD_MEM: 196608},
                 id="amd-half-of-304-exactly-the-room"),
    # A whole 2-core device books the mask 3, over a room of 2 cores.
    pytest.param(neuron_node(), {NEURON_COUNT: "1"}, {NEURON_CORES: 2}, f"2/2 {names.RESOURCE_QUOTA_NOT_FIT}",
                 id="neuron-whole-device-books-mask-3"),
    pytest.param(neuron_node(), {NEURON_COUNT: "1"}, {NEURON_CORES: 3}, {NEURON_CORES: 3},
                 id="neuron-whole-device-within-3"),
    pytest.param(neuron_node(), {NEURON_CORES: "1"}, {NEURON_CORES: 1}, {NEURON_CORES: 1},
                 id="neuron-one-core-books-mask-1"),
])
def test_the_filter_counts_the_units_the_devices_book(the_node: dict[str, Any], limits: dict[str, str],
                                                      room: dict[str, int], outcome: Any) -> None:
    """HAMi v2.10.0 books AMD's ``Usedcores`` as ``Totalcore × Coresreq / 100`` (``Fit``) and Neuron's as the core mask
    (``addCoreUsage``), and ``countPodDevices`` counts those against the namespace. The filter checks them on every
    device even when the ask alone looks within the room, so what it places the bind's re-check lets stand (it used to
    skip the check on the ask's numbers and the bind then voided the booking on every cycle)."""
    placement = place(the_node, limits, NamespaceQuota("team-a", room, {}))
    if isinstance(outcome, str):
        assert isinstance(placement, NoPlacement)
        assert outcome in placement.reasons["n"]
        return
    assert isinstance(placement, Placement), placement
    use = booked(placement)
    assert use == outcome
    assert all(use[name] <= limit for name, limit in room.items())


def test_a_limit_on_booked_cores_is_said_at_admission() -> None:
    """HAMi v2.10.0's webhook counts ``Coresreq × Nums`` (50 here) and its AMD ``Fit`` checks no quota; the filter here
    counts the compute units booked, so a pod admitted on the percentage may wait: admitted, with a warning saying
    so."""
    request = pod_request(pod({AMD_COUNT: "1", AMD_CORES: "50"}), DEFAULTS)
    notes = NamespaceQuota("team-a", {AMD_CORES: 200}, {}).booked_cores_notes(request, DEFAULT_CATALOG)
    assert notes == [
        "namespace team-a limits amd.com/gpucores to 200: admission counts 50 as asked (as HAMi v2.10's webhook), but "
        "placing the pod counts the compute units (each GPU's devcore x percent / 100) its devices book, known only "
        "once they are chosen; the pod may wait with ResourceQuotaNotFit where HAMi v2.10, which checks no AMD GPU "
        "quota when placing, would place it"]
    assert NamespaceQuota("team-a", {AMD_MEM: 200}, {}).booked_cores_notes(request, DEFAULT_CATALOG) == []
    neuron = pod_request(pod({NEURON_CORES: "2"}), DEFAULTS)
    (note,) = NamespaceQuota("team-a", {NEURON_CORES: 8}, {}).booked_cores_notes(neuron, DEFAULT_CATALOG)
    assert "admission counts 2 as asked" in note and "core bitmasks (a whole device of 2 cores counts 3" in note
    nvidia = pod_request(pod({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"}), DEFAULTS)
    assert NamespaceQuota("team-a", {"nvidia.com/gpucores": 200}, {}).booked_cores_notes(nvidia, DEFAULT_CATALOG) == []

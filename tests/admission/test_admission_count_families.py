"""The webhook's rules for Biren, Enflame GCU and Metax GPU containers (`review_pod`,
docs/device-families.md#device-families).

Covers: each family on by default (no flag); a count in limits routes the pod to hami-scheduler and mutates nothing
else (HAMi ``MutateAdmission``: ``pkg/device/biren/device_test.go`` Test_MutateAdmission "set to resource limits",
``enflame/gcu_test.go`` TestGCUDevices_MutateAdmission "GCU resource set to limits" / "GCU resource not set",
``metax/device_test.go`` Test_MutateAdmission "set to resources limits" / "don't set to resources limits"); a count only
in requests leaves the pod alone (HAMi reads limits only there) though the extender would read it; a pod asking two of
them and NVIDIA routed once; an invalid count denied naming the container and the resource.
"""

from __future__ import annotations

import pytest

from hami_web.admission import review_pod
from hami_web.settings import Settings

from .test_admission_families import SCHEDULED, container, pod

SETTINGS = Settings()
COUNTS = {"Biren": "birentech.com/gpu", "GCU": "enflame.com/gcu", "Metax-GPU": "metax-tech.com/gpu"}
ROUTE = [{"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}]


@pytest.mark.parametrize("cw", sorted(COUNTS))
@pytest.mark.parametrize(("part", "value", "routed"), [
    pytest.param("limits", "1", True, id="count-in-limits"),
    pytest.param("limits", "4", True, id="several-cards"),
    pytest.param("requests", "1", False, id="count-only-in-requests"),
    pytest.param("limits", "0", True, id="count-zero"),  # HAMi: the key in limits is enough
])
def test_a_count_in_limits_routes_the_pod_without_mutating_it(cw: str, part: str, value: str, routed: bool) -> None:
    decision = review_pod(pod(container(**{part: {COUNTS[cw]: value}})), SETTINGS.admission)
    assert decision.allowed
    if routed:
        assert (decision.message, decision.patch) == (f"{SCHEDULED} c", ROUTE)
    else:
        assert (decision.message, decision.patch) == ("pod asks for no GPU", [])


def test_a_pod_of_two_of_them_and_nvidia_is_routed_once() -> None:
    original = pod(container("a", limits={"birentech.com/gpu": "1", "metax-tech.com/gpu": "1"}),
                   container("b", limits={"nvidia.com/gpu": "1"}))
    decision = review_pod(original, SETTINGS.admission)
    assert decision.allowed and decision.message == f"{SCHEDULED} a, b"
    assert [op for op in decision.patch if op["path"] == "/spec/schedulerName"] == ROUTE


@pytest.mark.parametrize("cw", sorted(COUNTS))
def test_an_invalid_count_is_denied_naming_the_container_and_resource(cw: str) -> None:
    decision = review_pod(pod(container(limits={COUNTS[cw]: "lots"})), SETTINGS.admission)
    assert not decision.allowed
    assert "c" in decision.message and COUNTS[cw] in decision.message

"""The webhook's rules for AWS Neuron containers (`review_pod`, docs/device-families.md#device-families), from HAMi
v2.10's ``pkg/device/awsneuron/device_test.go`` Test_MutateAdmission.

Covers: a device count or a core count, in limits or only in requests, routes the pod unchanged ("set neuron number",
"set request-only neuron number", "set neuron cores"); a core count that is not 1 or a multiple of 2, or not above 0,
and a device count of 0 are refused in HAMi's words ("reject odd neuron core count greater than one", "reject
request-only odd neuron core count greater than one", "reject zero neuron core count", "reject negative neuron core
count"); a container with neither is not ours ("no neuron devices").
"""

from __future__ import annotations

from typing import Any

import pytest

from .test_admission_families import container, pod
from .test_admission_families import review_stored as review

COUNT, CORES = "aws.amazon.com/neuron", "aws.amazon.com/neuroncore"


@pytest.mark.parametrize("the_container", [
    pytest.param(container(limits={COUNT: "2"}), id="set neuron number"),
    pytest.param(container(requests={COUNT: "2"}), id="set request-only neuron number"),
    pytest.param(container(limits={CORES: "2"}), id="set neuron cores"),
    pytest.param(container(requests={CORES: "4"}), id="request-only cores split into two devices"),
])
def test_a_neuron_ask_routes_the_pod_unchanged(the_container: dict[str, Any]) -> None:
    allowed, _, stored = review(pod(the_container))
    assert allowed and stored["spec"]["schedulerName"] == "hami-scheduler"
    assert stored["spec"]["containers"][0]["resources"] == the_container["resources"]


@pytest.mark.parametrize(("the_container", "words"), [
    pytest.param(container(limits={CORES: "3"}), "aws.amazon.com/neuroncore must be 1 or a multiple of 2, got 3",
                 id="reject odd neuron core count greater than one"),
    pytest.param(container(requests={CORES: "3"}), "aws.amazon.com/neuroncore must be 1 or a multiple of 2, got 3",
                 id="reject request-only odd neuron core count greater than one"),
    pytest.param(container(limits={CORES: "0"}), "aws.amazon.com/neuroncore must be greater than 0",
                 id="reject zero neuron core count"),
    pytest.param(container(limits={CORES: "-2"}), "aws.amazon.com/neuroncore", id="reject negative neuron core count"),
    pytest.param(container(limits={COUNT: "0"}), "aws.amazon.com/neuron must be greater than 0",
                 id="reject zero neuron count"),
])
def test_hamis_refusals_name_the_container(the_container: dict[str, Any], words: str) -> None:
    allowed, message, _ = review(pod(the_container))
    assert not allowed and words in message and "container c" in message


def test_a_container_without_neuron_resources_is_not_ours() -> None:
    """"no neuron devices"."""
    allowed, message, stored = review(pod(container(limits={})))
    assert allowed and message == "pod asks for no GPU" and "schedulerName" not in stored["spec"]

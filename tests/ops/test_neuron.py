"""``kubectl hami`` on AWS Neuron devices (docs/device-families.md#device-families), on by default like HAMi v2.10.

Covers: ``inspect`` lists each device read from the node's capacity with its family and core mask, and counts a bound
core pod's core on its device (read back from ``hami.io/aws-neuron-devices-allocated``, a pod asking cores only);
``explain`` of a pending pod asking four devices on the trn1 node whose only aligned range is taken says why, naming
the range rule.
"""

from __future__ import annotations

import json
from typing import Any

from hami_web.localcluster import LocalCluster

from .conftest import Run, hami_pod


def _node(name: str, devices: int, instance_type: str) -> dict[str, Any]:
    capacity = {"aws.amazon.com/neuron": str(devices), "aws.amazon.com/neuroncore": str(2 * devices)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": instance_type}},
            "status": {"capacity": capacity, "allocatable": capacity}}


def test_inspect_and_explain_know_neuron_devices(run: Run, cluster: LocalCluster) -> None:
    cluster.load([
        _node("inf-0", 2, "inf2.8xlarge"), _node("trn-0", 4, "trn1.32xlarge"),
        hami_pod("core-job", {"aws.amazon.com/neuroncore": "1"}, {
            "hami.io/vgpu-node": "inf-0", "hami.io/bind-phase": "success",
            "hami.io/aws-neuron-devices-allocated": "inf-0-AWSNeuron-1,AWSNeuron,0,1:;"}, node="inf-0"),
        hami_pod("range-job", {"aws.amazon.com/neuron": "1"}, {
            "hami.io/vgpu-node": "trn-0", "hami.io/bind-phase": "success",
            "hami.io/aws-neuron-devices-allocated": "trn-0-AWSNeuron-2,AWSNeuron,0,3:;"}, node="trn-0"),
        hami_pod("range-wait", {"aws.amazon.com/neuron": "4"}),
    ])
    outcome = run("inspect", "-o", "json")
    assert (outcome.code, outcome.err) == (0, "")
    nodes = {node["name"]: node for node in json.loads(outcome.out)["nodes"]}
    assert [(gpu["uuid"], gpu["family"], gpu["tasks"], gpu["cores_booked"], gpu["cores"])
            for gpu in nodes["inf-0"]["gpus"]] == [
        ("inf-0-AWSNeuron-0", "AWSNeuron", 0, 0, 3), ("inf-0-AWSNeuron-1", "AWSNeuron", 1, 1, 3)]

    explained = run("explain", "ml/range-wait", "-o", "json")
    assert explained.code == 0, explained.err
    data = json.loads(explained.out)
    assert data["verdict"] != "fits" and data["node"] in ("", None)
    assert "no 4 consecutive free devices from a start that is a multiple of 4" in explained.out

"""AWS Neuron devices through the real clients (docs/device-families.md#device-families).

Covers: a pod asking two ``aws.amazon.com/neuron`` devices and one asking a ``aws.amazon.com/neuroncore`` created as
``kubectl apply`` would are sent to our webhook by ``k8s/webhook.yaml``'s matchConditions (``aws.amazon.com/*``) and
routed to hami-scheduler; kube-scheduler, configured by ``k8s/scheduler-config.yaml`` (both resources in
``managedResources``), binds each onto the ``inf2`` Neuron node of its pool past an NVIDIA node (the first on the range
of two whole devices 0-1, the second on one core of another device), with HAMi v2.10's
``hami.io/aws-neuron-devices-allocated``,
``AWS_NEURON_IDS``, ``NEURON_ALLOCATED``, ``NEURON_ALLOC_TIME`` and ``aws.amazon.com/predicate-node`` (and
``NEURON_RESOURCE_TYPE`` for the core ask).
"""

from __future__ import annotations

from .controlplane import ControlPlane, gpu_container, pod_manifest
from .test_scheduling import A40, devices


def test_neuron_pods_are_routed_filtered_and_bound_with_hamis_annotations(control_plane: ControlPlane,
                                                                          namespace: str) -> None:
    label = {"e2e.hami.io/pool": namespace}
    nvidia, neuron = f"{namespace}-nvidia", f"{namespace}-inf"
    control_plane.create_gpu_node(nvidia, devices(nvidia, 1, memory_mib=46068, type=A40), labels=label)
    control_plane.create_node(neuron, labels={**label, "node.kubernetes.io/instance-type": "inf2.24xlarge"},
                              devices={"aws.amazon.com/neuron": "6", "aws.amazon.com/neuroncore": "12"},
                              annotations={})
    for name, limits in (("range", {"aws.amazon.com/neuron": "2"}), ("core", {"aws.amazon.com/neuroncore": "1"})):
        control_plane.core.create_namespaced_pod(namespace, pod_manifest(name, [gpu_container("main", limits)],
                                                                         node_selector=label))
        assert control_plane.pod(namespace, name).spec.scheduler_name == "hami-scheduler"
        bound = control_plane.wait_bound(namespace, name)
        assert bound.spec.node_name == neuron
        written = bound.metadata.annotations
        assert not any(key.endswith("-devices-to-allocate") for key in written)
        assert (written["NEURON_ALLOCATED"], written["aws.amazon.com/predicate-node"]) == ("false", neuron)
        assert int(written["NEURON_ALLOC_TIME"]) > 10**18
        if name == "range":
            assert written["hami.io/aws-neuron-devices-allocated"] == (
                f"{neuron}-AWSNeuron-0,AWSNeuron,0,3:{neuron}-AWSNeuron-1,AWSNeuron,0,3:;")
            assert written["AWS_NEURON_IDS"] == "0,1" and "NEURON_RESOURCE_TYPE" not in written
        else:
            (entry,) = written["hami.io/aws-neuron-devices-allocated"].rstrip(":;").split(":")
            uuid, _, _, mask = entry.split(",")
            index = int(uuid.rsplit("-", 1)[1])
            assert mask == "1" and written["AWS_NEURON_IDS"] == str(2 * index)
            assert written["NEURON_RESOURCE_TYPE"] == "aws.amazon.com/neuroncore"

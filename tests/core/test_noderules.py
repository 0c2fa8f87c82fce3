"""kube-scheduler's node rules (`hami_web.core.noderules`), one table per rule.

Covers: cordon (and its toleration), NotReady / unreachable nodes, taints against tolerations (NoSchedule,
NoExecute, PreferNoSchedule ignored; Exists/Equal, empty key, empty effect), ``nodeSelector``, required node
affinity (In, NotIn, Exists, DoesNotExist, Gt, Lt; terms ORed, expressions ANDed; matchFields on the name),
cpu / memory / pod-count requests (init containers, sidecars, overhead, limits as requests) against
allocatable minus what bound pods request, the order of the rules, how many more pods a node takes, the
grouping of reasons, and malformed input named by field.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.core.noderules import (
    AFFINITY_MISMATCH,
    TOO_MANY_PODS,
    UNSCHEDULABLE,
    NodeTraits,
    RuleInputError,
    Taint,
    group_rule_reasons,
    node_rule_reasons,
    pod_occupies_node,
    pod_requests,
    read_node_traits,
    read_pod_needs,
    room_for,
    screen_nodes,
)

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
UNTOLERATED_GPU = "node(s) had untolerated taint {nvidia.com/gpu: present}"


def node(name: str = "n1", *, labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
         unschedulable: bool = False, ready: str | None = None, allocatable: dict[str, str] | None = None
         ) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taints is not None:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    status: dict[str, Any] = {}
    if ready is not None:
        status["conditions"] = [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}]
    if allocatable is not None:
        status["allocatable"] = allocatable
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec, "status": status}


def pod(*, tolerations: list[dict[str, str]] | None = None, selector: dict[str, str] | None = None,
        terms: list[dict[str, Any]] | None = None, requests: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": requests or {}}}]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if selector is not None:
        spec["nodeSelector"] = selector
    if terms is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                             {"nodeSelectorTerms": terms}}}
    return {"metadata": {"name": "p"}, "spec": spec}


def reasons(pod_object: dict[str, Any], node_object: dict[str, Any], used: dict[str, int] | None = None
            ) -> tuple[str, ...]:
    return node_rule_reasons(read_pod_needs(pod_object), read_node_traits(node_object), used)


# -- cordon and readiness ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("node_object", "tolerations", "expected"), [
    (node(), None, ()),
    (node(unschedulable=True), None, (UNSCHEDULABLE,)),
    (node(unschedulable=True), [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                 "effect": "NoSchedule"}], ()),
    (node(unschedulable=True), [{"operator": "Exists"}], ()),
    (node(unschedulable=True), [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                 "effect": "NoExecute"}], (UNSCHEDULABLE,)),
    (node(unschedulable=True), [{"key": "other", "operator": "Exists"}], (UNSCHEDULABLE,)),
    (node(ready="True"), None, ()),
    (node(ready="False"), None, ("node(s) had untolerated taint {node.kubernetes.io/not-ready: }",)),
    (node(ready="Unknown"), None, ("node(s) had untolerated taint {node.kubernetes.io/unreachable: }",)),
    (node(ready="False"), [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}], ()),
    (node(ready="False", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
     [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}], ()),
], ids=["schedulable", "cordoned", "cordon-tolerated", "tolerate-everything", "cordon-wrong-effect",
        "cordon-other-key", "ready", "not-ready", "unreachable", "not-ready-tolerated",
        "controller-taint-not-doubled"])
def test_cordoned_and_not_ready_nodes(node_object: dict[str, Any], tolerations: list[dict[str, str]] | None,
                                      expected: tuple[str, ...]) -> None:
    assert reasons(pod(tolerations=tolerations), node_object) == expected


# -- taints ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("taints", "tolerations", "expected"), [
    ([GPU_TAINT], None, (UNTOLERATED_GPU,)),
    ([GPU_TAINT], [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], ()),
    ([GPU_TAINT], [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}], ()),
    ([GPU_TAINT], [{"key": "nvidia.com/gpu", "value": "present"}], ()),  # operator defaults to Equal
    ([GPU_TAINT], [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}], (UNTOLERATED_GPU,)),
    ([GPU_TAINT], [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], (UNTOLERATED_GPU,)),
    ([GPU_TAINT], [{"key": "nvidia.com/gpu", "operator": "Exists"}], ()),  # empty effect: every effect
    ([GPU_TAINT], [{"operator": "Exists"}], ()),  # empty key with Exists: every taint
    ([GPU_TAINT], [{"operator": "Exists", "effect": "NoExecute"}], (UNTOLERATED_GPU,)),
    ([GPU_TAINT], [{"key": "other", "operator": "Exists"}], (UNTOLERATED_GPU,)),
    ([{"key": "dedicated", "value": "ml", "effect": "NoExecute"}], None,
     ("node(s) had untolerated taint {dedicated: ml}",)),
    ([{"key": "dedicated", "value": "ml", "effect": "PreferNoSchedule"}], None, ()),
    ([{"key": "k", "effect": "NoSchedule"}], None, ("node(s) had untolerated taint {k: }",)),
    ([{"key": "k", "effect": "NoSchedule"}], [{"key": "k", "operator": "Equal", "value": ""}], ()),
    ([GPU_TAINT, {"key": "zone", "value": "a", "effect": "NoSchedule"}],
     [{"key": "nvidia.com/gpu", "operator": "Exists"}], ("node(s) had untolerated taint {zone: a}",)),
    ([GPU_TAINT, {"key": "zone", "value": "a", "effect": "NoSchedule"}], None, (UNTOLERATED_GPU,)),
], ids=["untolerated", "exists-same-effect", "equal-value", "default-operator", "equal-other-value",
        "other-effect", "empty-effect", "empty-key-exists", "empty-key-other-effect", "other-key", "no-execute",
        "prefer-no-schedule-is-not-a-filter", "empty-value", "equal-empty-value", "second-taint-named",
        "first-taint-named"])
def test_taints_against_tolerations(taints: list[dict[str, str]], tolerations: list[dict[str, str]] | None,
                                    expected: tuple[str, ...]) -> None:
    assert reasons(pod(tolerations=tolerations), node(taints=taints)) == expected


# -- node selection ---------------------------------------------------------------------------------------

POOL = {"pool": "a100", "zone": "eu-1", "gpus": "8"}


@pytest.mark.parametrize(("selector", "matches"), [
    ({}, True),
    ({"pool": "a100"}, True),
    ({"pool": "a100", "zone": "eu-1"}, True),
    ({"pool": "a40"}, False),
    ({"pool": "a100", "zone": "us-1"}, False),
    ({"missing": ""}, False),
], ids=["none", "one-label", "two-labels", "other-value", "one-of-two-differs", "absent-label"])
def test_node_selector(selector: dict[str, str], matches: bool) -> None:
    assert reasons(pod(selector=selector), node(labels=POOL)) == (() if matches else (AFFINITY_MISMATCH,))


def expression(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


@pytest.mark.parametrize(("terms", "matches"), [
    ([{"matchExpressions": [expression("pool", "In", "a100", "h100")]}], True),
    ([{"matchExpressions": [expression("pool", "In", "a40")]}], False),
    ([{"matchExpressions": [expression("missing", "In", "x")]}], False),
    ([{"matchExpressions": [expression("pool", "NotIn", "a40")]}], True),
    ([{"matchExpressions": [expression("pool", "NotIn", "a100")]}], False),
    ([{"matchExpressions": [expression("missing", "NotIn", "x")]}], True),
    ([{"matchExpressions": [expression("zone", "Exists")]}], True),
    ([{"matchExpressions": [expression("missing", "Exists")]}], False),
    ([{"matchExpressions": [expression("missing", "DoesNotExist")]}], True),
    ([{"matchExpressions": [expression("zone", "DoesNotExist")]}], False),
    ([{"matchExpressions": [expression("gpus", "Gt", "4")]}], True),
    ([{"matchExpressions": [expression("gpus", "Gt", "8")]}], False),
    ([{"matchExpressions": [expression("gpus", "Lt", "9")]}], True),
    ([{"matchExpressions": [expression("gpus", "Lt", "8")]}], False),
    ([{"matchExpressions": [expression("zone", "Gt", "1")]}], False),  # not a number
    ([{"matchExpressions": [expression("missing", "Lt", "1")]}], False),
    ([{"matchExpressions": [expression("pool", "In", "a100"), expression("zone", "In", "us-1")]}], False),
    ([{"matchExpressions": [expression("pool", "In", "a100"), expression("zone", "In", "eu-1")]}], True),
    ([{"matchExpressions": [expression("pool", "In", "a40")]},
      {"matchExpressions": [expression("zone", "In", "eu-1")]}], True),
    ([{"matchExpressions": [expression("pool", "In", "a40")]},
      {"matchExpressions": [expression("zone", "In", "us-1")]}], False),
    ([{"matchFields": [expression("metadata.name", "In", "n1")]}], True),
    ([{"matchFields": [expression("metadata.name", "In", "n2")]}], False),
    ([{"matchFields": [expression("metadata.name", "NotIn", "n2")]}], True),
    ([{"matchFields": [expression("metadata.name", "In", "n1")],
       "matchExpressions": [expression("pool", "In", "a40")]}], False),
    ([{}], False),  # an empty term matches no node
    ([], False),
], ids=["in", "in-other", "in-absent", "not-in", "not-in-own", "not-in-absent", "exists", "exists-absent",
        "does-not-exist", "does-not-exist-present", "gt", "gt-equal", "lt", "lt-equal", "gt-not-number",
        "lt-absent", "anded-one-fails", "anded-both-match", "ored-second-matches", "ored-none-matches",
        "field-name", "field-other-name", "field-not-in", "field-and-expression", "empty-term", "no-terms"])
def test_required_node_affinity(terms: list[dict[str, Any]], matches: bool) -> None:
    assert reasons(pod(terms=terms), node(labels=POOL)) == (() if matches else (AFFINITY_MISMATCH,))


def test_selector_and_affinity_must_both_match() -> None:
    terms = [{"matchExpressions": [expression("pool", "In", "a100")]}]
    assert reasons(pod(selector={"zone": "eu-1"}, terms=terms), node(labels=POOL)) == ()
    assert reasons(pod(selector={"zone": "us-1"}, terms=terms), node(labels=POOL)) == (AFFINITY_MISMATCH,)


# -- resources ----------------------------------------------------------------------------------------------

ALLOCATABLE = {"cpu": "4", "memory": "16Gi", "pods": "10"}


@pytest.mark.parametrize(("requests", "used", "expected"), [
    ({}, {}, ()),
    ({"cpu": "4"}, {}, ()),
    ({"cpu": "4001m"}, {}, ("Insufficient cpu",)),
    ({"cpu": "500m"}, {"cpu": 3500}, ()),
    ({"cpu": "500m"}, {"cpu": 3600}, ("Insufficient cpu",)),
    ({"memory": "16Gi"}, {}, ()),
    ({"memory": "1Gi"}, {"memory": 16 * 2**30}, ("Insufficient memory",)),
    ({"cpu": "5", "memory": "17Gi"}, {}, ("Insufficient cpu", "Insufficient memory")),
    ({}, {"pods": 9}, ()),
    ({}, {"pods": 10}, (TOO_MANY_PODS,)),
    ({"cpu": "5"}, {"pods": 10}, (TOO_MANY_PODS, "Insufficient cpu")),
    ({"cpu": "0.1"}, {"cpu": 3900}, ()),
], ids=["nothing-asked", "exactly-all-cpu", "a-millicore-too-many", "fits-beside-bound", "over-beside-bound",
        "exactly-all-memory", "memory-taken", "both-short", "last-pod-slot", "no-pod-slot", "pods-and-cpu",
        "decimal-cpu"])
def test_resource_requests_against_what_is_left(requests: dict[str, str], used: dict[str, int],
                                                expected: tuple[str, ...]) -> None:
    assert reasons(pod(requests=requests), node(allocatable=ALLOCATABLE), used) == expected


def test_a_resource_the_node_does_not_report_is_not_checked() -> None:
    assert reasons(pod(requests={"cpu": "100"}), node(allocatable={"memory": "1Gi"})) == ()


@pytest.mark.parametrize(("spec", "expected"), [
    ({"containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                     {"resources": {"requests": {"cpu": "250m"}}}]}, {"cpu": 1250, "memory": 2**30}),
    ({"containers": [{"resources": {"limits": {"cpu": "2"}}}]}, {"cpu": 2000}),
    ({"containers": [{"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}}]}, {"cpu": 1000}),
    ({"containers": [{"resources": {"requests": {"cpu": "1"}}}],
      "initContainers": [{"resources": {"requests": {"cpu": "3"}}}]}, {"cpu": 3000}),
    ({"containers": [{"resources": {"requests": {"cpu": "1"}}}],
      "initContainers": [{"restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                         {"resources": {"requests": {"cpu": "1500m"}}}]}, {"cpu": 2500}),
    ({"containers": [{"resources": {"requests": {"memory": "100Mi"}}}], "overhead": {"memory": "20Mi"}},
     {"memory": 120 * 2**20}),
    ({"containers": [{"name": "c"}]}, {}),
    ({"containers": [{"resources": {"requests": {"cpu": "1m", "nvidia.com/gpu": "1"}}}]}, {"cpu": 1}),
], ids=["containers-add-up", "limit-as-request", "request-over-limit", "init-container-peak",
        "sidecar-runs-with-everything", "overhead", "nothing", "extended-resources-ignored"])
def test_pod_requests_count_as_kube_scheduler_does(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert pod_requests({"spec": spec}) == {**expected, "pods": 1}


@pytest.mark.parametrize(("pod_object", "occupies"), [
    ({"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}, "n1"),
    ({"spec": {"nodeName": "n1"}, "status": {"phase": "Pending"}}, "n1"),
    ({"spec": {"nodeName": "n1"}, "status": {"phase": "Succeeded"}}, ""),
    ({"spec": {"nodeName": "n1"}, "status": {"phase": "Failed"}}, ""),
    ({"spec": {}, "status": {"phase": "Pending"}}, ""),
], ids=["running", "bound-pending", "succeeded", "failed", "not-bound"])
def test_only_bound_unfinished_pods_take_node_resources(pod_object: dict[str, Any], occupies: str) -> None:
    assert pod_occupies_node(pod_object) == occupies


@pytest.mark.parametrize(("requests", "used", "room"), [
    ({}, {}, 10),
    ({"cpu": "1"}, {}, 4),
    ({"cpu": "1"}, {"cpu": 2500, "pods": 1}, 1),
    ({"memory": "5Gi"}, {}, 3),
    ({"cpu": "1", "memory": "1Gi"}, {"pods": 8}, 2),
    ({"cpu": "5"}, {}, 0),
], ids=["pods-only", "cpu-bound", "cpu-left-after-bound-pods", "memory-bound", "pod-slots-bound", "none"])
def test_room_for_more_pods_of_one_shape(requests: dict[str, str], used: dict[str, int], room: int) -> None:
    assert room_for(read_pod_needs(pod(requests=requests)), read_node_traits(node(allocatable=ALLOCATABLE)),
                    used) == room


def test_room_is_unlimited_when_the_node_reports_nothing() -> None:
    assert room_for(read_pod_needs(pod(requests={"cpu": "1"})), read_node_traits(node())) is None


# -- order, screening, grouping ------------------------------------------------------------------------------


def test_the_first_refusing_rule_decides_in_kube_schedulers_order() -> None:
    everything_wrong = node(unschedulable=True, taints=[GPU_TAINT], labels={}, allocatable={"cpu": "1"})
    asks = {"selector": {"pool": "a100"}, "requests": {"cpu": "2"}}
    assert reasons(pod(**asks), everything_wrong) == (UNSCHEDULABLE,)
    everything_wrong["spec"].pop("unschedulable")
    assert reasons(pod(**asks), everything_wrong) == (UNTOLERATED_GPU,)
    assert reasons(pod(**asks, tolerations=[{"operator": "Exists"}]), everything_wrong) == (AFFINITY_MISMATCH,)
    everything_wrong["metadata"]["labels"] = {"pool": "a100"}
    assert reasons(pod(**asks, tolerations=[{"operator": "Exists"}]), everything_wrong) == ("Insufficient cpu",)


def test_screening_offers_passing_nodes_and_groups_the_others_by_reason() -> None:
    nodes = [node("a", taints=[GPU_TAINT]), node("b", taints=[GPU_TAINT]), node("c", unschedulable=True),
             node("d")]
    traits = {n["metadata"]["name"]: read_node_traits(n) for n in nodes}
    screening = screen_nodes(read_pod_needs(pod()), ["a", "b", "c", "d", "unknown"], traits, {})
    assert screening.offered == ("d", "unknown")
    assert dict(screening.left_out) == {"a": (UNTOLERATED_GPU,), "b": (UNTOLERATED_GPU,), "c": (UNSCHEDULABLE,)}
    groups = group_rule_reasons(screening.left_out)
    assert [(g.cause, g.nodes, g.examples) for g in groups] == [(UNTOLERATED_GPU, 2, ("a", "b")),
                                                              (UNSCHEDULABLE, 1, ("c",))]


def test_node_traits_keep_what_the_rules_read() -> None:
    traits = read_node_traits(node(labels=POOL, taints=[GPU_TAINT], ready="True",
                                   allocatable={"cpu": "3500m", "memory": "1Ki", "pods": "110",
                                                "nvidia.com/gpu": "8"}))
    assert traits == NodeTraits(name="n1", labels=POOL, ready="True",
                                taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),),
                                allocatable={"cpu": 3500, "memory": 1024, "pods": 110})


@pytest.mark.parametrize(("reader", "bad", "named"), [
    (read_node_traits, {"metadata": {"name": "n"}, "spec": {"taints": "x"}}, "spec.taints is not a list"),
    (read_node_traits, {"metadata": {"name": "n"}, "spec": {"taints": [{"key": 3}]}}, "spec.taints[0].key"),
    (read_node_traits, {"metadata": {"labels": []}}, "metadata.labels is not a map"),
    (read_node_traits, {"status": {"allocatable": {"cpu": "lots"}}}, "cpu: 'lots' is not a quantity"),
    (read_node_traits, {"status": {"allocatable": {"memory": "1e40"}}}, "over the limit"),
    (read_pod_needs, {"spec": {"tolerations": [{"key": ["x"]}]}}, "spec.tolerations[0].key"),
    (read_pod_needs, {"spec": {"nodeSelector": {"a": 1}}}, "spec.nodeSelector[a]"),
    (read_pod_needs, {"spec": {"containers": [{"resources": {"requests": {"cpu": "-1"}}}]}}, "cpu: '-1'"),
    (read_pod_needs, {"spec": {"containers": [{"resources": {"requests": {"memory": "9" * 40}}}]}},
     "longer than 32 characters"),
    (read_pod_needs, {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                                             {"nodeSelectorTerms": [{"matchExpressions": "x"}]}}}}},
     "nodeSelectorTerms[0].matchExpressions is not a list"),
], ids=["taints-not-list", "taint-key-not-string", "labels-not-map", "bad-allocatable", "huge-allocatable",
        "toleration-key", "selector-value", "negative-request", "long-request", "expressions-not-list"])
def test_malformed_input_is_an_error_naming_the_field(reader: Any, bad: dict[str, Any], named: str) -> None:
    with pytest.raises(RuleInputError, match=named.replace("[", r"\[").replace("]", r"\]")):
        reader(bad)

"""Decode → decide → encode at the edges, without a cluster: kube-scheduler's bodies decoded into typed requests,
and each outcome encoded into the answer kube-scheduler reads (docs/wire-formats.md#extender-requests-and-answers).

Covers: a good ExtenderArgs (``NodeNames`` and full ``Nodes``) decoded into a `FilterRequest`; bad bodies decoded
into `UnreadableArgs` naming what is wrong and the pod as far as the body shows it; every filter outcome encoded in
both answer forms; a good and bad ExtenderBindingArgs; both bind outcomes encoded.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_web.core.choose import Placement
from hami_web.core.grants import DeviceGrant
from hami_web.extender.outcomes import (
    BindFailure,
    BindRefused,
    BindRequest,
    Bound,
    FilterOutcome,
    FilterRefusal,
    FilterRefused,
    FilterRequest,
    Passthrough,
    Placed,
    PodRef,
    UnreadableArgs,
    Unschedulable,
)
from hami_web.extender.wire import (
    decode_binding_args,
    decode_filter_args,
    encode_binding_result,
    encode_filter_result,
)

POD = {"metadata": {"name": "p1", "namespace": "team", "uid": "u1", "resourceVersion": "7",
                    "annotations": {"a": "b"}}, "spec": {"containers": []}}
NODE_A = {"metadata": {"name": "a"}}
NODE_B = {"metadata": {"name": "b"}}


def test_an_extender_args_with_node_names_is_a_filter_request() -> None:
    request = decode_filter_args({"pod": POD, "nodenames": ["a", "b"]})  # Go's decoder ignores the case; so do we
    assert isinstance(request, FilterRequest)
    assert (request.ref, request.candidates, request.node_objects) == (PodRef("team", "p1", "u1"), ("a", "b"), None)
    assert (request.resource_version, request.annotations, request.ref.key) == ("7", {"a": "b"}, "team/p1")


def test_an_extender_args_with_full_nodes_keeps_them_for_the_answer() -> None:
    request = decode_filter_args({"Pod": POD, "Nodes": {"items": [NODE_A, NODE_B]}})
    assert isinstance(request, FilterRequest)
    assert request.candidates == ("a", "b")
    assert request.node_objects == {"a": NODE_A, "b": NODE_B}


def test_a_pod_without_namespace_is_in_default() -> None:
    pod = {**POD, "metadata": {"name": "p1", "uid": "u1"}}
    request = decode_filter_args({"Pod": pod, "NodeNames": []})
    assert isinstance(request, FilterRequest) and request.ref.key == "default/p1"


@pytest.mark.parametrize(("body", "error", "pod_key"), [
    pytest.param(["a"], "bad ExtenderArgs: ExtenderArgs must be a JSON object, got list", "default/?", id="list"),
    pytest.param(None, "bad ExtenderArgs: ExtenderArgs must be a JSON object, got NoneType", "default/?", id="null"),
    pytest.param({"NodeNames": []}, "bad ExtenderArgs: ExtenderArgs has no Pod", "default/?", id="no-pod"),
    pytest.param({"Pod": POD}, "bad ExtenderArgs: ExtenderArgs has neither NodeNames nor Nodes", "team/p1",
                 id="no-candidates-names-the-pod"),
    pytest.param({"Pod": POD, "NodeNames": "a"}, "bad ExtenderArgs: NodeNames must be a list of strings", "team/p1",
                 id="node-names-not-a-list"),
    pytest.param({"Pod": POD, "Nodes": {"items": [{"metadata": {}}]}},
                 "bad ExtenderArgs: Nodes.items[0] has no metadata.name", "team/p1", id="nameless-node"),
    pytest.param({"Pod": {"metadata": {"name": "p1"}, "spec": {}}, "NodeNames": []},
                 "bad ExtenderArgs: Pod has no metadata.name or metadata.uid", "default/p1", id="no-uid"),
])
def test_a_bad_extender_args_is_unreadable_naming_what_is_wrong(body: Any, error: str, pod_key: str) -> None:
    assert decode_filter_args(body) == UnreadableArgs(error=error, pod_key=pod_key)


def _request(node_objects: bool) -> FilterRequest:
    return FilterRequest(pod=POD, ref=PodRef("team", "p1", "u1"), candidates=("a", "b"),
                         node_objects={"a": NODE_A, "b": NODE_B} if node_objects else None)


GRANTS = ((DeviceGrant(uuid="g0", memory_mib=1000, cores=0),),)


@pytest.mark.parametrize(("make", "by_name", "as_nodes"), [
    pytest.param(lambda r: Placed(r, Placement(node="b", grants=GRANTS, node_score=1.0)),
                 {"NodeNames": ["b"], "FailedNodes": {}, "Error": ""}, (["b"], {}), id="placed"),
    pytest.param(lambda r: Unschedulable(r, {"a": "CardInsufficientMemory", "b": "NodeUnregistered"}),
                 {"NodeNames": [], "FailedNodes": {"a": "CardInsufficientMemory", "b": "NodeUnregistered"},
                  "Error": ""}, ([], {"a": "CardInsufficientMemory", "b": "NodeUnregistered"}), id="unschedulable"),
    pytest.param(lambda r: Passthrough(r), {"NodeNames": ["a", "b"], "FailedNodes": {}, "Error": ""},
                 (["a", "b"], {}), id="passthrough-keeps-every-candidate"),
])
def test_each_filter_outcome_is_answered_in_the_form_it_was_asked(make: Any, by_name: dict[str, Any],
                                                                   as_nodes: tuple[list[str], dict[str, str]]) -> None:
    assert encode_filter_result(make(_request(node_objects=False))) == by_name
    answer = encode_filter_result(make(_request(node_objects=True)))
    chosen, failed = as_nodes
    assert answer["NodeNames"] is None and answer["FailedNodes"] == failed and answer["Error"] == ""
    assert answer["Nodes"] == {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                               "items": [{"a": NODE_A, "b": NODE_B}[node] for node in chosen]}


@pytest.mark.parametrize("outcome", [
    FilterRefused(FilterRefusal.BAD_REQUEST, "bad ExtenderArgs: x", UnreadableArgs("bad ExtenderArgs: x")),
    FilterRefused(FilterRefusal.NOT_SYNCED, "not synced", _request(True)),
    FilterRefused(FilterRefusal.POD, "pod team/p1: refused", _request(False)),
])
def test_a_refused_filter_is_an_error_with_no_nodes(outcome: FilterOutcome) -> None:
    assert isinstance(outcome, FilterRefused)
    assert encode_filter_result(outcome) == {"NodeNames": None, "FailedNodes": {}, "Error": outcome.message}
    # The decision log names the pod as far as the request does.
    assert outcome.pod_key == ("default/?" if outcome.kind is FilterRefusal.BAD_REQUEST else "team/p1")


def test_a_placed_outcome_describes_its_devices() -> None:
    placed = Placed(_request(False), Placement(node="b", grants=GRANTS, node_score=1.0))
    assert "g0" in placed.devices and "1000MiB" in placed.devices


def test_an_extender_binding_args_is_a_bind_request() -> None:
    body = {"PodName": "p1", "PodNamespace": "team", "PodUID": "u1", "Node": "a"}
    assert decode_binding_args(body) == BindRequest(ref=PodRef("team", "p1", "u1"), node="a")


@pytest.mark.parametrize(("body", "error", "pod_key"), [
    pytest.param([], "bad ExtenderBindingArgs: ExtenderBindingArgs must be a JSON object, got list", "default/?",
                 id="list"),
    pytest.param({"PodName": "p1", "PodNamespace": "team", "PodUID": "u1"},
                 "bad ExtenderBindingArgs: ExtenderBindingArgs.Node is missing, blank or not a string", "team/p1",
                 id="no-node"),
    pytest.param({"PodName": "P_1", "PodNamespace": "team", "PodUID": "u1", "Node": "a"}, None, "team/P_1",
                 id="invalid-pod-name"),
])
def test_a_bad_binding_args_is_unreadable_naming_what_is_wrong(body: Any, error: str | None, pod_key: str) -> None:
    decoded = decode_binding_args(body)
    assert isinstance(decoded, UnreadableArgs) and decoded.pod_key == pod_key
    if error is None:
        assert "is not a valid Kubernetes name" in decoded.error
    else:
        assert decoded.error == error


def test_each_bind_outcome_is_answered() -> None:
    request = BindRequest(ref=PodRef("team", "p1", "u1"), node="a")
    assert encode_binding_result(Bound(request, devices="g0")) == {"Error": ""}
    for kind in BindFailure:
        refused = BindRefused(kind, f"{kind.value}: why", request)
        assert encode_binding_result(refused) == {"Error": f"{kind.value}: why"}


@pytest.mark.parametrize(("kind", "cleaned_up"), [
    (BindFailure.BAD_REQUEST, False), (BindFailure.NOT_OURS, False), (BindFailure.LOCKED, False),
    (BindFailure.UNKNOWN, False), (BindFailure.CONFLICT, True), (BindFailure.FAILED, True),
])
def test_only_conflicts_and_failures_are_cleaned_up(kind: BindFailure, cleaned_up: bool) -> None:
    # A held lock changed nothing; an unknown Binding may have landed, so its booking and lock stay.
    assert kind.cleaned_up is cleaned_up

"""Fuzzing the parsers and the routes with hypothesis (docs/security.md#hardening): no input makes anything answer
``internal error``.

Covers: the register, pair-score and pod-device annotation decoders and the quantity parser raise only their
own error types on any text or JSON; reading a node or a pod object never raises whatever its shape; and
``/filter``, ``/bind`` and ``/webhook`` answer every generated body (random JSON, and pods whose annotations,
quantities and names are hostile) with HTTP 200 (or the webhook's 400) and a clear message, never an
unexpected-exception answer.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_web.core import names
from hami_web.core.devices import AnnotationError, decode_pair_scores, decode_register
from hami_web.core.grants import decode_pod_devices
from hami_web.core.quantities import QuantityError, parse_whole_quantity
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime
from hami_web.state.nodes import node_record, node_state
from hami_web.state.pods import pod_usage

from .helpers import gpu_node, gpu_pod

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)
numbers = (st.integers(-10, 10**6).map(str) | st.sampled_from(["1e2000000", "1e100000", "1e5000", "1e308", "9" * 400,
                                                                "-1", "1.5", "3k", "1Ki", "5E", "NaN", "inf", ""])
           | st.text(alphabet="0123456789eE.-+kKMGTPi", max_size=12))
separators = st.text(alphabet=",:;\n\x00 GPU-abc0123", max_size=30)
quantities = numbers | json_scalars
annotation_texts = (st.builds(lambda parts: ",".join(parts) + ":", st.lists(numbers | separators, max_size=9))
                    | st.builds(lambda devices: "".join(devices), st.lists(
                        st.builds(lambda u, m, c: f"{u},NVIDIA,{m},{c}:;", separators, numbers, numbers), max_size=3))
                    | st.builds(json.dumps, json_values) | st.text(max_size=60))


@FUZZ
@given(text=annotation_texts)
def test_annotation_decoders_raise_only_annotation_errors(text: str) -> None:
    for decode in (decode_register, decode_pair_scores, decode_pod_devices):
        try:
            decode(text)
        except AnnotationError as error:
            assert len(str(error)) < 400


@FUZZ
@given(value=quantities)
def test_the_quantity_parser_raises_only_quantity_errors(value: Any) -> None:
    try:
        parsed = parse_whole_quantity(value, container="c", resource="nvidia.com/gpu")
    except QuantityError:
        return
    assert 0 <= parsed <= 2**31 - 1


def _pod(annotations: Any, limits: Any, spec_extra: dict[str, Any]) -> dict[str, Any]:
    pod = gpu_pod("fuzz", None)
    pod["metadata"]["uid"] = "fuzz-uid"
    pod["metadata"]["annotations"] = annotations
    pod["spec"]["containers"][0]["resources"] = {"limits": limits}
    pod["spec"].update(spec_extra)
    return pod


annotation_maps = json_values | st.dictionaries(
    st.sampled_from([names.POD_ASSIGNED_NODE, names.POD_DEVICES_ALLOCATED, names.POD_GPU_POLICY,
                     names.POD_NODE_POLICY, names.POD_NUMA_BIND, names.POD_USE_GPU_TYPE, names.POD_USE_GPU_UUID,
                     names.POD_BIND_PHASE]),
    st.sampled_from(["node1", "binpack", "spread", "true"]) | annotation_texts | json_scalars, max_size=6)
limit_maps = json_values | st.dictionaries(st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem",
                                                            "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"]),
                                           quantities, max_size=4)
pods = st.builds(_pod, annotation_maps, limit_maps,
                 st.fixed_dictionaries({}, optional={"nodeName": json_scalars, "initContainers": json_values}))


@FUZZ
@given(pod=pods | json_values, node_annotations=annotation_maps)
def test_reading_any_pod_or_node_object_never_raises_anything_else(pod: Any, node_annotations: Any) -> None:
    if isinstance(pod, dict):
        with contextlib.suppress(AnnotationError):
            pod_usage(pod)
    node = {"metadata": {"name": "n", "annotations": node_annotations}}
    if isinstance(node_annotations, dict):
        node["metadata"]["annotations"] = {names.NODE_REGISTER: node_annotations.get(names.POD_DEVICES_ALLOCATED, ""),
                                           **node_annotations}
    node_state(node_record(node), now=0.0)


@FUZZ
@given(pod=pods | json_values, node_names=st.lists(st.text(max_size=10), max_size=3) | json_values)
def test_filter_answers_every_body_without_an_internal_error(apiserver: LocalCluster, runtime: Runtime, pod: Any,
                                                             node_names: Any) -> None:
    if not apiserver.get("nodes", "node1"):
        apiserver.load([gpu_node("node1")])
        runtime.sync.sync_now()
    for body in ({"Pod": pod, "NodeNames": node_names}, {"Pod": pod, "NodeNames": ["node1"]}, pod):
        response = runtime.app.test_client().post("/filter", data=json.dumps(body), content_type="application/json")
        assert response.status_code == 200
        assert "internal error" not in response.get_json()["Error"]


@FUZZ
@given(args=st.dictionaries(st.sampled_from(["PodName", "PodNamespace", "PodUID", "Node", "podname"]),
                            json_values | separators, max_size=5) | json_values)
def test_bind_answers_every_body_without_an_internal_error(runtime: Runtime, args: Any) -> None:
    response = runtime.app.test_client().post("/bind", data=json.dumps(args), content_type="application/json")
    assert response.status_code == 200
    error = response.get_json()["Error"]
    assert error and "internal error" not in error


@FUZZ
@given(pod=pods | json_values, operation=st.sampled_from(["CREATE", "UPDATE"]) | json_scalars)
def test_the_webhook_answers_every_review_without_an_internal_error(runtime: Runtime, pod: Any,
                                                                   operation: Any) -> None:
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": operation,
                          "object": pod}}
    response = runtime.app.test_client().post("/webhook", data=json.dumps(review), content_type="application/json")
    assert response.status_code in (200, 400)
    assert "could not review this request" not in response.get_data(as_text=True)

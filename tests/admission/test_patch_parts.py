"""The webhook's JSON patch is made from the parts of the pod the mutation changed (`pod_review._differing_parts`),
and it is the very patch ``jsonpatch.make_patch`` makes of the whole pod: the same operations in the same order, for
changes at every depth, members added and removed, lists changed, and values JSON tells apart that Python calls equal
(1 and True, 1 and 1.0).

HAMi's webhook (``pkg/scheduler/webhook.go`` ``Handle``) answers ``admission.PatchResponseFromRaw``, a patch computed
from the whole pod before and after; the patch is what kube-apiserver applies, so it must not change.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from hami_web.admission.pod_review import _differing_parts, review_pod
from hami_web.settings import Settings

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "admission-review-v1.json"
POD: dict[str, Any] = json.loads(FIXTURE.read_text())["request"]["object"]


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        target: Any = pod
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
    return change


def _delete(path: list[Any]) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        target: Any = pod
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]
    return change


def _append(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        target: Any = pod
        for step in path:
            target = target[step]
        target.append(value)
    return change


# (what, the changes made to a copy of the captured pod)
CASES: list[tuple[str, list[Callable[[dict[str, Any]], None]]]] = [
    ("nothing", []),
    ("the scheduler name", [_set(["spec", "schedulerName"], "hami-scheduler")]),
    ("an annotation added to a pod without any", [_set(["metadata", "annotations"], {"hami.io/x": "1"})]),
    ("a member removed", [_delete(["spec", "schedulerName"])]),
    ("a top-level member added and one removed", [_set(["extra"], {"a": [1, 2]}), _delete(["status"])]),
    ("a container's limits and env", [
        _set(["spec", "containers", 0, "resources"], {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}}),
        _set(["spec", "containers", 0, "env"], [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]),
    ]),
    ("a container appended", [_append(["spec", "containers"], {"name": "side", "image": "busybox"})]),
    ("1 becomes True (JSON tells them apart)", [_set(["spec", "priority"], 1), _set(["metadata", "generation"], 1)]),
    ("1 becomes 1.0", [_set(["spec", "terminationGracePeriodSeconds"], 30.0)]),
    ("a map becomes a string", [_set(["spec", "securityContext"], "none")]),
    ("changes at three depths", [_set(["spec", "runtimeClassName"], "nvidia"),
                                 _set(["spec", "schedulerName"], "hami-scheduler"),
                                 _set(["metadata", "labels"], {"app": "x", "hami.io/role": "y"})]),
]


@pytest.mark.parametrize(("what", "changes"), CASES, ids=[case[0] for case in CASES])
def test_the_patch_of_the_differing_parts_is_the_whole_pods_patch(
        what: str, changes: list[Callable[[dict[str, Any]], None]]) -> None:
    original = copy.deepcopy(POD)
    original.setdefault("spec", {}).setdefault("priority", True)
    original.setdefault("metadata", {}).setdefault("generation", True)
    original["spec"].setdefault("terminationGracePeriodSeconds", 30)
    mutated = copy.deepcopy(original)
    for change in changes:
        change(mutated)
    whole = jsonpatch.make_patch(original, mutated).patch
    assert jsonpatch.make_patch(*_differing_parts(original, mutated)).patch == whole, what
    assert jsonpatch.apply_patch(original, whole) == mutated


def _random_document(rng: random.Random, depth: int) -> Any:
    kind = rng.choice(["map", "map", "list", "str", "int", "bool", "float", "none"] if depth else
                      ["str", "int", "bool", "float", "none"])
    if kind == "map":
        return {f"k{rng.randrange(6)}": _random_document(rng, depth - 1) for _ in range(rng.randrange(5))}
    if kind == "list":
        return [_random_document(rng, depth - 1) for _ in range(rng.randrange(4))]
    return {"str": lambda: rng.choice(["a", "b", "1"]), "int": lambda: rng.choice([0, 1, 2]),
            "bool": lambda: rng.choice([True, False]), "float": lambda: rng.choice([1.0, 0.5]),
            "none": lambda: None}[kind]()


def _mutate(rng: random.Random, document: Any, depth: int) -> Any:
    if isinstance(document, dict) and document and rng.random() < 0.8:
        key = rng.choice(list(document))
        action = rng.random()
        if action < 0.2:
            del document[key]
        elif action < 0.4:
            document[f"new{rng.randrange(3)}"] = _random_document(rng, depth)
        else:
            document[key] = _mutate(rng, document[key], depth - 1)
        return document
    if isinstance(document, list) and document and rng.random() < 0.7:
        position = rng.randrange(len(document))
        document[position] = _mutate(rng, document[position], depth - 1)
        return document
    return _random_document(rng, max(depth, 0))


def test_random_changes_give_the_same_patch() -> None:
    rng = random.Random(40)
    for _ in range(2000):
        original = {"metadata": _random_document(rng, 3), "spec": _random_document(rng, 4), "status": {"a": 1}}
        mutated = copy.deepcopy(original)
        for _ in range(rng.randrange(1, 4)):
            mutated = _mutate(rng, mutated, 4)  # a map stays a map (80 %), as a pod does
            if not isinstance(mutated, dict):
                mutated = copy.deepcopy(original)
        assert jsonpatch.make_patch(*_differing_parts(original, mutated)).patch == \
            jsonpatch.make_patch(original, mutated).patch, (original, mutated)


def test_the_webhooks_answer_to_the_captured_pod_is_unchanged() -> None:
    decision = review_pod(copy.deepcopy(POD), Settings().admission)
    assert decision.allowed
    mutated = jsonpatch.apply_patch(POD, decision.patch)
    assert decision.patch == jsonpatch.make_patch(POD, mutated).patch

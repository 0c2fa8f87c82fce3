"""Checking that a JSON object has the shape of a pod before any rule reads it.

kube-apiserver only sends pods it has already decoded, but the webhook is an HTTP endpoint anyone in the
cluster network can reach, and a `KeyError` or `AttributeError` halfway through the rules would be a
500. So every field the rules touch is checked once, up front, and a wrong one is reported with its
path (``spec.containers[1].resources.limits must be an object, got list``); after that the rules can
index freely.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hami_web.core.limits import json_type_name

CONTAINER_SECTIONS = ("initContainers", "containers")


class PodShapeError(ValueError):
    """The object is not pod-shaped; the message names the offending path."""


@dataclass(frozen=True, slots=True)
class ContainerSlot:
    """Where one container sits in the pod: ``spec.<section>[<index>]``, and its name."""

    section: str
    index: int
    name: str

    @property
    def path(self) -> str:
        """JSON-ish path for messages, e.g. ``spec.initContainers[0]``."""
        return f"spec.{self.section}[{self.index}]"


def check_pod_shape(pod: object) -> None:
    """Raise `PodShapeError` unless every field the admission rules read has the type a Pod gives it."""
    if not isinstance(pod, dict):
        raise PodShapeError(f"must be a JSON object, got {json_type_name(pod)}")
    kind = pod.get("kind")
    if kind is not None and kind != "Pod":
        raise PodShapeError(f"kind is {kind!r}, not 'Pod'")
    metadata = _optional(pod, "metadata", dict, "metadata") or {}
    annotations = _optional(metadata, "annotations", dict, "metadata.annotations") or {}
    for key in annotations:
        _optional(annotations, key, str, f"metadata.annotations[{key!r}]")
    spec = pod.get("spec")
    if spec is None:
        raise PodShapeError("spec is missing")
    if not isinstance(spec, dict):
        raise PodShapeError(f"spec must be an object, got {json_type_name(spec)}")
    _optional(spec, "schedulerName", str, "spec.schedulerName")
    _optional(spec, "nodeName", str, "spec.nodeName")
    for section in CONTAINER_SECTIONS:
        containers = _optional(spec, section, list, f"spec.{section}") or []
        for index, container in enumerate(containers):
            _check_container(container, f"spec.{section}[{index}]")


def iter_containers(pod: dict[str, Any]) -> Iterator[tuple[ContainerSlot, dict[str, Any]]]:
    """Init containers, then containers, in spec order (the order HAMi's annotations use).

    The pod must have passed `check_pod_shape`; the dicts yielded are the pod's own, so callers may
    mutate them.
    """
    spec = pod["spec"]
    for section in CONTAINER_SECTIONS:
        for index, container in enumerate(spec.get(section) or []):
            yield ContainerSlot(section=section, index=index, name=container["name"]), container


def _check_container(container: object, path: str) -> None:
    if not isinstance(container, dict):
        raise PodShapeError(f"{path} must be an object, got {json_type_name(container)}")
    name = container.get("name")
    if not isinstance(name, str) or not name:
        raise PodShapeError(f"{path}.name must be a non-empty string")
    resources = _optional(container, "resources", dict, f"{path}.resources") or {}
    for section in ("limits", "requests"):
        _optional(resources, section, dict, f"{path}.resources.{section}")
    env = _optional(container, "env", list, f"{path}.env") or []
    for index, variable in enumerate(env):
        if not isinstance(variable, dict):
            raise PodShapeError(f"{path}.env[{index}] must be an object, got {json_type_name(variable)}")
        if not isinstance(variable.get("name"), str):
            raise PodShapeError(f"{path}.env[{index}].name must be a string")
    security = _optional(container, "securityContext", dict, f"{path}.securityContext") or {}
    _optional(security, "privileged", bool, f"{path}.securityContext.privileged")


def _optional(parent: dict[str, Any], key: str, expected: type, path: str) -> Any:
    """``parent[key]`` when it is absent, null or of the expected type; otherwise a `PodShapeError`."""
    value = parent.get(key)
    if value is not None and not isinstance(value, expected):
        raise PodShapeError(f"{path} must be {_TYPE_WORDS[expected]}, got {json_type_name(value)}")
    return value


_TYPE_WORDS: dict[type, str] = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}

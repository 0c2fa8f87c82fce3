"""The cluster state: objects by (resource, namespace, name), one resourceVersion counter, change history.

Everything lives behind one `threading.Condition`, so each write is atomic (a PATCH reads, patches and
checks the resourceVersion precondition in one step, as etcd's compare-and-swap makes it atomic for the
real server) and watchers can sleep until a write arrives. Stored objects are never mutated in place:
every write stores a new dict, so readers may serialise what they were handed after the lock is released.
The history is bounded, like the real watch cache, so tests can provoke ``410 Gone`` with a small size.
"""

from __future__ import annotations

import builtins  # a class below has a method named `list`, which shadows the builtin in its annotations
import copy
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hami_web.localcluster import objects, patching
from hami_web.localcluster.errors import STALE_OBJECT, ApiError, already_exists, conflict, invalid, not_found
from hami_web.localcluster.resources import ResourceType

JsonObject = dict[str, Any]
Key = tuple[str, str, str]  # (plural, namespace or "", name)


@dataclass(frozen=True, slots=True)
class Change:
    """One write, as a watch reports it; ``previous`` lets selector watches turn moves into ADDED/DELETED."""

    resource_version: int
    resource: str
    type: str
    object: JsonObject
    previous: JsonObject | None


class Expired(Exception):
    """A watch asked to resume from a resourceVersion older than the kept history."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")


class Store:
    """Objects, the global resourceVersion and a bounded history of changes, under one lock."""

    def __init__(self, *, history_size: int) -> None:
        self.condition = threading.Condition()
        self._objects: dict[Key, JsonObject] = {}
        self._history: deque[Change] = deque(maxlen=max(1, history_size))
        self._resource_version = 0
        # Highest resourceVersion no longer in the history: a watch from below it cannot be served.
        self._evicted_through = 0

    # -- reads ------------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self.condition:
            return self._resource_version

    @property
    def oldest_resource_version(self) -> int:
        """The oldest resourceVersion a watch or a continued list may still start from."""
        with self.condition:
            return self._evicted_through

    def get(self, rt: ResourceType, namespace: str, name: str) -> JsonObject:
        """The stored object (do not mutate it); `ApiError` 404 when absent."""
        with self.condition:
            obj = self._objects.get(self._key(rt, namespace, name))
        if obj is None:
            raise not_found(rt.plural, name, rt.group)
        return obj

    def list(self, rt: ResourceType, namespace: str | None,
             predicate: Callable[[JsonObject], bool] = lambda obj: True) -> tuple[list[JsonObject], int]:
        """Matching objects sorted by namespace and name, and the resourceVersion of the snapshot."""
        with self.condition:
            items = [obj for (plural, ns, _), obj in self._objects.items()
                     if plural == rt.plural and (namespace is None or ns == namespace) and predicate(obj)]
            return sorted(items, key=_sort_key), self._resource_version

    def changes_since(self, resource_version: int) -> builtins.list[Change]:
        """Changes after ``resource_version``; `Expired` when the history no longer reaches back that far.

        Call with `condition` held to pair it with a `wait`.
        """
        if resource_version < self._evicted_through:
            raise Expired(resource_version, self._evicted_through + 1)
        if not self._history or self._history[-1].resource_version <= resource_version:
            return []
        newer: list[Change] = []
        for change in reversed(self._history):  # from the newest: a watch that keeps up reads only its news
            if change.resource_version <= resource_version:
                break
            newer.append(change)
        newer.reverse()
        return newer

    # -- writes -----------------------------------------------------------------------------------

    def create(self, rt: ResourceType, namespace: str, body: JsonObject) -> JsonObject:
        """Create from a request body (which this call owns); 409 AlreadyExists when the name is taken."""
        obj = objects.prepare_create(rt, body, namespace if rt.namespaced else "")
        with self.condition:
            key = self._key(rt, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
            if key in self._objects:
                raise already_exists(rt.plural, key[2], rt.group)
            return self._commit(key, obj, None)

    def replace(self, rt: ResourceType, namespace: str, name: str, body: JsonObject, *,
                subresource: str | None = None) -> JsonObject:
        """PUT: 404 when absent, 409 when the body's resourceVersion is given and stale."""
        with self.condition:
            key = self._key(rt, namespace, name)
            old = self._require(rt, key)
            self._check_precondition(rt, old, body)
            new = objects.prepare_update(rt, body, old, subresource=subresource, patched=False)
            return self._commit(key, new, old)

    def patch(self, rt: ResourceType, namespace: str, name: str, content_type: str | None, body: bytes, *,
              subresource: str | None = None) -> JsonObject:
        """PATCH: the patched object's resourceVersion, when the patch set one, must be the current one."""
        with self.condition:
            key = self._key(rt, namespace, name)
            old = self._require(rt, key)
            # Patch a private copy: merge patch shares untouched subtrees with its input.
            new = patching.apply_patch(objects.clone_json(old), content_type, body)
            self._check_precondition(rt, old, new)
            new = objects.prepare_update(rt, new, old, subresource=subresource, patched=True)
            return self._commit(key, new, old)

    def delete(self, rt: ResourceType, namespace: str, name: str, options: JsonObject | None = None, *,
               graceful_pods: bool = False) -> JsonObject:
        """Remove the object, or (a pod on a node, ``graceful_pods``) start its graceful termination.

        ``options`` is the DeleteOptions body: ``preconditions.uid`` / ``preconditions.resourceVersion`` must match
        (409 otherwise, as kube's registry says). A pod bound to a node, not yet ended, whose grace period
        (``gracePeriodSeconds``, else its ``spec.terminationGracePeriodSeconds``, else 30) is above 0 only gets
        ``deletionTimestamp`` and ``deletionGracePeriodSeconds`` (a MODIFIED event): the kubelet would remove it once
        its containers stop, and there is no kubelet here, so a later delete with grace 0 ends it. Every other
        delete removes at once; the final state carries a new rv. Without ``graceful_pods`` every delete is at once
        (the tests that predate graceful deletion delete running pods and expect them gone).
        """
        options = options or {}
        with self.condition:
            key = self._key(rt, namespace, name)
            old = self._require(rt, key)
            self._check_delete_preconditions(rt, old, options)
            grace = _grace_seconds(old, options) if graceful_pods and rt.plural == "pods" else 0
            if grace > 0:
                current = old["metadata"].get("deletionGracePeriodSeconds")
                if current is not None and current <= grace:
                    return old  # already terminating at least as soon
                terminating = copy.deepcopy(old)
                terminating["metadata"]["deletionTimestamp"] = objects.rfc3339_after(grace)
                terminating["metadata"]["deletionGracePeriodSeconds"] = grace
                return self._commit(key, terminating, old)
            del self._objects[key]
            final = copy.deepcopy(old)
            return self._record(key, final, old, "DELETED")

    @staticmethod
    def _check_delete_preconditions(rt: ResourceType, old: JsonObject, options: JsonObject) -> None:
        preconditions = options.get("preconditions") or {}
        if not isinstance(preconditions, dict):
            raise invalid("DeleteOptions", "", ["preconditions: Invalid value: must be an object"])
        metadata = old["metadata"]
        uid, version = preconditions.get("uid"), preconditions.get("resourceVersion")
        if uid and uid != metadata["uid"]:
            raise conflict(rt.plural, metadata["name"], f"Precondition failed: UID in precondition: {uid}, UID in "
                                                        f"object meta: {metadata['uid']}", group=rt.group)
        if version and version != metadata.get("resourceVersion"):
            raise conflict(rt.plural, metadata["name"], f"Precondition failed: ResourceVersion in precondition: "
                                                        f"{version}, ResourceVersion in object meta: "
                                                        f"{metadata.get('resourceVersion')}", group=rt.group)

    def bind(self, rt: ResourceType, namespace: str, name: str, binding: JsonObject) -> None:
        """``pods/<name>/binding``: set ``spec.nodeName`` once, and copy the Binding's annotations onto the pod in the
        same write (kube-apiserver's ``setPodHostAndAnnotations``); 409 when already bound, being deleted, or the
        Binding's uid or resourceVersion precondition fails."""
        target = binding.get("target") if isinstance(binding, dict) else None
        node = target.get("name") if isinstance(target, dict) else None
        if not node:
            raise invalid("Binding", name, ["target.name: Required value"])
        binding_meta = binding.get("metadata") or {}
        if binding_meta.get("name", name) != name:
            raise ApiError(400, f"the name of the object ({binding_meta.get('name')}) does not match the name "
                                f"on the URL ({name})")
        annotations = binding_meta.get("annotations") or {}
        if not isinstance(annotations, dict) or not all(isinstance(value, str) for value in annotations.values()):
            raise ApiError(400, "Binding in version \"v1\" cannot be handled as a Binding: metadata.annotations "
                                "must be a map of strings")
        with self.condition:
            key = self._key(rt, namespace, name)
            old = self._require(rt, key)
            uid = binding_meta.get("uid")
            if uid and uid != old["metadata"]["uid"]:
                raise conflict("pods/binding", name, f"Precondition failed: UID in precondition: {uid}, UID in "
                                                     f"object meta: {old['metadata']['uid']}")
            version = binding_meta.get("resourceVersion")
            if version and str(version) != old["metadata"]["resourceVersion"]:
                raise conflict("pods/binding", name, f"Precondition failed: ResourceVersion in precondition: "
                                                     f"{version}, ResourceVersion in object meta: "
                                                     f"{old['metadata']['resourceVersion']}")
            assigned = (old.get("spec") or {}).get("nodeName")
            if assigned:
                raise conflict("pods/binding", name, f'pod {name} is already assigned to node "{assigned}"')
            if old["metadata"].get("deletionTimestamp"):
                raise conflict("pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host")
            new = copy.deepcopy(old)
            new.setdefault("spec", {})["nodeName"] = node
            if annotations:  # copied in the same write (setPodHostAndAnnotations)
                new["metadata"]["annotations"] = {**(new["metadata"].get("annotations") or {}), **annotations}
            status = new.setdefault("status", {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True",
                               "lastTransitionTime": objects.now_rfc3339(), "lastProbeTime": None})
            status["conditions"] = conditions
            self._commit(key, new, old)

    # -- internals --------------------------------------------------------------------------------

    @staticmethod
    def _key(rt: ResourceType, namespace: str | None, name: str) -> Key:
        return (rt.plural, (namespace or "") if rt.namespaced else "", name)

    def _require(self, rt: ResourceType, key: Key) -> JsonObject:
        obj = self._objects.get(key)
        if obj is None:
            raise not_found(rt.plural, key[2], rt.group)
        return obj

    @staticmethod
    def _check_precondition(rt: ResourceType, old: JsonObject, new: Any) -> None:
        wanted = (new.get("metadata") or {}).get("resourceVersion") if isinstance(new, dict) else None
        if wanted in (None, ""):
            return
        if str(wanted) != old["metadata"]["resourceVersion"]:
            raise conflict(rt.plural, old["metadata"]["name"], STALE_OBJECT, rt.group)

    def _commit(self, key: Key, new: JsonObject, old: JsonObject | None) -> JsonObject:
        return self._record(key, new, old, "ADDED" if old is None else "MODIFIED")

    def _record(self, key: Key, obj: JsonObject, old: JsonObject | None, change_type: str) -> JsonObject:
        self._resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self._resource_version)
        if change_type != "DELETED":
            self._objects[key] = obj
        if len(self._history) == self._history.maxlen:
            self._evicted_through = self._history[0].resource_version
        self._history.append(Change(self._resource_version, key[0], change_type, obj, old))
        self.condition.notify_all()
        return obj


def _sort_key(obj: JsonObject) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace", ""), metadata.get("name", "")


def _grace_seconds(pod: JsonObject, options: JsonObject) -> int:
    """The grace period a pod's deletion gets: 0 when it is not on a node or has ended (kube deletes those at once),
    else DeleteOptions' ``gracePeriodSeconds``, else the pod's own, else 30."""
    if not (pod.get("spec") or {}).get("nodeName") or (pod.get("status") or {}).get("phase") in ("Succeeded",
                                                                                                "Failed"):
        return 0
    for value in (options.get("gracePeriodSeconds"), (pod.get("spec") or {}).get("terminationGracePeriodSeconds")):
        if isinstance(value, int) and not isinstance(value, bool):
            return max(0, value)
    return 30

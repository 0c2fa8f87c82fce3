"""The cache's namespace quota book (docs/quotas.md#namespace-quotas): limits from ResourceQuota objects, and what each
namespace's pods book against them.

Two parts, for two owners. `QuotaObjects` keeps the ResourceQuota objects themselves and works out each namespace's
effective limits; only the thread that lists and watches them touches it, so it needs no lock. `QuotaLedger` holds the
effective limits and the per-namespace use; the cache keeps it under its lock and counts a pod whenever what the pod
holds changes (booked, replaced, released), so a filter's quota check and its booking are one step.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from hami_web.core.families import DeviceCatalog
from hami_web.core.quota import (
    NamespaceQuota,
    PodQuota,
    QuotaObject,
    booking_quota_use,
    effective_limits,
    family_quota_names,
    quota_resources,
)
from hami_web.core.requests import PodRequest
from hami_web.state.pods import PodUsage

log = logging.getLogger(__name__)

Limits = dict[str, dict[str, int]]  # namespace -> resource -> limit ({} : no limit any more)


class QuotaObjects:
    """The ResourceQuota objects by namespace and name, as the list and the watch show them (one thread only)."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[str, QuotaObject]] = {}

    def replace(self, objects: Iterable[QuotaObject]) -> Limits:
        """Take a full list; the new effective limits of the namespaces it changed."""
        listed: dict[str, dict[str, QuotaObject]] = {}
        for quota in objects:
            listed.setdefault(quota.namespace, {})[quota.name] = quota
        changed = [namespace for namespace in self._objects.keys() | listed.keys()
                   if self._objects.get(namespace) != listed.get(namespace)]
        self._warn(quota for namespace in changed for quota in listed.get(namespace, {}).values())
        self._objects = listed
        return self._limits(changed)

    def apply(self, events: Sequence[tuple[str, QuotaObject]]) -> Limits:
        """Take watch events (``ADDED``, ``MODIFIED``, ``DELETED``); the new effective limits of their namespaces."""
        changed: set[str] = set()
        for kind, quota in events:
            if kind == "DELETED":
                self._objects.get(quota.namespace, {}).pop(quota.name, None)
            else:
                self._warn([quota])
                self._objects.setdefault(quota.namespace, {})[quota.name] = quota
            changed.add(quota.namespace)
        return self._limits(changed)

    def _warn(self, quotas: Iterable[QuotaObject]) -> None:
        """Log each object's malformed keys once (the quota controller rewrites status on every pod change)."""
        for quota in quotas:
            known = self._objects.get(quota.namespace, {}).get(quota.name)
            if quota.warnings and (known is None or known.warnings != quota.warnings):
                for warning in quota.warnings:
                    log.warning("%s", warning)

    def _limits(self, namespaces: Iterable[str]) -> Limits:
        limits = {namespace: effective_limits(self._objects.get(namespace, {}).values()) for namespace in namespaces}
        for namespace in [namespace for namespace in limits if not self._objects.get(namespace, True)]:
            del self._objects[namespace]
        return limits


class QuotaLedger:
    """Effective limits and booked use per namespace and resource; the cache's lock guards it."""

    def __init__(self, catalog: DeviceCatalog) -> None:
        self._catalog = catalog
        self._resources = quota_resources(catalog)
        self._families = family_quota_names(catalog)
        self._limits: Limits = {}
        self._use: dict[str, dict[str, int]] = {}
        self._pods: dict[str, tuple[str, dict[str, int]]] = {}  # uid -> (namespace, what it counts)

    def count(self, uid: str, usage: PodUsage | None) -> None:
        """Make ``usage`` (None: nothing) what pod ``uid`` counts against its namespace."""
        previous = self._pods.pop(uid, None)
        if previous is not None:
            namespace, amounts = previous
            totals = self._use[namespace]
            for resource, amount in amounts.items():
                left = totals[resource] - amount
                if left:
                    totals[resource] = left
                else:
                    del totals[resource]
            if not totals:
                del self._use[namespace]
        if usage is None:
            return
        amounts = booking_quota_use(usage.booking, usage.grants, self._resources, self._families)
        if not amounts:
            return
        self._pods[uid] = (usage.namespace, amounts)
        totals = self._use.setdefault(usage.namespace, {})
        for resource, amount in amounts.items():
            totals[resource] = totals.get(resource, 0) + amount

    def counted(self) -> dict[str, tuple[str, Mapping[str, int]]]:
        """Per pod uid, its namespace and what it counts against it (a victim in the preemptor's namespace gives it
        back): one C-level copy for a preemption's snapshot under the lock; the amounts are not copied, since `count`
        replaces a pod's amounts and never changes them."""
        return dict(self._pods)

    def set_limits(self, limits: Mapping[str, Mapping[str, int]]) -> None:
        """Replace the limits of the namespaces named (an empty map: the namespace has no limit any more)."""
        for namespace, limit in limits.items():
            if limit:
                self._limits[namespace] = dict(limit)
            else:
                self._limits.pop(namespace, None)

    def pod_quota(self, namespace: str, request: PodRequest) -> PodQuota | None:
        """What the namespace's limits leave ``request`` now (None: nothing it asks for is limited)."""
        limits = self._limits.get(namespace)
        if not limits:
            return None
        return NamespaceQuota(namespace, limits, self._use.get(namespace, {})).pod_quota(request, self._catalog)

    def namespace(self, namespace: str) -> NamespaceQuota:
        """A copy of the namespace's limits and use."""
        return NamespaceQuota(namespace, dict(self._limits.get(namespace, {})), dict(self._use.get(namespace, {})))

    def copy(self) -> tuple[Limits, dict[str, dict[str, int]]]:
        """Copies of every namespace's limits and use."""
        return ({namespace: dict(limits) for namespace, limits in self._limits.items()},
                {namespace: dict(used) for namespace, used in self._use.items()})

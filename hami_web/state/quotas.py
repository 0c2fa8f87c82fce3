"""ResourceQuota objects into the cache (docs/quotas.md#namespace-quotas): the sink of the resourcequotas list/watch.

Each object is reduced at once to the device limits it sets (`core.quota.parse_resource_quota`); the rest of it (the
quota controller rewrites ``status.used`` on every pod change) is dropped. Malformed limits are logged by the cache,
once per object version that changes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hami_web.core.quota import QuotaObject, parse_resource_quota
from hami_web.state.faces import QuotaFeed

RESOURCE = "resourcequotas"


def quota_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` of a ResourceQuota object (what identifies it between events)."""
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    metadata = metadata if isinstance(metadata, Mapping) else {}
    return f"{metadata.get('namespace') or ''}/{metadata.get('name') or ''}"


@dataclass(slots=True)
class _QuotaListing:
    cache: QuotaFeed
    objects: list[QuotaObject] = field(default_factory=list)

    def add(self, key: str, obj: Mapping[str, Any]) -> None:
        self.objects.append(parse_resource_quota(obj, self.cache.catalog))

    def done(self) -> None:
        self.cache.replace_quotas(self.objects)


@dataclass(slots=True)
class QuotaCacheSink:
    """ResourceQuota objects into the cache: a full list replaces them all, an event one."""

    cache: QuotaFeed

    def listing(self) -> _QuotaListing:
        return _QuotaListing(self.cache)

    def apply(self, kind: str, key: str, obj: Mapping[str, Any]) -> None:
        self.cache.apply_quota_events([(kind, parse_resource_quota(obj, self.cache.catalog))])

    def current(self, at: float) -> None:
        """Nothing waits on the quota stream's progress."""

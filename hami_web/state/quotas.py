"""ResourceQuota objects into the cache (docs/quotas.md#namespace-quotas): the sink of the resourcequotas list/watch.

Each object is reduced at once to the device limits it sets (`core.quota.parse_resource_quota`); the rest of it (the
quota controller rewrites ``status.used`` on every pod change) is dropped. Malformed limits are logged by the cache,
once per object version that changes them.
"""

from __future__ import annotations

from hami_web.core.quota import QuotaObject, parse_resource_quota
from hami_web.state.faces import QuotaFeed
from hami_web.state.reduced import ReducedSink
from hami_web.state.reduced import namespaced_key as quota_key

RESOURCE = "resourcequotas"

__all__ = ["RESOURCE", "quota_key", "quota_sink"]


def quota_sink(cache: QuotaFeed) -> ReducedSink[QuotaObject]:
    """ResourceQuota objects into the cache: a full list replaces them all, an event one."""
    return ReducedSink(lambda obj: parse_resource_quota(obj, cache.catalog), cache.replace_quotas,
                       cache.apply_quota_events)

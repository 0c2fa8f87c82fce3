"""The faces of the cluster cache: what each of its consumers may call, one `Protocol` per kind of consumer.

`state.cache.ClusterCache` satisfies them all; each consumer is typed by the face it uses, so the type checker proves
what it does not touch: the filter and the bind never write what the reflectors feed, the reflectors never place a
pod, the metrics and the dashboard only read. The process assembly (`server.runtime`) alone holds the whole cache.

- `CacheFeed`: what the node and pod reflectors write (`state.sync.ClusterSync`);
- `QuotaFeed`: what the ResourceQuota reflector writes (`state.quotas`); `BudgetFeed` what the PodDisruptionBudget
  reflector writes (`state.budgets`, handed to `ClusterSync` apart: only while preemption is on); `ClusterFeed` the
  first two, for `ClusterSync`;
- `Placements`: the filter's and the bind's decisions and the reads they judge a booking with
  (`extender.filtering`, `extender.binding`, `extender.bindreads`);
- `Preemption`: device-aware preemption's decisions and the end of a hold (`extender.preempting`, the act the filter
  hands a pod no node takes; `extender.preemptverb`, kube-scheduler's preemptVerb);
- `CacheReads`: the consistent reads of the metrics, the dashboard and the extender's decision log.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol

from hami_web.core.choose import NoPlacement, Placement
from hami_web.core.families import DeviceCatalog
from hami_web.core.nodelocks import SeenNode
from hami_web.core.options import PodOptions
from hami_web.core.preemption import DisruptionBudget, NodeVictims, Preemptor
from hami_web.core.quota import NamespaceQuota, QuotaObject
from hami_web.core.requests import PodRequest
from hami_web.core.usage import NodeView
from hami_web.state.holds import HoldState, PreemptionDecision
from hami_web.state.lockstats import LockHolds
from hami_web.state.nodes import NodeRecord
from hami_web.state.pods import PodRecord, PodUsage
from hami_web.state.store import CacheStats

# Nodes whose handshake to answer, with the handshake keys of each.
Handshakes = list[tuple[str, tuple[str, ...]]]


class CacheFeed(Protocol):
    """What the node and pod reflectors write: lists, watch events, the resync, readiness."""

    @property
    def catalog(self) -> DeviceCatalog: ...

    @property
    def synced(self) -> bool: ...

    def mark_synced(self) -> None: ...

    def note_pods_current(self, at: float) -> None: ...

    def replace_nodes(self, records: Iterable[NodeRecord]) -> Handshakes: ...

    def apply_node_events(self, events: Sequence[tuple[str, NodeRecord]]) -> None: ...

    def replace_pods(self, records: Iterable[PodRecord], *, listed_at: float, listed: Iterable[str] | None = None,
                     ended: Iterable[str] = ()) -> None: ...

    def apply_pod_events(self, events: Sequence[tuple[str, PodRecord]]) -> None: ...

    def resync(self) -> Handshakes: ...


class QuotaFeed(Protocol):
    """What the ResourceQuota reflector writes."""

    @property
    def catalog(self) -> DeviceCatalog: ...

    def replace_quotas(self, objects: Iterable[QuotaObject]) -> None: ...

    def apply_quota_events(self, events: Sequence[tuple[str, QuotaObject]]) -> None: ...


class BudgetFeed(Protocol):
    """What the PodDisruptionBudget reflector writes (while preemption is on)."""

    def replace_budgets(self, budgets: Iterable[DisruptionBudget]) -> None: ...

    def apply_budget_events(self, events: Sequence[tuple[str, DisruptionBudget]]) -> None: ...


class ClusterFeed(CacheFeed, QuotaFeed, Protocol):
    """Both feeds: what `state.sync.ClusterSync`, which runs every reflector, hands to each reflector's sink (each sink
    is typed by its own)."""


class Placements(Protocol):
    """What the filter and the bind decide with: place, forget, re-book, mark bound; and what they read to judge a
    booking (a node's view and lock as the watch showed them, a pod's standing booking, a namespace's quota)."""

    def wait_synced(self, timeout_seconds: float) -> bool: ...

    def place(self, *, uid: str, namespace: str, name: str, request: PodRequest, options: PodOptions,
              candidates: Sequence[str], container_names: Sequence[str] = (),
              resource_version: str = "", replaces: str = "", priority: int = 0,
              leftover_keys: frozenset[str] = frozenset()) -> Placement | NoPlacement: ...

    def forget(self, uid: str, *, keep_booking: bool = False) -> PodUsage | None: ...

    def placed(self, uid: str) -> PodUsage | None: ...

    def reassume(self, usage: PodUsage) -> None: ...

    def mark_bound(self, uid: str, *, locked_at: str = "") -> None: ...

    def standing_booking(self, pod: Mapping[str, Any]) -> tuple[PodUsage | None, bool]: ...

    def seen_node(self, name: str) -> SeenNode | None: ...

    def node_view(self, name: str, *, holding: PodUsage | None = None) -> NodeView | None: ...

    def namespace_quota(self, namespace: str) -> NamespaceQuota: ...


class LockLines(Protocol):
    """How a bind waits in line for a node's lock under binpack (`state.bindlines`): its turn, a wake-up, leaving."""

    def lock_turn(self, node: str, uid: str, namespace: str, name: str) -> tuple[bool, SeenNode | None, int]: ...

    def await_lock_turn(self, node: str, version: int, timeout: float) -> None: ...

    def leave_line(self, node: str, uid: str) -> None: ...


class Preemption(Protocol):
    """What device-aware preemption decides with: a preemption (or the wait for one) for a pod `Placements.place` found
    no node for, the device victims kube-scheduler's own victims on a node need beside them, and the end of a hold
    whose act did not happen."""

    def preempt(self, preemptor: Preemptor, candidates: Sequence[str], *,
                nominated: str = "") -> PreemptionDecision: ...

    def extend_victims(self, preemptor: Preemptor, node: str, proposed: Collection[str]) -> NodeVictims | str: ...

    def drop_hold(self, uid: str, why: str) -> None: ...


class CacheReads(Protocol):
    """The reads of the metrics, the dashboard and the decision log, each a consistent copy."""

    @property
    def stats(self) -> CacheStats: ...

    def node_views(self) -> dict[str, NodeView]: ...

    def broken_nodes(self) -> dict[str, str]: ...

    def pod_usages(self) -> list[PodUsage]: ...

    def read_consistent(self) -> tuple[dict[str, NodeView], dict[str, str], list[PodUsage]]: ...

    def quota_usage(self) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]: ...

    def lock_hold_snapshot(self) -> dict[str, LockHolds]: ...

    def held_by(self, uid: str) -> PodUsage | None: ...

    def holds(self) -> list[HoldState]: ...

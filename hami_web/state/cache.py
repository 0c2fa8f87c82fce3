"""The cluster cache: node inventories and GPU usage, the only place in hami-web with a lock.

Usage is kept per pod UID and folded into per-node totals incrementally, so a filter never recomputes usage
from every pod. A filter's decision and the booking of its result happen under one lock acquisition
(`place`), which is what guarantees that two concurrent filters never promise the same GPU capacity.

Filter-time assumptions (pods we placed whose booking the API does not show yet: the filter decides in memory
and `/bind` writes the booking) are usage like any other; a later observation of the pod confirms or replaces
them. A full list only overrides an assumption made more than `ASSUMPTION_GRACE_SECONDS` before the list
started: the assumption is booked (again, by `reassume` at bind) *before* the pod patch is sent, so a list that
starts a moment after the booking may still miss the patch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hami_web.core.choose import NoPlacement, Placement, choose_node
from hami_web.core.devices import AnnotationError
from hami_web.core.grants import encode_pod_devices
from hami_web.core.options import PodOptions
from hami_web.core.requests import PodRequest
from hami_web.core.usage import NO_USAGE, DeviceUsage, NodeView, build_node_view, pod_booking
from hami_web.state.nodes import NodeState, node_name, node_state
from hami_web.state.pods import PodUsage, pod_finished, pod_key, pod_usage

log = logging.getLogger(__name__)

Clock = Callable[[], float]

# How long after booking a placement a full list may still not show the pod patch: no shorter than the filter's
# API calls can take (18 s with the default --extender-deadline, 30 s at most: 27 s and a 3 s read-back). A
# failed patch drops its booking itself; a patch without an answer keeps it, and this is how long it stays
# unless a list or watch shows the pod.
ASSUMPTION_GRACE_SECONDS = 30.0


class AlreadyBooked(Exception):
    """The pod's booking is already written in the API (by a binder of this or another replica)."""


@dataclass(slots=True)
class _Held:
    """A pod's usage plus where we learned it: the API, or our own filter (``assumed_at`` set)."""

    usage: PodUsage
    assumed_at: float | None = None


@dataclass(slots=True)
class CacheStats:
    """Counters the metrics endpoint reads; plain ints updated under the cache lock."""

    pod_annotation_errors: int = 0
    node_annotation_errors: int = 0
    broken_pods: dict[str, str] = field(default_factory=dict)


class ClusterCache:
    """Thread-safe inventory and usage of every GPU node, fed by lists and watches (see `state.sync`)."""

    def __init__(self, *, count_resource: str = "nvidia.com/gpu", clock: Clock = time.time) -> None:
        self._lock = threading.RLock()
        self._synced = threading.Event()
        self._count_resource = count_resource
        self._clock = clock
        self._nodes: dict[str, NodeState] = {}
        self._views: dict[str, NodeView] = {}
        self._broken_nodes: dict[str, str] = {}
        self._held: dict[str, _Held] = {}
        self._node_usage: dict[str, dict[str, DeviceUsage]] = {}
        # Pods this process placed and has not seen bound, deleted or abandoned, with their placement.
        # `/bind` binds only these, so nobody can use our RBAC to bind a pod we never chose a node for, and it
        # writes the booking it finds here (the filter writes nothing to the API).
        self._placed: dict[str, PodUsage] = {}
        # What the watch showed a pod holding while our (different) assumption for it stood: restored if ours is
        # abandoned, so a booking written by another binder is never lost with it.
        self._shadowed: dict[str, PodUsage] = {}
        self.stats = CacheStats()

    # -- readiness --------------------------------------------------------------------------------

    def mark_synced(self) -> None:
        """Called once both nodes and pods have been listed; releases waiting filters."""
        self._synced.set()

    def wait_synced(self, timeout_seconds: float) -> bool:
        """Block until the first full sync, at most ``timeout_seconds``; True when synced."""
        return self._synced.wait(timeout_seconds)

    @property
    def synced(self) -> bool:
        """Whether the first full sync has completed."""
        return self._synced.is_set()

    # -- nodes ------------------------------------------------------------------------------------

    def replace_nodes(self, nodes: Iterable[Mapping[str, Any]]) -> list[str]:
        """Replace every node from a full list; returns the names whose handshake we should answer."""
        now = self._clock()
        states = [self._read_node(node, now) for node in nodes]
        with self._lock:
            for name in set(self._nodes) - {state.name for state in states}:
                self._drop_node_locked(name)
            for state in states:
                self._set_node_locked(state)
        return [state.name for state in states if state.handshake_due]

    def observe_node(self, event_type: str, node: Mapping[str, Any]) -> None:
        """Apply one watch event for a node."""
        name = node_name(node)
        with self._lock:
            if event_type == "DELETED":
                self._drop_node_locked(name)
            else:
                self._set_node_locked(self._read_node(node, self._clock()))

    def _read_node(self, node: Mapping[str, Any], now: float) -> NodeState:
        try:
            return node_state(node, count_resource=self._count_resource, now=now)
        except Exception as error:  # one bad object must not stop the loop that reads all the others
            name = node_name(node)
            log.exception("node %s: unexpected error reading its GPU inventory", name)
            return NodeState(name=name, inventory=None, error=f"unreadable node: {type(error).__name__}")

    def _set_node_locked(self, state: NodeState) -> None:
        previous = self._nodes.get(state.name)
        self._nodes[state.name] = state
        if state.error and (previous is None or previous.error != state.error):
            self.stats.node_annotation_errors += 1
            log.warning("node %s: cannot read GPU annotations: %s", state.name, state.error)
        if state.inventory is None:
            self._views.pop(state.name, None)
            if state.error:
                self._broken_nodes[state.name] = state.error
            else:
                self._broken_nodes.pop(state.name, None)
            return
        self._broken_nodes.pop(state.name, None)
        if previous is not None and previous.inventory == state.inventory and state.name in self._views:
            return
        self._rebuild_view_locked(state.name)

    def _drop_node_locked(self, name: str) -> None:
        self._nodes.pop(name, None)
        self._views.pop(name, None)
        self._broken_nodes.pop(name, None)

    def _rebuild_view_locked(self, name: str) -> None:
        state = self._nodes.get(name)
        if state is None or state.inventory is None:
            return
        self._views[name] = build_node_view(state.inventory, self._node_usage.get(name, {}))

    # -- pods -------------------------------------------------------------------------------------

    def replace_pods(self, pods: Iterable[Mapping[str, Any]], *, listed_at: float) -> None:
        """Replace all API-derived usage from a full pod list started at ``listed_at`` (clock seconds)."""
        observed: dict[str, PodUsage] = {}
        errors: dict[str, str] = {}
        alive: set[str] = set()
        listed: set[str] = set()
        for pod in pods:
            uid, usage, error = self._read_pod(pod)
            listed.add(uid)
            if not pod_finished(pod):
                alive.add(uid)
            if error:
                errors[uid] = error
            elif usage is not None:
                observed[uid] = usage
        with self._lock:
            for uid, held in list(self._held.items()):
                if uid not in observed and not self._assumed_since_locked(held, listed_at, listed=uid in listed):
                    self._release_locked(uid)
            for uid in list(self._placed):
                if uid not in alive and uid not in self._held:
                    del self._placed[uid]
            for uid, usage in observed.items():
                held = self._held.get(uid)
                if held is not None and self._assumed_since_locked(held, listed_at, listed=True) \
                        and held.usage.devices_text != usage.devices_text:
                    continue  # our placement may be newer than what this list saw
                self._hold_locked(uid, usage, assumed_at=None)
            self._note_errors_locked(errors, replace=True)

    @staticmethod
    def _assumed_since_locked(held: _Held, listed_at: float, *, listed: bool) -> bool:
        """Whether ``held`` is an assumption whose pod patch a list started at ``listed_at`` may not show.

        A pod we placed existed before its assumption was made, so a list started after that which does not
        show the pod at all (``listed`` False) proves it deleted: the grace is for a patch, not the pod. With
        the filter writing nothing, this is how a pod deleted between filter and bind while the watch was
        down frees its GPUs at the next list rather than ASSUMPTION_GRACE_SECONDS later.
        """
        if held.assumed_at is None:
            return False
        if not listed and held.assumed_at < listed_at:
            return False
        return held.assumed_at + ASSUMPTION_GRACE_SECONDS >= listed_at

    def observe_pod(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """Apply one watch event for a pod: a deleted or finished pod frees its GPUs at once."""
        uid, usage, error = self._read_pod(pod)
        with self._lock:
            held = self._held.get(uid)
            if event_type == "DELETED" or pod_finished(pod):
                self._placed.pop(uid, None)
            self._shadowed.pop(uid, None)
            if event_type == "DELETED":
                self._release_locked(uid)
                self.stats.broken_pods.pop(uid, None)
                return
            if error:
                self._note_errors_locked({uid: error}, replace=False)
                return
            self.stats.broken_pods.pop(uid, None)
            if usage is None:
                if held is not None and (held.assumed_at is None or pod_finished(pod)):
                    self._release_locked(uid)
                return
            if held is not None and held.assumed_at is not None and held.usage.devices_text != usage.devices_text:
                # Either an event from before our patch, or a booking another binder wrote: the assumption stands
                # until the API shows ours, and what the API showed is kept aside in case ours is abandoned.
                self._shadowed[uid] = usage
                return
            self._hold_locked(uid, usage, assumed_at=None)

    def _read_pod(self, pod: Mapping[str, Any]) -> tuple[str, PodUsage | None, str]:
        uid, namespace, name = pod_key(pod)
        try:
            return uid, pod_usage(pod, count_resource=self._count_resource), ""
        except AnnotationError as error:
            return uid, None, f"pod {namespace}/{name}: {error}"
        except Exception as error:  # one bad object must not stop the loop that reads all the others
            log.exception("pod %s/%s: unexpected error reading its GPU usage", namespace, name)
            return uid, None, f"pod {namespace}/{name}: unreadable: {type(error).__name__}"

    def _note_errors_locked(self, errors: Mapping[str, str], *, replace: bool) -> None:
        for uid, message in errors.items():
            if self.stats.broken_pods.get(uid) != message:
                self.stats.pod_annotation_errors += 1
                log.warning("%s; its GPU usage is unknown and not counted", message)
            # The old usage of a pod whose annotation became unreadable is no longer trustworthy either.
            self._release_locked(uid)
        if replace:
            self.stats.broken_pods = dict(errors)
        else:
            self.stats.broken_pods.update(errors)

    def _hold_locked(self, uid: str, usage: PodUsage, *, assumed_at: float | None) -> None:
        self._release_locked(uid)
        self._held[uid] = _Held(usage=usage, assumed_at=assumed_at)
        self._apply_locked(usage.node, usage.booking, sign=1)

    def _release_locked(self, uid: str) -> PodUsage | None:
        held = self._held.pop(uid, None)
        if held is None:
            return None
        self._apply_locked(held.usage.node, held.usage.booking, sign=-1)
        return held.usage

    def _apply_locked(self, node: str, booking: Mapping[str, DeviceUsage], *, sign: int) -> None:
        totals = self._node_usage.setdefault(node, {})
        for uuid, amount in booking.items():
            current = totals.get(uuid, NO_USAGE)
            updated = current + amount if sign > 0 else current - amount
            if updated == NO_USAGE:
                totals.pop(uuid, None)
            else:
                totals[uuid] = updated
        if not totals:
            self._node_usage.pop(node, None)
        self._rebuild_view_locked(node)

    # -- scheduling -------------------------------------------------------------------------------

    def place(self, *, uid: str, namespace: str, name: str, request: PodRequest, options: PodOptions,
              candidates: Sequence[str], container_names: Sequence[str] = ()) -> Placement | NoPlacement:
        """Forget the pod's earlier assumption, choose a node, and book the result — atomically.

        Raises `AlreadyBooked` when the API shows the pod holding GPUs already (another binder wrote its booking:
        kube-scheduler's informer has not seen the pod bound yet): a second placement would book it twice.
        """
        with self._lock:
            held = self._held.get(uid)
            if held is not None and held.assumed_at is None:
                raise AlreadyBooked(f"pod {namespace}/{name} already holds GPUs on node {held.usage.node} "
                                    f"({held.usage.devices_text}); it is not placed again")
            self._release_locked(uid)
            result = choose_node(request, options, candidates, self._views, self._broken_nodes)
            if isinstance(result, Placement):
                booking = pod_booking(result.grants, init_count=request.init_count)
                usage = PodUsage(uid=uid, namespace=namespace, name=name, node=result.node, grants=result.grants,
                                 booking=booking, devices_text=encode_pod_devices(result.grants),
                                 container_names=tuple(container_names), init_count=request.init_count)
                self._hold_locked(uid, usage, assumed_at=self._clock())
                self._placed[uid] = usage
            else:
                self._placed.pop(uid, None)
            return result

    def forget(self, uid: str, *, keep_booking: bool = False) -> PodUsage | None:
        """Drop the pod's placement and our assumption of its booking (abandoned); returns what was dropped.

        What the API has shown the pod to hold (a booking another scheduler wrote, or ours once the watch echoed
        it) stays until the API shows otherwise: dropping it here could lose it for good, if the event that brought
        it was the pod's last. ``keep_booking``: drop only the placement; what the pod holds stays booked, as an
        assumption from now (its booking may stand in the API), until a list or the watch shows the truth.
        """
        with self._lock:
            placed = self._placed.pop(uid, None)
            shadowed = self._shadowed.pop(uid, None)
            if not keep_booking:
                held = self._held.get(uid)
                if held is not None and held.assumed_at is None:
                    return None
                dropped = self._release_locked(uid)
                if shadowed is not None:  # the API showed the pod holding this meanwhile: that is the truth now
                    self._hold_locked(uid, shadowed, assumed_at=None)
                return dropped
            held = self._held.get(uid)
            usage = held.usage if held is not None else placed
            if usage is not None:
                self._hold_locked(uid, usage, assumed_at=self._clock())
            return None

    def placed(self, uid: str) -> PodUsage | None:
        """The placement this process last chose for the pod ``uid`` and has not seen bound."""
        with self._lock:
            return self._placed.get(uid)

    def reassume(self, usage: PodUsage) -> None:
        """Book ``usage`` as a fresh assumption: its booking is about to be written to the API (at bind).

        Restarts the grace period in which a list that does not show the pod yet leaves the booking alone, and
        books it again if a list dropped it while kube-scheduler had not bound the pod yet.
        """
        with self._lock:
            self._hold_locked(usage.uid, usage, assumed_at=self._clock())

    def node_view(self, name: str) -> NodeView | None:
        """One GPU node's current view (immutable), or None when the node is not a GPU node we know."""
        with self._lock:
            return self._views.get(name)

    def mark_bound(self, uid: str) -> None:
        """The pod's Binding exists: it can never be bound again, so it stops being bindable."""
        with self._lock:
            self._placed.pop(uid, None)

    def held_by(self, uid: str) -> PodUsage | None:
        """What a pod holds according to the cache, if anything."""
        with self._lock:
            held = self._held.get(uid)
            return held.usage if held else None

    # -- read-only views (metrics, tests, demo) ------------------------------------------------------

    def node_views(self) -> dict[str, NodeView]:
        """A consistent snapshot of every GPU node's view (views are immutable)."""
        with self._lock:
            return dict(self._views)

    def broken_nodes(self) -> dict[str, str]:
        """Nodes whose register annotation does not parse, with the error."""
        with self._lock:
            return dict(self._broken_nodes)

    def pod_usages(self) -> list[PodUsage]:
        """Every pod's usage (API-confirmed and assumed)."""
        with self._lock:
            return [held.usage for held in self._held.values()]


    def read_consistent(self) -> tuple[dict[str, NodeView], dict[str, str], list[PodUsage]]:
        """Views, broken nodes and pod usages taken under one lock acquisition, so they agree (dashboard)."""
        with self._lock:
            return dict(self._views), dict(self._broken_nodes), [held.usage for held in self._held.values()]

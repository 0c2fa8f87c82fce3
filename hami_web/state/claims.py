"""A pod's claim on GPUs, from the filter's choice to the bind: the lifecycle and the bookkeeping of its states.

| state     | what it means                                                      | kept in                      |
|-----------|--------------------------------------------------------------------|------------------------------|
| placed    | our filter chose a node; ``/bind`` may bind the pod, to that node  | `Claims.placed`              |
| assumed   | its booking counts as usage though the API does not show it yet    | ``Held`` with ``assumed_at`` |
| shown     | the API shows the booking (the watch echoed our write, or a list)  | ``Held``, no ``assumed_at``  |
| lock due  | bound by `/bind`; the node stream has not shown our node lock yet  | `Claims.locks_due`           |
| bound     | the Binding exists: never bindable again                           | left `Claims`                |
| abandoned | the bind gave up; the booking written may stand in the API         | `Claims.abandoned`           |
| voided    | the bind gave up and dropped the booking (it was never written)    | `Claims.abandoned` too       |

placed → assumed at once (`ClusterCache.place`); assumed → shown when the API echoes the booking, or dropped after
the grace (`state.planning.ASSUMPTION_GRACE_SECONDS`) when it never does; placed → bound (`mark_bound`, or the
watch shows the pod bound) | abandoned | voided (`ClusterCache.forget`). A pod `/bind` bound is "lock due" until
the node stream shows its node newer than the version our lock was written on (at most for the grace): its node
stays busy meanwhile, as while placed, since the cache cannot see the lock yet (`ClusterCache.mark_bound`). An
abandoned or voided booking may be placed over again (`standing_booking`): it is ours, not another binder's, even
when its echo comes late. A pod deleted or finished leaves every state. Only `/bind` binds, and only a placed pod:
nobody can use our RBAC to bind a pod we never chose a node for.

`Claims` holds the placed, lock-due and abandoned states; it has no lock of its own, every call happens under the
cache lock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable, Iterator
from dataclasses import dataclass, field

from hami_web.core.versions import newer
from hami_web.state.pods import PodUsage


@dataclass(slots=True)
class Claims:
    """The placed and abandoned claims by pod UID (see the table above); guarded by the cache lock."""

    placed: dict[str, PodUsage] = field(default_factory=dict)
    abandoned: dict[str, str] = field(default_factory=dict)  # uid → devices text of the booking given up
    # uid → (node, the version our lock write was preconditioned on, when bound): our lock not yet seen (`due_locks`)
    locks_due: dict[str, tuple[str, str, float]] = field(default_factory=dict)

    def place(self, uid: str, usage: PodUsage) -> None:
        """Our filter chose ``usage`` for the pod."""
        self.placed[uid] = usage

    def unplace(self, uid: str) -> PodUsage | None:
        """The pod is no longer placed (no node fits it now, or its bind gave up); returns the placement."""
        return self.placed.pop(uid, None)

    def abandon(self, uid: str, devices_text: str) -> None:
        """The bind gave up on a booking (written or not): a later placement may overwrite it."""
        self.abandoned[uid] = devices_text

    def ours_abandoned(self, uid: str, devices_text: str | None) -> bool:
        """Whether ``devices_text`` is a booking of the pod we abandoned or voided."""
        return devices_text is not None and self.abandoned.get(uid) == devices_text

    def settle(self, gone: Iterable[str], bound: Iterable[str]) -> None:
        """Pods deleted or finished leave every state; bound ones leave the abandoned state."""
        for uid in gone:
            self.placed.pop(uid, None)
            self.abandoned.pop(uid, None)
            self.locks_due.pop(uid, None)
        for uid in bound:
            self.abandoned.pop(uid, None)

    def bound(self, uid: str, *, locked_at: str = "", now: float = 0.0) -> None:
        """The pod's Binding exists; ``locked_at`` is the node's resourceVersion our lock write was preconditioned on
        (a number: the pod is "lock due" until the node stream shows a newer one, see `due_locks`)."""
        placed = self.placed.pop(uid, None)
        self.abandoned.pop(uid, None)
        if placed is not None and locked_at.isdigit():
            self.locks_due[uid] = (placed.node, locked_at, now)

    def due_locks(self, seen_version: Callable[[str], str | None], *, since: float) -> Iterator[tuple[str, float]]:
        """The node and bind time of each pod bound by us whose node lock the node stream has not shown yet.

        ``seen_version`` gives the node's resourceVersion as the cache last applied it (None: not a GPU node any
        more). A pod leaves this state once its node is seen newer than the version our lock write was preconditioned
        on (that write was the node's next: the cache's lock table then holds our lock, or its release), its node is
        gone, or it was bound before ``since``.
        """
        for uid, (node, locked_at, bound_at) in list(self.locks_due.items()):
            seen = seen_version(node)
            if seen is None or newer(seen, locked_at) or bound_at < since:
                del self.locks_due[uid]
            else:
                yield node, bound_at

    def lock_due_on(self, node: str, seen_version: str | None, *, besides: str) -> bool:
        """Whether a pod other than ``besides`` was bound by us on ``node`` and the node, seen at ``seen_version``, does
        not show its lock yet (`due_locks`): its lock is about to appear, the node is not free."""
        return any(due_node == node and seen_version is not None and not newer(seen_version, locked_at)
                   for uid, (due_node, locked_at, _) in self.locks_due.items() if uid != besides)

    def keep_only(self, alive: Collection[str], held: Container[str]) -> None:
        """After a full list: forget the claims of pods the list did not show alive (placements still held stay)."""
        for uid in [uid for uid in self.placed if uid not in alive and uid not in held]:
            del self.placed[uid]
        for uid in [uid for uid in self.abandoned if uid not in alive]:
            del self.abandoned[uid]

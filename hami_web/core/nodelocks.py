"""HAMi's node lock as data: its annotation format and when a held lock is stale (docs/wire-formats.md#node-lock).

Two capabilities judge a lock: ``/bind``, which may take over a stale lock, and ``/filter``, which ranks nodes whose
lock a live owner holds after the free ones (README.md#decisions, node policy order). Both must call the same lock
"stale", or the filter would steer pods away from nodes the bind would happily take (or towards nodes it would refuse),
so the rule lives here, pure: the caller says what it knows of the owner pod.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum

# bind-phase values after which the device plugin is done with the pod: its lock is no longer needed.
FINISHED_BIND_PHASES = frozenset({"success", "failed"})


class Owner(Enum):
    """What the caller knows of the pod a lock names, beyond its bind-phase."""

    UNKNOWN = "unknown"  # not looked up (or not knowable): the lock counts as live
    GONE = "gone"  # the pod does not exist any more
    PRESENT = "present"  # the pod exists; its bind-phase decides


@dataclass(frozen=True, slots=True)
class LockValue:
    """A parsed lock annotation. ``namespace``/``pod`` are empty for HAMi's old owner-less format."""

    taken_at: float | None
    namespace: str
    pod: str

    def owned_by(self, namespace: str, pod: str) -> bool:
        """Whether this lock belongs to ``namespace/pod``."""
        return (self.namespace, self.pod) == (namespace, pod)

    @property
    def owner(self) -> str:
        """``namespace/pod``, or "" for an owner-less lock."""
        return f"{self.namespace}/{self.pod}" if self.pod else ""


@dataclass(frozen=True, slots=True)
class SeenNode:
    """What the watch last showed of a node: its resourceVersion and lock annotation ("" when unlocked).

    Enough to take a free lock with one conditional write instead of a read and a write: the write carries that
    resourceVersion, so it fails (409) if anything changed the node since, and only then is the node read.
    ``owner_done``: the watch also showed the lock's owner pod done with it — ``bind-phase=failed``, or ``success``
    for longer than the device plugin takes to remove the lock next — so the lock is stale, as `/bind` would judge it
    after reading the owner.
    """

    resource_version: str
    lock: str
    owner_done: bool = False


def format_lock(now: float, namespace: str, pod: str) -> str:
    """``<RFC3339 UTC>,<namespace>,<pod>``, as newer HAMi writes it."""
    return f"{datetime.fromtimestamp(now, tz=UTC).strftime('%Y-%m-%dT%H:%M:%SZ')},{namespace},{pod}"


def parse_lock(value: str) -> LockValue:
    """Parse a lock annotation; an unreadable time gives ``taken_at=None`` (treated as stale)."""
    parts = value.split(",")
    try:
        taken_at = datetime.fromisoformat(parts[0].strip().replace("Z", "+00:00")).timestamp()
    except ValueError:
        taken_at = None
    namespace = parts[1].strip() if len(parts) > 1 else ""
    pod = parts[2].strip() if len(parts) > 2 else ""
    return LockValue(taken_at=taken_at, namespace=namespace, pod=pod)


def age_stale_reason(lock: LockValue, *, now: float, timeout_seconds: float) -> str:
    """Why ``lock`` is stale by its time alone ("" when it is not): unreadable, or older than the timeout."""
    if lock.taken_at is None:
        return "unreadable lock time"
    age = now - lock.taken_at
    if age > timeout_seconds:
        return f"{age:.0f}s old"
    return ""


def stale_reason(lock: LockValue, *, now: float, timeout_seconds: float, owner: Owner = Owner.UNKNOWN,
                 owner_bind_phase: str = "") -> str:
    """Why ``lock`` may be taken over ("" when a live owner holds it).

    Stale: an unreadable time, older than ``timeout_seconds`` (``--node-lock-timeout``), an owner pod that no
    longer exists, or one whose bind-phase is ``success``/``failed`` (the device plugin is done with it). An
    owner-less lock is judged by its time alone.
    """
    by_age = age_stale_reason(lock, now=now, timeout_seconds=timeout_seconds)
    if by_age or not lock.pod:
        return by_age
    if owner is Owner.GONE:
        return "owner pod no longer exists"
    if owner is Owner.PRESENT and owner_bind_phase in FINISHED_BIND_PHASES:
        return f"owner pod bind-phase is {owner_bind_phase}"
    return ""

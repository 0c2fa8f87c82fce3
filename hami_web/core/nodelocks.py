"""HAMi's node locks as data: their annotation formats and when a held lock is stale (docs/wire-formats.md#node-lock).

Two capabilities judge a lock: ``/bind``, which may take over a stale lock, and ``/filter``, which ranks nodes whose
lock a live owner holds after the free ones (docs/compatibility.md#filter-and-placement, node policy order). Both
must call the same lock "stale", or the filter would steer pods away from nodes the bind would happily take (or
towards nodes it would refuse), so the rule lives here, pure: the caller says what it knows of the owner pod.

Most families share ``hami.io/mutex.lock``, whose value names its owner pod. A family may bring its own lock
(`LockRule`): Cambricon's device plugin reads ``cambricon.com/dsmlu.lock``, whose value is a bare time, stale after two
minutes (docs/device-families.md#device-families, node locks). A bind takes the locks of exactly the families its pod
uses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum

from hami_web.core.names import NODE_LOCK

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
    after reading the owner. ``other_locks``: the values of the families' own locks (key, value), as the watch showed
    them.
    """

    resource_version: str
    lock: str
    owner_done: bool = False
    other_locks: tuple[tuple[str, str], ...] = ()

    def value(self, key: str) -> str:
        """The value of lock ``key`` as the watch showed it ("" when unset)."""
        if key == NODE_LOCK:
            return self.lock
        return next((value for other, value in self.other_locks if other == key), "")


def format_lock(now: float, namespace: str, pod: str) -> str:
    """``<RFC3339 UTC>,<namespace>,<pod>``, as newer HAMi writes it."""
    return f"{format_time(now)},{namespace},{pod}"


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


@dataclass(frozen=True, slots=True)
class LockRule:
    """One node-lock annotation: its key, whether its value names its owner pod, and when it goes stale.

    ``names_owner``: the value is ``<time>,<namespace>,<pod>`` (`format_lock`) and the owner's fate counts; else the
    value is a bare RFC3339 time, whose owner only the binder that wrote it knows. ``stale_after_seconds``: a lock
    older than this may be taken over (None: the server's ``--node-lock-timeout``). ``released_by_binder``: no device
    plugin reads or removes it, so the bind removes it itself once the pod is bound (`BIND_LOCK`).
    """

    key: str
    names_owner: bool = True
    stale_after_seconds: float | None = None
    released_by_binder: bool = False

    def timeout(self, default_seconds: float) -> float:
        """Seconds after which a lock of this rule is stale, ``default_seconds`` being ``--node-lock-timeout``."""
        return default_seconds if self.stale_after_seconds is None else self.stale_after_seconds

    def value(self, now: float, namespace: str, pod: str) -> str:
        """The value a bind writes for ``namespace/pod`` at ``now``."""
        return format_lock(now, namespace, pod) if self.names_owner else format_time(now)

    def parse(self, value: str) -> LockValue:
        """``value`` parsed; a bare-time lock has no owner whatever its text says."""
        lock = parse_lock(value)
        return lock if self.names_owner else LockValue(taken_at=lock.taken_at, namespace="", pod="")

    def held_message(self, node: str, value: str) -> str:
        """What a bind refused by a fresh lock of this rule answers."""
        if not self.names_owner:
            minutes = self.stale_after_seconds / 60 if self.stale_after_seconds else 0
            return f"node {node} has been locked within {minutes:g} minutes"
        owner = self.parse(value).owner or f"an unnamed owner since {value}"
        return f"node {node} is locked by {owner}"


# HAMi's node lock, shared by every family that does not bring its own.
MUTEX_LOCK = LockRule(key=NODE_LOCK)
# hami-web's own lock for the families HAMi binds without one (Enflame, Metax GPU, Mthreads, AWS Neuron: their device
# plugins read no lock): HAMi has one scheduler, hami-web may run several, and two binds of one node must still be one
# after the other so that no device is promised twice. Only binders read it; the bind removes it once the pod is bound,
# and a lock left by a binder that died is stale after a minute.
BIND_LOCK = LockRule(key="hami-web.io/bind.lock", stale_after_seconds=60.0, released_by_binder=True)


def format_time(now: float) -> str:
    """``now`` as RFC3339 in UTC, to the second (``2026-08-21T06:20:39Z``)."""
    return datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def order_rules(rules: Iterable[LockRule]) -> tuple[LockRule, ...]:
    """``rules`` once per key, in key order: every binder checks and takes a pod's locks in the same order."""
    by_key = {rule.key: rule for rule in rules}
    return tuple(by_key[key] for key in sorted(by_key))


def bare_lock_live(rule: LockRule, value: str, *, now: float, default_timeout_seconds: float) -> bool:
    """Whether a lock holds its node by its age alone: readable and younger than its rule's timeout (all that a
    lock naming no owner can tell; the binder's check once the owner has had its say)."""
    return not age_stale_reason(rule.parse(value), now=now, timeout_seconds=rule.timeout(default_timeout_seconds))

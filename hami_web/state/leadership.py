"""HAMi's ``--leader-elect``: which replica leads, read from kube-scheduler's Lease, and the pods' role labels.

HAMi v2.10 runs no election of its own (``pkg/util/leaderelection``): it watches the Lease the kube-scheduler beside
it elects its leader on, and counts itself the leader while that Lease's holder identity starts with its hostname
(kube-scheduler writes ``<hostname>_<uuid>``) and the Lease was seen renewed within its ``leaseDurationSeconds``. The
leader labels the scheduler pods of its namespace ``hami.io/scheduler-role=leader`` (itself) or ``follower``
(``Scheduler.updateSchedulerLabel``), and HAMi's chart selects its Service — the webhook's and the metrics' way in —
by that label. We do the same, mapped onto our HA design (docs/deployment.md#high-availability-active-and-standby):
every replica keeps a warm cache and answers ``/readyz`` (a standby that failed readiness would stall every rollout),
but only the leader books devices: a standby's ``/filter`` and ``/bind`` refuse, after reading the Lease once more (a
kube-scheduler just elected may call before the next poll sees it).

The Lease is polled with one GET a second (HAMi's chart grants get on leases in its namespace); the judgement
itself is `holds_lease`, tested directly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hami_web.kube import Kube, KubeError, NotFoundError

log = logging.getLogger(__name__)

ROLE_LABEL = "hami.io/scheduler-role"
LEADER, FOLLOWER = "leader", "follower"
# HAMi's chart labels the scheduler's pods so; the leader relabels every pod that carries it.
COMPONENT_SELECTOR = "app.kubernetes.io/component=hami-scheduler"
POLL_SECONDS = 1.0
RELABEL_SECONDS = 15.0  # HAMi relabels on its 15 s registration round


def holds_lease(lease: Mapping[str, Any] | None, identity: str, *, observed_at: float, now: float) -> bool:
    """HAMi's ``leaderManager.IsLeader``: the holder identity starts with ``identity`` (the hostname) and the Lease was
    seen changed (``observed_at``, this process's clock: no skew with the writer's) less than its
    ``leaseDurationSeconds`` ago."""
    spec = (lease or {}).get("spec") or {}
    holder, duration = spec.get("holderIdentity"), spec.get("leaseDurationSeconds")
    if not isinstance(holder, str) or not holder.startswith(identity) or not isinstance(duration, int):
        return False
    return observed_at + duration > now


@dataclass(frozen=True, slots=True)
class LeaseRef:
    """The Lease to follow and who this replica is."""

    namespace: str
    name: str
    identity: str  # the hostname: in a pod, the pod's name
    pod_namespace: str = ""  # POD_NAMESPACE / POD_NAME: whose role label to set
    pod_name: str = ""


class Leadership:
    """Follows the Lease; `standby_reason` tells the extender whether it may book."""

    def __init__(self, kube: Kube, lease: LeaseRef, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._kube = kube
        self._ref = lease
        self._clock = clock
        self._lock = threading.Lock()
        self._lease: dict[str, Any] | None = None
        self._version = ""
        self._observed_at = 0.0
        self._last_error = ""
        self._labelled_at: float | None = None
        self._was_leader: bool | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leadership", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def is_leader(self) -> bool:
        with self._lock:
            return holds_lease(self._lease, self._ref.identity, observed_at=self._observed_at, now=self._clock())

    def standby_reason(self) -> str | None:
        """None when this replica leads (after one more read of the Lease if it seemed not to); else why not."""
        if self.is_leader():
            return None
        self.refresh()
        if self.is_leader():
            return None
        return f"this hami-web replica is a standby: {self.describe()}; only the leader's kube-scheduler books devices"

    def describe(self) -> str:
        """For ``/readyz``: leader or standby, and who holds the Lease."""
        ref = self._ref
        with self._lock:
            holder = ((self._lease or {}).get("spec") or {}).get("holderIdentity") or "nobody"
            error = self._last_error
        role = LEADER if self.is_leader() else "standby"
        where = f"Lease {ref.namespace}/{ref.name} held by {holder}"
        return f"{role} ({where}{'; last read failed: ' + error if error else ''})"

    def refresh(self) -> None:
        """Read the Lease once; a failed read keeps what was seen (and its age keeps counting)."""
        try:
            lease = self._kube.get_lease(self._ref.namespace, self._ref.name)
        except NotFoundError:
            with self._lock:
                self._lease, self._version, self._last_error = None, "", ""
            return
        except KubeError as error:
            with self._lock:
                self._last_error = str(error)
            return
        version = str((lease.get("metadata") or {}).get("resourceVersion", ""))
        with self._lock:
            self._last_error = ""
            if version != self._version:
                self._lease, self._version, self._observed_at = lease, version, self._clock()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.refresh()
            leader = self.is_leader()
            if leader != self._was_leader:
                log.info("leader election: %s", self.describe())
                self._was_leader = leader
                self._labelled_at = None
            now = self._clock()
            if leader and (self._labelled_at is None or now - self._labelled_at >= RELABEL_SECONDS):
                self._labelled_at = now
                self._label_pods()
            self._stopping.wait(POLL_SECONDS)

    def _label_pods(self) -> None:
        """As HAMi's leader: itself ``leader``, every other scheduler pod of its namespace ``follower``."""
        ref = self._ref
        if not ref.pod_namespace or not ref.pod_name:
            return
        try:
            pods = self._kube.list_pods_in_namespace(ref.pod_namespace, label_selector=COMPONENT_SELECTOR)
            for pod in pods:
                metadata = pod.get("metadata") or {}
                role = LEADER if metadata.get("name") == ref.pod_name else FOLLOWER
                if (metadata.get("labels") or {}).get(ROLE_LABEL) != role:
                    self._kube.patch_pod(ref.pod_namespace, str(metadata.get("name")),
                                         {"metadata": {"labels": {ROLE_LABEL: role}}})
        except KubeError as error:
            log.warning("cannot label the scheduler pods %s=leader/follower (HAMi's chart selects its Service by "
                        "it): %s", ROLE_LABEL, error)

"""Kubernetes Events on pods (``FilteringSucceed``, ``BindingFailed``…), recorded off the request path.

An event is for the operator reading ``kubectl describe pod``; it must never slow down or fail a scheduling
decision, so events go through a bounded queue to one background thread. When the queue is full the event
is dropped and logged rather than blocking kube-scheduler.

kube-scheduler retries a pod that does not fit on every cluster change; a new event per retry would bury
the pod's history. So, as client-go's event recorder does, a repeat of an event (same pod, reason, type and
series, by default the message) updates the earlier one — ``count`` + 1, ``lastTimestamp``, latest message —
instead of creating another. The sending thread alone keeps the series, so they need no lock.

**Events yield to a burst.** Each event costs hami-web about a millisecond of CPU and kube-apiserver a write, and
a burst records two per pod (``FilteringSucceed``, ``BindingSucceed``): on a busy control plane that CPU is taken
from the filters, binds and admissions the burst is waiting for. So while events are being recorded faster than
`BUSY_EVENTS_PER_SECOND` (a burst; a steady trickle of scheduling is not one), the sender holds them, each for at
most `MAX_DEFER_SECONDS`, and sends them in order once the burst is over or their time is up. Each event keeps the
time it was recorded (``firstTimestamp``), so ``kubectl describe pod`` shows when it happened, only later. HAMi
v2.10's recorder shares its client's default rate limit (5 requests per second, with the binds), so its events
wait far longer in a burst.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
import uuid
from collections import OrderedDict, deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hami_web.kube import Kube, KubeError, NotFoundError

log = logging.getLogger(__name__)

COMPONENT = "hami-scheduler"
QUEUE_SIZE = 10_000
MAX_MESSAGE_CHARS = 1024
# Series remembered for updating repeats (client-go's event cache holds 4096 too); the oldest is forgotten.
SERIES_CACHE_SIZE = 4096
# A burst: at least this many events recorded within one second (two per pod scheduled: 10 pods a second).
BUSY_EVENTS_PER_SECOND = 20
# The longest an event waits for a burst to end (a burst of 1,000 pods runs for about 20-25 s here).
MAX_DEFER_SECONDS = 30.0
# How often a held event looks again whether the burst is over.
DEFER_POLL_SECONDS = 0.1

SeriesKey = tuple[str, str, str, str, str, str]


@dataclass(slots=True)
class _Series:
    """The Event object a repeat updates, and how often it has happened."""

    namespace: str
    name: str
    count: int


def _now_rfc3339() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_event(*, namespace: str, name: str, uid: str, reason: str, message: str, warning: bool) -> dict[str, Any]:
    """A core/v1 Event about a pod, as kube-scheduler would record it."""
    now = _now_rfc3339()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid},
        "reason": reason,
        "message": message[:MAX_MESSAGE_CHARS],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": socket.gethostname(),
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class EventRecorder:
    """Queues events and creates them from a daemon thread; `flush` waits until the queue is drained."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._queue: queue.Queue[tuple[SeriesKey, dict[str, Any], float] | None] = queue.Queue(maxsize=QUEUE_SIZE)
        self._series: OrderedDict[SeriesKey, _Series] = OrderedDict()
        self._thread: threading.Thread | None = None
        # When the last BUSY_EVENTS_PER_SECOND events were recorded (appends are atomic: no lock on the hot path).
        self._recorded_at: deque[float] = deque(maxlen=BUSY_EVENTS_PER_SECOND)
        self._hurry = threading.Event()  # flush or stop: send what is held now
        self._clock = time.monotonic
        self.dropped = 0
        self.failed = 0

    def start(self) -> None:
        """Start the sending thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._send_forever, name="events", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Send what is queued, then end the thread."""
        if self._thread is not None:
            self._hurry.set()
            self._queue.put(None)
            self._thread.join(5)
            self._thread = None
            self._hurry.clear()

    def flush(self, timeout_seconds: float = 5.0) -> None:
        """Wait until every queued event has been sent, held ones too (tests and the demo)."""
        done = threading.Event()

        def wait_until_sent() -> None:
            self._queue.join()
            done.set()

        self._hurry.set()
        try:
            threading.Thread(target=wait_until_sent, daemon=True).start()
            done.wait(timeout_seconds)
        finally:
            self._hurry.clear()

    def busy(self) -> bool:
        """Whether events are being recorded at a burst's rate (`BUSY_EVENTS_PER_SECOND`)."""
        recorded = self._recorded_at
        return len(recorded) == recorded.maxlen and self._clock() - recorded[0] < 1.0

    def record(self, *, namespace: str, name: str, uid: str, reason: str, message: str,
               warning: bool = False, series: str = "") -> None:
        """Queue an event about a pod; a repeat of the same ``series`` (default: the message) updates the last one."""
        event = pod_event(namespace=namespace, name=name, uid=uid, reason=reason, message=message, warning=warning)
        key = (namespace, name, uid, reason, event["type"], series or message)
        recorded_at = self._clock()
        self._recorded_at.append(recorded_at)
        try:
            self._queue.put_nowait((key, event, recorded_at))
        except queue.Full:
            self.dropped += 1
            log.warning("event queue full, dropped %s event for pod %s/%s", reason, namespace, name)

    def _send_forever(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                key, event, recorded_at = item
                self._hold_while_busy(recorded_at)
                self._send(key, event)
            except KubeError as error:
                self.failed += 1
                log.warning("cannot record %s event: %s", item[1].get("reason") if item else "?", error)
            finally:
                self._queue.task_done()

    def _hold_while_busy(self, recorded_at: float) -> None:
        """Hold an event while a burst goes on, at most `MAX_DEFER_SECONDS` after it was recorded."""
        while self.busy() and not self._hurry.is_set():
            left = recorded_at + MAX_DEFER_SECONDS - self._clock()
            if left <= 0:
                return
            self._hurry.wait(min(DEFER_POLL_SECONDS, left))

    def _send(self, key: SeriesKey, event: dict[str, Any]) -> None:
        series = self._series.get(key)
        if series is not None:
            self._series.move_to_end(key)
            repeat = {"count": series.count + 1, "lastTimestamp": event["lastTimestamp"], "message": event["message"]}
            try:
                self._kube.patch_event(series.namespace, series.name, repeat)
            except NotFoundError:
                del self._series[key]  # the event expired (default TTL 1 h): start a new series
            else:
                series.count += 1
                return
        self._kube.create_event(event)
        metadata = event["metadata"]
        self._series[key] = _Series(namespace=metadata["namespace"], name=metadata["name"], count=1)
        if len(self._series) > SERIES_CACHE_SIZE:
            self._series.popitem(last=False)

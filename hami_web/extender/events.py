"""Kubernetes Events on pods (``FilteringSucceed``, ``BindingFailed``…), recorded off the request path.

An event is for the operator reading ``kubectl describe pod``; it must never slow down or fail a scheduling
decision, so events go through a bounded queue to one background thread. When the queue is full the event
is dropped and logged rather than blocking kube-scheduler.

kube-scheduler retries a pod that does not fit on every cluster change; a new event per retry would bury
the pod's history. So, as client-go's event recorder does, a repeat of an event (same pod, reason, type and
series, by default the message) updates the earlier one — ``count`` + 1, ``lastTimestamp``, latest message —
instead of creating another. The sending thread alone keeps the series, so they need no lock.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import uuid
from collections import OrderedDict
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
        self._queue: queue.Queue[tuple[SeriesKey, dict[str, Any]] | None] = queue.Queue(maxsize=QUEUE_SIZE)
        self._series: OrderedDict[SeriesKey, _Series] = OrderedDict()
        self._thread: threading.Thread | None = None
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
            self._queue.put(None)
            self._thread.join(5)
            self._thread = None

    def flush(self, timeout_seconds: float = 5.0) -> None:
        """Wait until every queued event has been sent (tests and the demo)."""
        done = threading.Event()

        def wait_until_sent() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=wait_until_sent, daemon=True).start()
        done.wait(timeout_seconds)

    def record(self, *, namespace: str, name: str, uid: str, reason: str, message: str,
               warning: bool = False, series: str = "") -> None:
        """Queue an event about a pod; a repeat of the same ``series`` (default: the message) updates the last one."""
        event = pod_event(namespace=namespace, name=name, uid=uid, reason=reason, message=message, warning=warning)
        key = (namespace, name, uid, reason, event["type"], series or message)
        try:
            self._queue.put_nowait((key, event))
        except queue.Full:
            self.dropped += 1
            log.warning("event queue full, dropped %s event for pod %s/%s", reason, namespace, name)

    def _send_forever(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._send(*item)
            except KubeError as error:
                self.failed += 1
                log.warning("cannot record %s event: %s", item[1].get("reason") if item else "?", error)
            finally:
                self._queue.task_done()

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

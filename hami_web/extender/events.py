"""Kubernetes Events on pods (``FilteringSucceed``, ``BindingFailed``…), recorded off the request path.

An event is for the operator reading ``kubectl describe pod``; it must never slow down or fail a scheduling
decision, so events go through a bounded queue to one background thread. When the queue is full the event
is dropped and logged rather than blocking kube-scheduler.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

from hami_web.kube import Kube, KubeError

log = logging.getLogger(__name__)

COMPONENT = "hami-scheduler"
QUEUE_SIZE = 10_000
MAX_MESSAGE_CHARS = 1024


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
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=QUEUE_SIZE)
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
        threading.Thread(target=lambda: (self._queue.join(), done.set()), daemon=True).start()
        done.wait(timeout_seconds)

    def record(self, *, namespace: str, name: str, uid: str, reason: str, message: str,
               warning: bool = False) -> None:
        """Queue an event about a pod."""
        event = pod_event(namespace=namespace, name=name, uid=uid, reason=reason, message=message, warning=warning)
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1
            log.warning("event queue full, dropped %s event for pod %s/%s", reason, namespace, name)

    def _send_forever(self) -> None:
        while True:
            event = self._queue.get()
            try:
                if event is None:
                    return
                self._kube.create_event(event)
            except KubeError as error:
                self.failed += 1
                log.warning("cannot record %s event: %s", event.get("reason") if event else "?", error)
            finally:
                self._queue.task_done()

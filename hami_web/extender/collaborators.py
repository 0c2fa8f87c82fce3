"""What the filter and the binder need of the metrics and the event recorder, as protocols.

The extender reports what it decided without depending on how it is counted or sent: production passes
`hami_web.metrics.Metrics` and `EventRecorder`, a test may pass anything with these methods (or no metrics).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class EventSink(Protocol):
    """Records a Kubernetes Event about a pod, off the request path (`EventRecorder`)."""

    def record(self, *, namespace: str, name: str, uid: str, reason: str, message: str,
               warning: bool = False, series: str = "") -> None:
        """Queue the event; a repeat of the same ``series`` (default: the message) updates the earlier one."""
        ...


class FilterMetrics(Protocol):
    """Counts filter answers (`Metrics.observe_filter`)."""

    def observe_filter(self, result: str, reasons: Mapping[str, str]) -> None:
        """Count an answer by result and, when no node fit, each node's reasons."""
        ...


class BindMetrics(Protocol):
    """Counts bind answers and what a bind did on the way (`Metrics`)."""

    def observe_bind(self, result: str) -> None:
        """Count a bind answer by result."""
        ...

    def observe_bind_calls(self, calls: int) -> None:
        """Record how many API requests one bind sent."""
        ...

    def observe_bind_reread(self, what: str) -> None:
        """Count a preconditioned write that met a newer version of ``what`` (node, pod)."""
        ...

    def observe_lock_wait(self, outcome: str) -> None:
        """Count a gang member's wait for a held node lock by outcome."""
        ...

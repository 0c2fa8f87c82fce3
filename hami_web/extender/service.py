"""The extender as one object for the routes: filter and bind sharing a cache, adapter and event recorder."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hami_web.extender.binding import Binder
from hami_web.extender.events import EventRecorder
from hami_web.extender.filtering import Filter
from hami_web.extender.wire import ExtenderBindingResult, ExtenderFilterResult


@dataclass(slots=True)
class Extender:
    """What ``/filter`` and ``/bind`` call."""

    filterer: Filter
    binder: Binder
    events: EventRecorder
    # Monotonic time of the last /filter or /bind call: only the replica whose kube-scheduler holds the Lease is
    # called, so this tells an operator which replica is active (see `activity`).
    last_call: float | None = field(default=None, compare=False)

    def filter(self, body: object) -> ExtenderFilterResult:
        """See `Filter.filter`."""
        self.last_call = time.monotonic()
        return self.filterer.filter(body)

    def bind(self, body: object) -> ExtenderBindingResult:
        """See `Binder.bind`."""
        self.last_call = time.monotonic()
        return self.binder.bind(body)

    def activity(self) -> str:
        """``never called`` (a standby, or no GPU pod yet) or ``last called N s ago`` (the active replica)."""
        if self.last_call is None:
            return "never called"
        return f"last called {time.monotonic() - self.last_call:.0f} s ago"

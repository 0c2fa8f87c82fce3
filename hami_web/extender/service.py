"""The extender as one object for the routes: filter and bind sharing a cache, adapter and event recorder."""

from __future__ import annotations

from dataclasses import dataclass

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

    def filter(self, body: object) -> ExtenderFilterResult:
        """See `Filter.filter`."""
        return self.filterer.filter(body)

    def bind(self, body: object) -> ExtenderBindingResult:
        """See `Binder.bind`."""
        return self.binder.bind(body)

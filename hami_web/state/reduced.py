"""Sinks for resources reduced at once to a small value (ResourceQuotas, PodDisruptionBudgets): a full list replaces
them all in the cache, an event one. The rest of each object (the controllers rewrite their status on every pod
change) is dropped with its page or event."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def namespaced_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` of an object (what identifies it between events)."""
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    metadata = metadata if isinstance(metadata, Mapping) else {}
    return f"{metadata.get('namespace') or ''}/{metadata.get('name') or ''}"


@dataclass(slots=True)
class _Listing(Generic[T]):
    reduce: Callable[[Mapping[str, Any]], T]
    replace: Callable[[list[T]], None]
    values: list[T] = field(default_factory=list)

    def add(self, key: str, obj: Mapping[str, Any]) -> None:
        self.values.append(self.reduce(obj))

    def done(self) -> None:
        self.replace(self.values)


@dataclass(slots=True)
class ReducedSink(Generic[T]):
    """Each object ``reduce``d; a full list given to ``replace``, each event to ``apply`` as ``(kind, value)``."""

    reduce: Callable[[Mapping[str, Any]], T]
    replace: Callable[[list[T]], None]
    apply_events: Callable[[Sequence[tuple[str, T]]], None]

    def listing(self) -> _Listing[T]:
        return _Listing(self.reduce, self.replace)

    def apply(self, kind: str, key: str, obj: Mapping[str, Any]) -> None:
        self.apply_events([(kind, self.reduce(obj))])

    def current(self, at: float) -> None:
        """Nothing waits on these streams' progress."""

"""The cluster cache by composition: one narrow face per consumer (`hami_web.state.faces`).

Covers: each face is small (at most 10 methods; the ones a consumer may call); `ClusterCache` satisfies every face
(mypy proves it where the runtime hands the cache over; here, every member of every face is the cache's, with the
same parameters); each consumer is typed by its face, so the type checker proves the filter never touches the feed
and preemption never places a pod; the cache owns its store and preemption's holds rather than being either.
"""

from __future__ import annotations

import inspect
from typing import get_type_hints

import pytest

from hami_web.dashboard.data import DashboardSources
from hami_web.extender.binding import Binder
from hami_web.extender.bindreads import BindReads
from hami_web.extender.filtering import Filter
from hami_web.extender.preempting import Preempter
from hami_web.extender.preemptverb import PreemptVerb
from hami_web.extender.service import Extender
from hami_web.metrics import Metrics
from hami_web.state import faces
from hami_web.state.budgets import budget_sink
from hami_web.state.cache import ClusterCache
from hami_web.state.holds import Holds
from hami_web.state.quotas import quota_sink
from hami_web.state.store import CacheStore
from hami_web.state.sync import ClusterSync, NodeCacheSink, PodCacheSink

FACES = (faces.CacheFeed, faces.QuotaFeed, faces.BudgetFeed, faces.ClusterFeed, faces.Placements, faces.Preemption,
         faces.CacheReads, faces.LockLines)
MAX_FACE_METHODS = 10


def _members(face: type) -> dict[str, object]:
    """The face's own members and those of the faces it extends (not `typing.Protocol`'s machinery)."""
    found: dict[str, object] = {}
    for klass in reversed(face.__mro__):
        if klass.__module__ == faces.__name__:
            found.update({name: value for name, value in vars(klass).items() if not name.startswith("_")})
    return found


@pytest.mark.parametrize("face", FACES, ids=lambda face: face.__name__)
def test_each_face_is_narrow(face: type) -> None:
    methods = [name for name, value in _members(face).items() if inspect.isfunction(value)]
    assert 0 < len(methods) <= MAX_FACE_METHODS, f"{face.__name__}: {methods}"


@pytest.mark.parametrize("face", FACES, ids=lambda face: face.__name__)
def test_the_cache_has_every_member_of_every_face_with_its_parameters(face: type) -> None:
    cache = ClusterCache()
    for name, member in _members(face).items():
        assert hasattr(cache, name), f"ClusterCache has no {name} of {face.__name__}"
        if inspect.isfunction(member):
            wanted = list(inspect.signature(member).parameters)[1:]
            assert list(inspect.signature(getattr(cache, name)).parameters) == wanted, name


@pytest.mark.parametrize(("consumer", "parameter", "face"), [
    (Filter.__init__, "cache", faces.Placements),
    (Binder.__init__, "cache", faces.Placements),
    (BindReads.__init__, "cache", faces.Placements),
    (Binder.__init__, "lines", faces.LockLines | None),
    (ClusterSync.__init__, "cache", faces.ClusterFeed),
    (ClusterSync.__init__, "budgets", faces.BudgetFeed | None),
    (NodeCacheSink, "cache", faces.CacheFeed),
    (PodCacheSink, "cache", faces.CacheFeed),
    (quota_sink, "cache", faces.QuotaFeed),
    (budget_sink, "cache", faces.BudgetFeed),
    (Preempter.__init__, "cache", faces.Preemption),
    (PreemptVerb.__init__, "cache", faces.Preemption),
    (Metrics.__init__, "cache", faces.CacheReads | None),
    (DashboardSources, "cache", faces.CacheReads),
    (Extender, "cache", faces.CacheReads | None),
], ids=lambda value: getattr(value, "__qualname__", "") or str(value))
def test_each_consumer_is_typed_by_its_face(consumer: object, parameter: str, face: object) -> None:
    assert get_type_hints(consumer)[parameter] == face


def test_the_cache_owns_its_store_and_its_holds() -> None:
    assert CacheStore not in ClusterCache.__mro__
    assert Holds not in ClusterCache.__mro__
    cache = ClusterCache()
    assert isinstance(cache._store, CacheStore)
    assert isinstance(cache._holds, Holds)

"""Fixtures of the extender tests: a fast API server, running runtimes, a `Scheduler` on the default runtime."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from werkzeug.serving import WSGIRequestHandler, make_server

from hami_web.kube import Kube
from hami_web.localcluster import LocalCluster
from hami_web.server.runtime import Runtime, build_runtime
from hami_web.settings import Settings
from hami_web.state.cache import ClusterCache
from hami_web.state.sync import ClusterSync

from .helpers import SYNC_TIMEOUT_SECONDS, RuntimeFactory, Scheduler, SyncOn

# -- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture
def apiserver() -> Iterator[LocalCluster]:
    """The in-process API server, with frequent watch bookmarks so the runtime's watch loops stop quickly."""
    with LocalCluster(bookmark_interval_seconds=0.1) as cluster:
        yield cluster



@pytest.fixture
def make_runtime(apiserver: LocalCluster) -> Iterator[RuntimeFactory]:
    """Build, start and sync a runtime against ``apiserver``: ``make_runtime(clock=..., **settings_fields)``.

    Every runtime made gets its own client and is stopped at the end of the test.
    """
    started: list[Runtime] = []

    def make(*, clock: Callable[[], float] | None = None, start: bool = True, **overrides: Any) -> Runtime:
        settings = Settings.of(**{"refresh_interval_seconds": 300.0, **overrides})
        kwargs: dict[str, Any] = {} if clock is None else {"clock": clock}
        runtime = build_runtime(settings, kube=Kube.for_url(apiserver.url), **kwargs)
        started.append(runtime)
        if start:
            runtime.start()
            assert runtime.cache.wait_synced(SYNC_TIMEOUT_SECONDS), "runtime did not complete its first sync"
        return runtime

    yield make
    for runtime in started:
        runtime.stop()


@pytest.fixture
def runtime(make_runtime: RuntimeFactory) -> Runtime:
    """A running runtime with default settings (refresh every 300 s: only the watches keep it current)."""
    return make_runtime()


@pytest.fixture
def scheduler(runtime: Runtime, apiserver: LocalCluster) -> Scheduler:
    """A `Scheduler` on the default `runtime`."""
    return Scheduler(runtime.app.test_client(), apiserver)




@pytest.fixture
def sync_on() -> Iterator[SyncOn]:
    """``sync_on(apiserver, start=True, clock=…, **options)``: a `ClusterSync` on its own cache and client against
    ``apiserver``, started and synced unless ``start=False``; every one made is stopped at the end of the test."""
    made: list[tuple[ClusterSync, Kube]] = []

    def make(apiserver: LocalCluster, *, start: bool = True, clock: Callable[[], float] = time.time,
             **options: Any) -> ClusterSync:
        kube = Kube.for_url(apiserver.url)
        sync = ClusterSync(ClusterCache(clock=clock), kube, clock=clock, **options)
        made.append((sync, kube))
        if start:
            sync.start()
            assert sync._cache.wait_synced(5), "no first sync"
        return sync

    yield make
    for sync, kube in made:
        sync.stop()
        kube.close()


class _QuietHandler(WSGIRequestHandler):
    """No access-log line per request."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


@pytest.fixture
def server_url(runtime: Runtime) -> Iterator[str]:
    """The runtime's app on a real threaded werkzeug server on a free port, so filters and binds run on several
    threads at once."""
    server = make_server("127.0.0.1", 0, runtime.app, threaded=True, request_handler=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join(5)

"""hami-web's gunicorn worker: an asyncio event loop that owns every connection, and threads for the app.

gunicorn's ``gthread`` worker wraps TLS and reads the request header on its worker threads, so a few
clients that connect and stall (no ClientHello, half a header) take every thread and stop the webhook and
the extender. Here the event loop does the TLS handshake (`asyncio` with a handshake deadline), reads the
whole request with deadlines (`hami_web.server.front`), and only then hands it to a thread. gunicorn keeps
doing what it is good at: binding the sockets, one worker process, restarts, signals, graceful stop.

Each listening socket is matched to its `Listener` by port; TLS listeners use the process's
`ReloadingTLSContext`, whose SNI hook swaps a renewed certificate into every new handshake.
"""

from __future__ import annotations

import asyncio
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from typing import Any, ClassVar

from gunicorn.workers.base import Worker

from hami_web.routes.health import probe_answers_for
from hami_web.server.front import Connection, Deadlines
from hami_web.server.listeners import EXTENDER, ROUTES_BY_AUDIENCE, SHARED, Listener
from hami_web.server.tlsreload import ReloadingTLSContext

# Seconds between two heartbeats to the arbiter (it kills a worker silent for ``timeout``).
HEARTBEAT_SECONDS = 1.0


class ThreadLanes:
    """The threads that run the app: one pool per listener.

    A bind waits on several API round trips; with one pool for everything, a burst of binds (kube-scheduler runs them
    in parallel, without limit) took every thread, and the webhook's admission of the burst's next pods and
    Prometheus' scrape queued behind them. ``/filter`` and ``/bind`` share the extender listener's pool on purpose:
    when binds are slow, kube-scheduler's serial filter waits for a thread, so it places no more pods than hami-web
    can bind — every placement not yet bound makes its node busy (`state.cache`), and a filter running far ahead of
    the binds would spread a binpack burst over as many nodes as placements are waiting. Pools are made on first
    use, from the event loop's thread only. Binds that wait in binpack's lines (``--binpack-lock-queue``) have
    ``waiting_threads`` more in the extender's pool, so that they never hold the threads the filter runs on.
    """

    def __init__(self, threads: int, *, waiting_threads: int = 0) -> None:
        self._threads = threads
        self._waiting_threads = waiting_threads
        self._pools: dict[str, ThreadPoolExecutor] = {}

    def for_path(self, listener: Listener, path: str) -> ThreadPoolExecutor:
        """The pool that runs a request for ``path`` on ``listener``: the listener's pool, except that HAMi's one
        listener (``--http_bind``) runs ``/webhook`` on a pool of its own, as if it were the webhook's listener."""
        lane = listener.flag
        if listener.audience == SHARED and path not in ROUTES_BY_AUDIENCE[EXTENDER]:
            lane = f"{listener.flag}-webhook"
        pool = self._pools.get(lane)
        if pool is None:
            extra = self._waiting_threads if lane == listener.flag and listener.audience in (EXTENDER, SHARED) else 0
            pool = self._pools[lane] = ThreadPoolExecutor(
                max_workers=self._threads + extra, thread_name_prefix=f"hami-web-{lane.lstrip('-')}")
        return pool

    def shutdown(self) -> None:
        """Stop every pool without waiting (requests in flight were given their grace already)."""
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)


class FrontWorker(Worker):
    """One worker process: the event loop accepts and reads, a thread pool of ``threads`` runs the app."""

    listeners: ClassVar[tuple[Listener, ...]] = ()
    tls: ClassVar[ReloadingTLSContext | None] = None
    deadlines: ClassVar[Deadlines] = Deadlines()
    waiting_threads: ClassVar[int] = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._served: set[Connection] = set()

    def run(self) -> None:
        """The worker's main loop (gunicorn calls it after ``post_worker_init``)."""
        asyncio.run(self._serve())

    def _listener_for(self, listening: socket.socket) -> Listener:
        port = listening.getsockname()[1]
        for listener in self.listeners:
            if listener.port == port:
                return listener
        raise RuntimeError(f"no listener planned for port {port}")

    async def _serve(self) -> None:
        deadlines = replace(self.deadlines,
                            keepalive_seconds=float(self.cfg.keepalive or self.deadlines.keepalive_seconds))
        lanes = ThreadLanes(self.cfg.threads, waiting_threads=self.waiting_threads)
        probes = probe_answers_for(self.wsgi)
        loop = asyncio.get_running_loop()
        servers = []
        for wrapped in self.sockets:
            listening = getattr(wrapped, "sock", wrapped)
            listener = self._listener_for(listening)
            if listener.tls and self.tls is None:
                raise RuntimeError(f"{listener.flag} is a TLS listener but the worker has no TLS context")
            context = self.tls.current() if listener.tls and self.tls is not None else None
            connection = partial(Connection, listener=listener, app=self.wsgi, deadlines=deadlines, probes=probes,
                                 executor_for=partial(lanes.for_path, listener), on_open=self._admit,
                                 on_closed=self._served.discard)
            servers.append(await loop.create_server(
                connection, sock=listening, ssl=context,
                ssl_handshake_timeout=deadlines.handshake_seconds if context is not None else None))
        try:
            while self.alive:
                self.notify()
                if os.getppid() != self.ppid:
                    self.log.info("parent changed, shutting down: %s", self)
                    break
                await asyncio.sleep(HEARTBEAT_SECONDS)
        finally:
            await self._stop(servers)
            lanes.shutdown()

    def _admit(self, connection: Connection) -> bool:
        """Whether a new connection is served: not past ``worker_connections``, not while stopping."""
        if len(self._served) >= self.cfg.worker_connections or not self.alive:
            return False
        self._served.add(connection)
        return True

    async def _stop(self, servers: list[asyncio.Server]) -> None:
        """Stop accepting, drop idle connections, give requests in flight ``graceful_timeout`` to finish."""
        for server in servers:
            server.close()
        for connection in list(self._served):
            connection.closing = True
            if not connection.busy:
                connection.close()
        pending = [connection.closed for connection in self._served if connection.busy]
        if pending:
            await asyncio.wait(pending, timeout=self.cfg.graceful_timeout)
        for connection in list(self._served):
            connection.abort()


def front_worker_class(listeners: tuple[Listener, ...], tls: ReloadingTLSContext | None,
                       waiting_threads: int = 0) -> type[FrontWorker]:
    """A `FrontWorker` bound to these listeners and TLS context (gunicorn takes a class as its worker)."""
    return type("HamiWebWorker", (FrontWorker,), {"listeners": listeners, "tls": tls,
                                                  "waiting_threads": waiting_threads, "__module__": __name__})

"""Assembling one hami-web process: adapter, cache, sync loops, extender, metrics and the Flask app.

`serve`, the demo and the end-to-end tests all build the process the same way, so what the tests exercise is
what production runs. Background threads are started by `Runtime.start`, separately from construction,
because under gunicorn they must start inside the worker process (threads do not survive a fork).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from flask import Flask

from hami_web.dashboard.data import DashboardSources
from hami_web.dashboard.nodetraits import NodeTraitsSink
from hami_web.extender.binding import Binder
from hami_web.extender.events import EventRecorder
from hami_web.extender.filtering import Filter
from hami_web.extender.nodelock import NodeLock
from hami_web.extender.preempting import Preempter, missing_rights
from hami_web.extender.preemptverb import PreemptVerb
from hami_web.extender.service import Extender
from hami_web.kube import Kube
from hami_web.metrics import Metrics
from hami_web.server.app import create_app
from hami_web.server.publication import start_publishing
from hami_web.settings import Settings
from hami_web.state.budget import RequestBudget
from hami_web.state.cache import ClusterCache
from hami_web.state.decisions import DecisionLog
from hami_web.state.leadership import Leadership, LeaseRef
from hami_web.state.sync import ClusterSync

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Runtime:
    """Everything one process runs; `start`/`stop` manage the background threads."""

    settings: Settings
    kube: Kube
    cache: ClusterCache
    sync: ClusterSync
    events: EventRecorder
    extender: Extender
    metrics: Metrics
    app: Flask
    decisions: DecisionLog
    preempter: Preempter | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    leadership: Leadership | None = None

    def start(self) -> None:
        """Start the event sender, the list/watch loops and the Lease follower, and publish the settings for the
        tools."""
        self.events.start()
        if self.preempter is not None:
            self.preempter.start()
        self.sync.start()
        if self.leadership is not None:
            self.leadership.start()
        start_publishing(self.kube, self.settings, stopping=self.stopping)

    def stop(self) -> None:
        """Stop the loops, send queued events, close the client."""
        self.stopping.set()
        if self.leadership is not None:
            self.leadership.stop()
        self.sync.stop()
        if self.preempter is not None:
            self.preempter.stop()
        self.events.stop()
        self.kube.close()


def build_runtime(settings: Settings, *, kube: Kube | None = None, clock: Callable[[], float] = time.time,
                  environ: Mapping[str, str] | None = None) -> Runtime:
    """Build the process from settings; ``kube`` defaults to the client ``--kubeconfig`` resolves. ``environ``
    (default the process's) gives ``POD_NAME``/``POD_NAMESPACE`` to ``--leader-elect``'s role labels."""
    if kube is None:
        api = settings.api
        budget = RequestBudget(qps=api.kube_qps, burst=api.kube_burst) if api.kube_qps > 0 else None
        kube = Kube.from_kubeconfig(api.kubeconfig, timeout_seconds=api.kube_timeout_seconds,
                                    throttle=budget.take if budget else None)
    settings, preemption_off = _preemption_setting(settings, kube)
    cache = ClusterCache(catalog=settings.devices, clock=clock,
                         busy_nodes_last=settings.busy_nodes_last,
                         node_lock_timeout_seconds=settings.binding.node_lock_timeout_seconds,
                         lock_queue_depth=settings.binding.binpack_lock_queue_depth,
                         lock_queue_slots=settings.binding.queued_binds,
                         lock_queue_seconds=settings.binding.binpack_lock_queue_seconds)
    sync = ClusterSync(cache, kube, refresh_interval_seconds=settings.watch.refresh_interval_seconds,
                       relist_interval_seconds=settings.watch.relist_interval_seconds,
                       node_label_selector=settings.watch.node_label_selector, clock=clock,
                       watch_silence_bound_seconds=settings.watch.watch_silence_bound_seconds,
                       budgets=cache if settings.preemption == "on" else None)
    metrics = Metrics(cache, sync, legacy=settings.serving.legacy_metrics)
    metrics.set_preemption(settings.preemption == "on", preemption_off)
    events = EventRecorder(kube)
    preempter = Preempter(kube=kube, events=events, cache=cache, metrics=metrics) \
        if settings.preemption == "on" else None
    decisions = DecisionLog(clock=clock)
    cache.on_pods_settled(decisions.forget_refusals)
    node_lock = NodeLock(kube, timeout_seconds=settings.binding.node_lock_timeout_seconds, clock=clock,
                         on_reread=lambda: metrics.observe_bind_reread("node"), rules=settings.devices.lock_rules())
    extender = Extender(
        filterer=Filter(policy=settings.policy, cache=cache, events=events, metrics=metrics,
                        deadline_seconds=settings.binding.extender_deadline_seconds, preempter=preempter),
        binder=Binder(cache=cache, kube=kube, events=events, node_lock=node_lock, metrics=metrics, clock=clock,
                      deadline_seconds=settings.binding.extender_deadline_seconds,
                      lock_wait_seconds=settings.binding.node_lock_retry_timeout_seconds,
                      max_lock_waiters=max(1, settings.serving.threads // 2),
                      catalog=settings.devices, pods_version=lambda: sync.pods.resource_version,
                      lock_queue_seconds=settings.binding.binpack_lock_queue_seconds,
                      max_queued=settings.binding.queued_binds, lines=cache),
        events=events, cache=cache, decisions=decisions,
        preempter=PreemptVerb(policy=settings.policy, cache=cache),
    )
    leadership = _leadership(settings, kube, os.environ if environ is None else environ)
    if leadership is not None:
        extender.standby, extender.describe_leadership = leadership.standby_reason, leadership.describe
    stopping = threading.Event()
    dashboard = None
    if settings.serving.ui_bind:
        # The dashboard's node traits ride on the cache's node reflector: one node watch per process.
        node_traits = NodeTraitsSink(last_error=lambda: sync.nodes.last_error)
        sync.reflector("nodes").add_sink(node_traits)
        dashboard = DashboardSources(settings=settings, cache=cache, decisions=decisions, kube=kube,
                                     node_traits=node_traits)
    app = create_app(settings, readiness=sync, extender=extender, metrics=metrics, dashboard=dashboard, quotas=cache,
                     events=events)
    return Runtime(settings=settings, kube=kube, cache=cache, sync=sync, events=events, extender=extender,
                   metrics=metrics, app=app, decisions=decisions, preempter=preempter, stopping=stopping,
                   leadership=leadership)


def _leadership(settings: Settings, kube: Kube, environ: Mapping[str, str]) -> Leadership | None:
    """HAMi's ``--leader-elect``: follow kube-scheduler's Lease as this host (kube-scheduler's identity begins with
    the hostname, in a pod the pod's name)."""
    leader = settings.leader
    if not leader.leader_elect:
        return None
    return Leadership(kube, LeaseRef(namespace=leader.leader_elect_resource_namespace,
                                     name=leader.leader_elect_resource_name, identity=socket.gethostname(),
                                     pod_namespace=environ.get("POD_NAMESPACE", ""),
                                     pod_name=environ.get("POD_NAME", "")))


def _preemption_setting(settings: Settings, kube: Kube) -> tuple[Settings, str]:
    """``settings`` with preemption turned off when the server's identity lacks its rights (one log line), and why it
    is off ("" when on)."""
    if settings.preemption != "on":
        return settings, "--preemption=off"
    missing = missing_rights(kube)
    if not missing:
        return settings, ""
    log.warning("device-aware preemption is off: %s (grant them, see k8s/rbac.yaml, and restart)", missing)
    return settings.with_values(preemption="off"), missing

"""The settings of one concern each, as small frozen values: each part of the process is handed the group it uses.

`Settings` holds one of each (``settings.serving``, ``.watch``, ``.binding``, ``.api``) beside the scheduling and
device settings that build its `SchedulingPolicy`, `AdmissionPolicy` and device catalog. A flag's row in the option
table names the field it sets (``serving.bind``), so a setting is declared once, in its group.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_web.settings.values import split_host_port


@dataclass(frozen=True, slots=True)
class ServingSettings:
    """How the process serves: its listeners, TLS, app threads and logs (docs/configuration.md#configuration)."""

    bind: str = "0.0.0.0:8443"
    extender_bind: str = "127.0.0.1:8444"
    # HAMi's one listener (``--http_bind``): when set it replaces ``bind`` and ``extender_bind``.
    http_bind: str = ""
    metrics_bind_address: str = ":9395"
    ui_bind: str = "127.0.0.1:9396"
    ui_expose: bool = False
    cert_file: str = ""
    key_file: str = ""
    insecure_http: bool = False
    threads: int = 8
    log_level: str = "INFO"
    log_format: str = "text"
    legacy_metrics: bool = False

    @property
    def plain_http(self) -> bool:
        """Plain HTTP on every listener: ``--insecure-http``, or HAMi's ``--http_bind`` without a certificate (the
        chart's ``admissionWebhook.enabled=false``, port 80)."""
        return self.insecure_http or bool(self.http_bind and not self.cert_file and not self.key_file)

    @property
    def bind_host_port(self) -> tuple[str, int]:
        """``--bind`` split into host and port (validated at construction)."""
        return split_host_port(self.bind)

    @property
    def http_host_port(self) -> tuple[str, int] | None:
        """``--http_bind`` split into host and port; None when the listeners are separate."""
        return split_host_port(self.http_bind) if self.http_bind else None

    @property
    def extender_host_port(self) -> tuple[str, int]:
        """``--extender-bind`` split into host and port."""
        return split_host_port(self.extender_bind)

    @property
    def metrics_host_port(self) -> tuple[str, int]:
        """``--metrics-bind-address`` split into host and port (``:9395`` means every interface)."""
        return split_host_port(self.metrics_bind_address)

    @property
    def ui_host_port(self) -> tuple[str, int] | None:
        """``--ui-bind`` split into host and port; None when the dashboard is off."""
        return split_host_port(self.ui_bind) if self.ui_bind else None


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """How the cache follows the cluster: which nodes, how often it resyncs and relists, when a watch is silent."""

    node_label_selector: str = ""
    refresh_interval_seconds: float = 15.0
    relist_interval_seconds: float = 0.0
    watch_silence_bound_seconds: float = 90.0


# How many binds may wait in binpack's in-process lines at once (``--binpack-lock-queue``), each on a thread of its own
# (made when needed; 1,024 waiting threads hold about 20 MiB). At 256, a burst of 1,000 pods on 1,000 nodes filled them:
# the filter then fell back to one bind per node, the binds beyond them tried held locks at once, and 4-8 % of all
# binds were refused; at 1,024 none were (docs/performance.md, "Binpack's in-process line").
QUEUED_BINDS = 1024


@dataclass(frozen=True, slots=True)
class BindSettings:
    """How ``/filter`` and ``/bind`` spend their time and treat node locks (HAMi v2.10's names and meanings)."""

    extender_deadline_seconds: float = 15.0
    node_lock_timeout_seconds: float = 300.0
    node_lock_retry_timeout_seconds: float = 25.0
    binpack_lock_queue_seconds: float = 10.0
    binpack_lock_queue_depth: int = 7

    @property
    def queued_binds(self) -> int:
        """How many binds may wait in binpack's lines at once, each on a thread of its own (0: no line)."""
        return QUEUED_BINDS if self.binpack_lock_queue_seconds > 0 else 0


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """How the process reaches kube-apiserver: the kubeconfig, the client-side rate limit, one request's timeout."""

    kubeconfig: str = ""
    kube_qps: float = 0.0
    kube_burst: int = 0
    kube_timeout_seconds: float = 10.0


@dataclass(frozen=True, slots=True)
class LeaderSettings:
    """HAMi's ``--leader-elect``: follow kube-scheduler's Lease
    (docs/deployment.md#high-availability-active-and-standby).

    The replica whose hostname leads the Lease's holder identity (kube-scheduler writes ``<hostname>_<uuid>``) is
    the leader: it labels the scheduler pods ``hami.io/scheduler-role`` (the chart's Service selects the leader),
    and a standby refuses to book in ``/filter`` and ``/bind``.
    """

    leader_elect: bool = False
    leader_elect_resource_name: str = ""
    leader_elect_resource_namespace: str = ""

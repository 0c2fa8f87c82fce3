"""The server-wide policies as values: the scheduling policy (which pods are ours, the default policies, the
request defaults) and the admission policy (what the webhook routes to us, and how).

The filter, ``kubectl hami explain``/``capacity`` and the dashboard all read a pod the same way — its ask with the
server's request defaults, its placement options with the server's policies as fallback — so they get the one
`SchedulingPolicy` (built from the server's settings, or from what it published) instead of the settings they do not
use; the webhook gets its `AdmissionPolicy` alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hami_web.core.families import DEFAULT_CATALOG, DeviceCatalog
from hami_web.core.options import PodOptions, pod_options
from hami_web.core.requests import PodRequest, RequestDefaults, pod_request


@dataclass(frozen=True, slots=True)
class SchedulingPolicy:
    """The service-wide defaults a pod's annotations override (``--node-scheduler-policy``,
    ``--gpu-scheduler-policy``, the request defaults with the enabled families, ``--scheduler-name``)."""

    node_policy: str = "binpack"
    gpu_policy: str = "spread"
    defaults: RequestDefaults = field(default_factory=RequestDefaults)
    scheduler_name: str = "hami-scheduler"

    @property
    def catalog(self) -> DeviceCatalog:
        """The enabled device families."""
        return self.defaults.catalog

    def request_of(self, pod: Mapping[str, Any]) -> PodRequest:
        """What the pod asks of every enabled family, with the defaults filled in; `RequestError` when unreadable."""
        return pod_request(pod, self.defaults)

    def options_of(self, annotations: Mapping[str, str] | None) -> PodOptions:
        """The pod's placement options, these policies where it sets none; `OptionsError` for a value not
        understood."""
        return pod_options(annotations, node_policy=self.node_policy, gpu_policy=self.gpu_policy,
                           catalog=self.catalog)


@dataclass(frozen=True, slots=True)
class AdmissionPolicy:
    """What the admission webhook decides with: the scheduler it sets on device pods (``--scheduler-name``), what it
    does with privileged containers (``--privileged-policy``: ``deny`` or ``skip``), and the enabled families with
    their resource names and admission rules (``devices``, as `Settings.devices`)."""

    scheduler_name: str = "hami-scheduler"
    privileged_policy: str = "deny"
    devices: DeviceCatalog = DEFAULT_CATALOG
    # HAMi's --force-overwrite-default-scheduler: false leaves a pod that names default-scheduler to it.
    force_overwrite_default_scheduler: bool = True

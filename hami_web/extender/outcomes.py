"""What ``/filter`` and ``/bind`` decided, as frozen values: the typed middle of decode → decide → encode.

The route decodes kube-scheduler's body into a request (`wire.decode_filter_args`, `wire.decode_binding_args`), the
extender decides into one of these outcomes, and the route encodes it (`wire.encode_filter_result`,
`wire.encode_binding_result`). The log line, the pod's event, the metrics and the dashboard's decision log all read
the outcome, so none of them has to work out from the answer's shape what happened.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from hami_web.core.choose import Placement
from hami_web.core.grants import describe_grants


@dataclass(frozen=True, slots=True)
class PodRef:
    """Which pod a request is about (namespace ``default`` when kube-scheduler sent none)."""

    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        """``namespace/name``, as logs and the dashboard name a pod."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class FilterRequest:
    """An ExtenderArgs that has the fields the filter needs, checked (`wire.decode_filter_args`).

    ``node_objects`` holds the full Node objects by name when kube-scheduler sent ``Nodes`` (``nodeCacheCapable:
    false``); the answer must then be ``Nodes`` too.
    """

    pod: Mapping[str, Any]
    ref: PodRef
    candidates: tuple[str, ...]
    node_objects: Mapping[str, Mapping[str, Any]] | None = None

    @property
    def resource_version(self) -> str:
        """The pod's resourceVersion as kube-scheduler sent it ("" when absent): `/bind`'s write precondition."""
        return str(self.pod["metadata"].get("resourceVersion") or "")

    @property
    def annotations(self) -> Mapping[str, str]:
        """The pod's annotations (checked to be strings by the decoder)."""
        annotations: Mapping[str, str] = self.pod["metadata"].get("annotations") or {}
        return annotations


@dataclass(frozen=True, slots=True)
class BindRequest:
    """An ExtenderBindingArgs, checked (`wire.decode_binding_args`): which pod goes to which node."""

    ref: PodRef
    node: str


@dataclass(frozen=True, slots=True)
class UnreadableArgs:
    """A body that is not the shape kube-scheduler sends: answered with ``error``, nothing decided.

    ``pod_key`` names the pod as far as the body shows it (``default/?`` when it does not), for the decision log.
    """

    error: str
    pod_key: str = "default/?"


# -- /filter ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Placed:
    """The pod fits on ``placement.node``; its devices are booked in this server's memory until ``/bind``."""

    request: FilterRequest
    placement: Placement

    @property
    def devices(self) -> str:
        """The devices booked, as logs and events show them."""
        return describe_grants(self.placement.grants)


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """No candidate fits; ``reasons`` says why for every candidate node. ``preemption`` says what device-aware
    preemption does about it (``preempting a, b on node n``, ``waiting for 2 preempted pods on n``; "" for
    nothing: docs/preemption.md)."""

    request: FilterRequest
    reasons: Mapping[str, str]
    preemption: str = ""


@dataclass(frozen=True, slots=True)
class Passthrough:
    """The pod asks for no device of an enabled family: every candidate passes, nothing is booked."""

    request: FilterRequest


class FilterRefusal(Enum):
    """Why a filter answered with an error instead of a choice; each is logged and reported differently."""

    BAD_REQUEST = "bad_request"  # the body is not an ExtenderArgs: only a log line
    NOT_SYNCED = "not_synced"  # the cache has no first sync yet: kube-scheduler retries, nothing to tell the pod
    POD = "pod"  # the pod itself is refused (bad request values or options, already bound or booked): an event


@dataclass(frozen=True, slots=True)
class FilterRefused:
    """The filter answers ``message`` as its ``Error``; ``request`` is `UnreadableArgs` when the body could not be
    read."""

    kind: FilterRefusal
    message: str
    request: FilterRequest | UnreadableArgs

    @property
    def pod_key(self) -> str:
        """``namespace/name`` of the pod, as far as the request names it."""
        return self.request.ref.key if isinstance(self.request, FilterRequest) else self.request.pod_key


FilterOutcome = Placed | Unschedulable | Passthrough | FilterRefused


# -- /bind -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bound:
    """The pod is bound to ``request.node`` with its booking written (or it already was: a retried bind)."""

    request: BindRequest
    devices: str


class BindFailure(Enum):
    """Why a bind was refused; the value is the ``hami_web_bind_results`` label."""

    BAD_REQUEST = "bad_request"  # not an ExtenderBindingArgs: logged only, no metric
    NOT_OURS = "refused"  # not placed by this process: nothing touched
    LOCKED = "locked"  # the node lock is held: nothing changed, kube-scheduler retries
    CONFLICT = "conflict"  # the pod or its devices were taken by another binder meanwhile: cleaned up
    FAILED = "failed"  # any other failure: cleaned up
    UNKNOWN = "unknown"  # the Binding got no answer and the API cannot say: booking and lock kept

    @property
    def cleaned_up(self) -> bool:
        """Whether the failure voided the booking, released our lock and dropped the placement (a BindingFailed
        event tells the pod's owner)."""
        return self in (BindFailure.CONFLICT, BindFailure.FAILED)


@dataclass(frozen=True, slots=True)
class BindRefused:
    """The bind answers ``message`` as its ``Error``; ``request`` is `UnreadableArgs` when the body could not be
    read."""

    kind: BindFailure
    message: str
    request: BindRequest | UnreadableArgs

    @property
    def pod_key(self) -> str:
        """``namespace/name`` of the pod, as far as the request names it."""
        return self.request.ref.key if isinstance(self.request, BindRequest) else self.request.pod_key


BindOutcome = Bound | BindRefused


# -- preemptVerb -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreemptRequest:
    """An ExtenderPreemptionArgs, checked (`wire.decode_preemption_args`): the pod, and per node the victims
    kube-scheduler's own preemption chose (their uids) with the PodDisruptionBudgets they violate."""

    pod: Mapping[str, Any]
    ref: PodRef
    proposals: Mapping[str, tuple[tuple[str, ...], int]]


@dataclass(frozen=True, slots=True)
class PreemptAnswer:
    """Per node kept, its victims (kube-scheduler's, then the device holders that must go too) and PDB violations;
    per node dropped, why (the pod's devices fit there with no choice of lower-priority victims)."""

    request: PreemptRequest
    nodes: Mapping[str, tuple[tuple[str, ...], int]]
    dropped: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class PreemptRefused:
    """The preempt call answers ``message`` as its ``Error``."""

    message: str
    request: PreemptRequest | UnreadableArgs


PreemptOutcome = PreemptAnswer | PreemptRefused

"""Namespace quotas on device memory and cores (docs/quotas.md#namespace-quotas), as HAMi reads ResourceQuota objects.

Kubernetes' own quota admission counts an extended resource only as ``requests.<name>`` and knows nothing of how
many MiB of a shared GPU a pod really books, so hami-web (as HAMi) enforces ``limits.<memory resource>`` and
``limits.<cores resource>`` of the enabled families itself: at admission on what the pod spec asks, at filter on
what a placement would book. This module is the rule and the bookkeeping it needs, with no state of its own:

- `parse_resource_quota` reads one object into the limits it sets (a malformed or fractional value is left out with
  a warning naming the object and key, never a crash or a namespace blocked by accident);
- `effective_limits` joins the objects of a namespace (several with one key: the smallest wins);
- `booking_quota_use` is what one pod's booking counts against its namespace;
- `NamespaceQuota` is a namespace's limits and use, `PodQuota` what they leave a pod at filter, and `QuotaTally` the
  pod's own picks so far while it is fitted on one node.

Units: memory use is booked MiB; a memory limit is in the resource's own unit, so it is multiplied by the family's
memory factor when that is above 1 (Iluvatar and Cambricon ask in 256 MiB units); cores are percent of a device.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from hami_web.core.families import DeviceCatalog, Family
from hami_web.core.grants import PodGrants
from hami_web.core.limits import MAX_DEVICE_CORES, MAX_DEVICE_MEMORY_MIB, MAX_TASK_CORES
from hami_web.core.quantities import QuantityError, parse_whole_quantity
from hami_web.core.requests import ContainerRequest, PodRequest
from hami_web.core.usage import DeviceUsage

LIMIT_PREFIX = "limits."
# Largest limit read: a namespace's GPU memory in MiB fits well below this; a larger value is an operator's typo.
MAX_QUOTA_VALUE = 10**15
EXCEEDING = "exceeding resource quota"


@dataclass(frozen=True, slots=True)
class QuotaResource:
    """A resource name a quota may limit: which family it belongs to and whether it is that family's memory."""

    name: str
    family: str
    memory: bool
    memory_factor: int = 1


def quota_resources(catalog: DeviceCatalog) -> dict[str, QuotaResource]:
    """Every resource of the enabled families a ``limits.<R>`` key may name: each family's memory and cores."""
    resources: dict[str, QuotaResource] = {}
    for family in catalog:
        if family.resources.memory:
            resources[family.resources.memory] = QuotaResource(family.resources.memory, family.cw, True,
                                                               max(family.memory_factor, 1))
        if family.resources.cores:
            resources[family.resources.cores] = QuotaResource(family.resources.cores, family.cw, False)
    return resources


def memory_factors(catalog: DeviceCatalog) -> dict[str, int]:
    """Per memory resource a quota may limit, its family's memory factor (what a limit is multiplied by in MiB)."""
    return {name: resource.memory_factor for name, resource in quota_resources(catalog).items() if resource.memory}


@dataclass(frozen=True, slots=True)
class QuotaObject:
    """What one ResourceQuota object limits: per resource R (``limits.<R>`` of ``spec.hard``) the integer limit."""

    namespace: str
    name: str
    limits: Mapping[str, int]
    warnings: tuple[str, ...] = ()


def parse_resource_quota(obj: Mapping[str, Any], catalog: DeviceCatalog) -> QuotaObject:
    """Read a ResourceQuota object's device limits; never raises.

    Keys other than ``limits.<R>`` for an enabled family's memory or cores resource are not ours (``requests.*``,
    count resources, CPU and the rest are Kubernetes' own quota's business) and are skipped silently. A key of ours
    whose value is not a whole non-negative quantity is skipped with a warning naming the object and the key.
    """
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    metadata = metadata if isinstance(metadata, Mapping) else {}
    namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    hard = spec.get("hard") if isinstance(spec, Mapping) else None
    if hard is None:
        return QuotaObject(namespace=namespace, name=name, limits={})
    where = f"ResourceQuota {namespace}/{name}"
    if not isinstance(hard, Mapping):
        return QuotaObject(namespace=namespace, name=name, limits={},
                           warnings=(f"{where}: spec.hard is not a map; its device limits are ignored",))
    managed = quota_resources(catalog)
    limits: dict[str, int] = {}
    warnings: list[str] = []
    for key, raw in hard.items():
        if not isinstance(key, str) or not key.startswith(LIMIT_PREFIX):
            continue
        resource = key[len(LIMIT_PREFIX):]
        if resource not in managed:
            continue
        try:
            limits[resource] = parse_whole_quantity(raw, where=f"{where}: spec.hard {key}", maximum=MAX_QUOTA_VALUE)
        except QuantityError as error:
            warnings.append(f"{error}; this limit is ignored")
    return QuotaObject(namespace=namespace, name=name, limits=limits, warnings=tuple(warnings))


def effective_limits(objects: Iterable[QuotaObject]) -> dict[str, int]:
    """A namespace's limit per resource from all its quota objects: the smallest where several set one key.

    HAMi keeps the value of the object it saw last, and drops the limit when any of them is deleted; the smallest is
    what Kubernetes' own quota admission enforces (every object must hold) and does not depend on event order.
    """
    limits: dict[str, int] = {}
    for quota in objects:
        for resource, limit in quota.limits.items():
            limits[resource] = min(limit, limits.get(resource, limit))
    return limits


def booking_quota_use(booking: Mapping[str, DeviceUsage], grants: PodGrants, resources: Mapping[str, QuotaResource],
                      families: Mapping[str, tuple[str, str]]) -> dict[str, int]:
    """What one pod's ``booking`` counts against its namespace, per quota resource.

    ``booking`` is the pod's per-device booking, already the larger of its peak init container and the sum of its
    containers on each device, and only the containers once its init containers have finished (`pod_booking`);
    ``grants`` say which family each device belongs to; ``families`` maps a family's common word to its
    ``(memory resource, cores resource)`` ("" where it has none: `family_quota_names`).
    """
    vendor_of = {grant.uuid: grant.vendor for container in grants for grant in container}
    use: dict[str, int] = {}
    for uuid, held in booking.items():
        memory_resource, cores_resource = families.get(vendor_of.get(uuid, ""), ("", ""))
        if memory_resource in resources and held.memory_mib:
            use[memory_resource] = use.get(memory_resource, 0) + held.memory_mib
        if cores_resource in resources and held.cores:
            use[cores_resource] = use.get(cores_resource, 0) + held.cores
    return use


def family_quota_names(catalog: DeviceCatalog) -> dict[str, tuple[str, str]]:
    """Per family common word, its ``(memory resource, cores resource)``."""
    return {family.cw: (family.resources.memory, family.resources.cores) for family in catalog}


def spec_request(containers: Sequence[ContainerRequest]) -> tuple[int, int]:
    """What admission counts of one family's ask: ``(memory MiB, cores)``, each the larger of the containers' sum and
    the largest init container, a container counting its memory and cores once per device it asks for.

    A percentage or whole-device memory ask is 0 here: its MiB depend on the device it lands on, which the filter
    knows and admission does not.
    """
    memory = cores = init_memory = init_cores = 0
    for ask in containers:
        if ask.count == 0:
            continue
        ask_memory, ask_cores = ask.memory_mib * ask.count, ask.cores * ask.count
        if ask.init:
            init_memory, init_cores = max(init_memory, ask_memory), max(init_cores, ask_cores)
        else:
            memory, cores = memory + ask_memory, cores + ask_cores
    return max(memory, init_memory), max(cores, init_cores)


@dataclass(frozen=True, slots=True)
class FamilyQuota:
    """What a namespace's limits leave one family, before the pod being judged: MiB and cores it may still book
    (None: no limit; negative: the namespace is already over a limit that was lowered)."""

    memory_left_mib: int | None
    cores_left: int | None


@dataclass(frozen=True, slots=True)
class QuotaExcess:
    """One limit a request would pass: what an admission denial and ``kubectl hami explain`` say."""

    namespace: str
    resource: str
    limit: int
    memory_factor: int
    used: int
    request: int

    def describe(self) -> str:
        """``namespace N, R: limit L, used U, request Q`` (a memory limit in 256 MiB units shows its MiB)."""
        limit = f"{self.limit}" if self.memory_factor <= 1 else \
            f"{self.limit} (x {self.memory_factor} = {self.limit * self.memory_factor} MiB)"
        return f"namespace {self.namespace}, {self.resource}: limit {limit}, used {self.used}, request {self.request}"


@dataclass(frozen=True, slots=True)
class NamespaceQuota:
    """A namespace's device limits (by resource) and what its pods book now (by resource, bookings not yet bound
    included)."""

    namespace: str
    limits: Mapping[str, int] = field(default_factory=dict)
    used: Mapping[str, int] = field(default_factory=dict)

    def excess(self, resource: QuotaResource, request: int) -> QuotaExcess | None:
        """The excess when ``request`` more of ``resource`` passes its limit, else None (no limit: never).

        Memory fails when used + request > limit × memory factor (factor above 1 only), cores when used + request >
        limit; so an explicit 0 blocks any non-zero request.
        """
        limit = self.limits.get(resource.name)
        if limit is None:
            return None
        used = self.used.get(resource.name, 0)
        factor = resource.memory_factor if resource.memory else 1
        if used + request > limit * factor:
            return QuotaExcess(self.namespace, resource.name, limit, factor, used, request)
        return None

    def booking_excess(self, use: Mapping[str, int], resources: Mapping[str, QuotaResource]) -> list[QuotaExcess]:
        """The limits a booking of ``use`` (by resource, `booking_quota_use`) would pass on top of the use."""
        found = (self.excess(resources[name], amount) for name, amount in sorted(use.items()) if name in resources)
        return [excess for excess in found if excess is not None]

    def family_quota(self, family: Family) -> FamilyQuota | None:
        """What this namespace's limits leave ``family`` (None when neither its memory nor its cores is limited)."""
        names = family.resources
        memory_limit = self.limits.get(names.memory) if names.memory else None
        cores_limit = self.limits.get(names.cores) if names.cores else None
        if memory_limit is None and cores_limit is None:
            return None
        factor = max(family.memory_factor, 1)
        return FamilyQuota(
            memory_left_mib=None if memory_limit is None else memory_limit * factor - self.used.get(names.memory, 0),
            cores_left=None if cores_limit is None else cores_limit - self.used.get(names.cores, 0))

    def pod_quota(self, request: PodRequest, catalog: DeviceCatalog) -> PodQuota | None:
        """What the limits leave the families ``request`` asks for (None when none of them is limited, or when the
        room left surely covers whatever the pod could book: then the filter checks nothing per device)."""
        if not self.limits:
            return None
        families = []
        for cw, containers in request.blocks():
            family = catalog.get(cw)
            left = self.family_quota(family) if family is not None else None
            # A family with dynamic MIG (or partitions) books an instance's profile, which may be larger than the ask
            # (4,000 MiB asked, 1g.5gb's 4,864 booked): only the fit, which knows the profile, can tell, as /bind will
            # count it.
            profiled = family is not None and family.partitioning is not None
            if left is not None and not _surely_within(left, containers, profiled=profiled):
                families.append((cw, left))
        return PodQuota(families=tuple(families)) if families else None

    def booked_cores_notes(self, request: PodRequest, catalog: DeviceCatalog) -> list[str]:
        """An admission warning per family of the pod whose cores this namespace limits and whose devices book cores
        in their own unit (`Family.core_booking`: AMD's compute units, AWS Neuron's core bitmasks). Admission counts
        the cores as asked, as HAMi v2.10's webhook does (``fitResourceQuota``: ``Coresreq × Nums``); what a grant
        books depends on the device the filter picks, which counts that, so the pod may wait with
        ``ResourceQuotaNotFit`` where HAMi v2.10, whose AMD and Neuron ``Fit`` checks no quota, would place it."""
        notes = []
        for cw, containers in request.blocks():
            family = catalog.get(cw)
            booking = family.core_booking if family is not None else None
            if family is None or booking is None or not any(ask.count for ask in containers):
                continue
            limit = self.limits.get(family.resources.cores) if family.resources.cores else None
            if limit is None:
                continue
            notes.append(f"namespace {self.namespace} limits {family.resources.cores} to {limit}: admission counts "
                         f"{spec_request(containers)[1]} as asked (as HAMi v2.10's webhook), but placing the pod "
                         f"counts the {booking.unit} its devices book, known only once they are chosen; the pod may "
                         f"wait with ResourceQuotaNotFit where HAMi v2.10, which checks no {family.label} quota when "
                         f"placing, would place it")
        return notes

    def admission_excess(self, request: PodRequest, catalog: DeviceCatalog) -> QuotaExcess | None:
        """The first limit the pod's spec would pass (families in fit order, memory before cores), else None."""
        if not self.limits:
            return None
        resources = quota_resources(catalog)
        for cw, containers in request.blocks():
            family = catalog.get(cw)
            if family is None:
                continue
            memory, cores = spec_request(containers)
            if memory == 0 and cores == 0:
                continue
            for name, amount in ((family.resources.memory, memory), (family.resources.cores, cores)):
                resource = resources.get(name) if name else None
                found = self.excess(resource, amount) if resource is not None else None
                if found is not None:
                    return found
        return None


def _surely_within(left: FamilyQuota, containers: Sequence[ContainerRequest], *, profiled: bool = False) -> bool:
    """Whether the most ``containers`` could book (every container's devices at once, a percentage or whole-device
    ask as the largest device there is) stays within ``left``. With ``profiled`` (dynamic MIG) an ask may be rounded
    up to a profile: as much as a whole device and 100 cores per instance. A family whose devices book cores in their
    own unit (`ContainerRequest.core_booking`: AMD's compute units, Neuron's core bitmasks) may book up to a device's
    most cores for any ask, as the bind will count them."""
    memory = sum(ask.count * (MAX_DEVICE_MEMORY_MIB if profiled else ask.memory_mib or MAX_DEVICE_MEMORY_MIB)
                 for ask in containers)
    cores = sum(ask.count * (MAX_TASK_CORES if profiled else MAX_DEVICE_CORES if ask.core_booking is not None
                             else ask.cores) for ask in containers)
    return ((left.memory_left_mib is None or memory <= left.memory_left_mib)
            and (left.cores_left is None or cores <= left.cores_left))


@dataclass(frozen=True, slots=True)
class PodQuota:
    """What the namespace's limits leave a pod, per family it asks for (hashable: part of a fit's memo key)."""

    families: tuple[tuple[str, FamilyQuota], ...]

    def get(self, cw: str) -> FamilyQuota | None:
        """The family's room, None when the family is not limited."""
        for family, left in self.families:
            if family == cw:
                return left
        return None


class QuotaTally:
    """The pod's own picks of one family on one node while it is fitted, and whether one more device still fits
    the namespace's room.

    A pod counts as it will be booked: per device the larger of its peak init container and the sum of its
    containers, summed over devices. A candidate device is judged on the picks so far plus itself.
    """

    __slots__ = ("_app", "_cores", "_init", "_memory", "quota")

    def __init__(self, quota: FamilyQuota) -> None:
        self.quota = quota
        self._init: dict[str, tuple[int, int]] = {}
        self._app: dict[str, tuple[int, int]] = {}
        self._memory = 0
        self._cores = 0

    def _after(self, uuid: str, memory_mib: int, cores: int, init: bool) -> tuple[int, int]:
        peak = self._init.get(uuid, (0, 0))
        summed = self._app.get(uuid, (0, 0))
        before = (max(peak[0], summed[0]), max(peak[1], summed[1]))
        if init:
            peak = (max(peak[0], memory_mib), max(peak[1], cores))
        else:
            summed = (summed[0] + memory_mib, summed[1] + cores)
        return (self._memory - before[0] + max(peak[0], summed[0]),
                self._cores - before[1] + max(peak[1], summed[1]))

    def fits(self, uuid: str, memory_mib: int, cores: int, init: bool) -> bool:
        """Whether the picks so far plus ``memory_mib`` and ``cores`` on device ``uuid`` stay within the room."""
        memory, total_cores = self._after(uuid, memory_mib, cores, init)
        left_memory, left_cores = self.quota.memory_left_mib, self.quota.cores_left
        return (left_memory is None or memory <= left_memory) and (left_cores is None or total_cores <= left_cores)

    def covers(self, memory_mib: int, cores: int) -> bool:
        """Whether ``memory_mib`` and ``cores`` more, on any devices, surely stay within the room: then no device
        needs a check of its own (a device adds at most its own ask to the pod's count)."""
        left_memory, left_cores = self.quota.memory_left_mib, self.quota.cores_left
        return ((left_memory is None or self._memory + memory_mib <= left_memory)
                and (left_cores is None or self._cores + cores <= left_cores))

    def copy_from(self, other: QuotaTally) -> None:
        """Take ``other``'s picks (a trial that may be thrown away)."""
        self._init, self._app = dict(other._init), dict(other._app)
        self._memory, self._cores = other._memory, other._cores

    def add(self, uuid: str, memory_mib: int, cores: int, init: bool) -> None:
        """Count a device picked for a container."""
        self._memory, self._cores = self._after(uuid, memory_mib, cores, init)
        if init:
            peak = self._init.get(uuid, (0, 0))
            self._init[uuid] = (max(peak[0], memory_mib), max(peak[1], cores))
        else:
            summed = self._app.get(uuid, (0, 0))
            self._app[uuid] = (summed[0] + memory_mib, summed[1] + cores)


class QuotaBook(Protocol):
    """Where admission finds a namespace's limits and use (the cluster cache)."""

    def namespace_quota(self, namespace: str) -> NamespaceQuota:
        """The namespace's device limits and current use."""
        ...


def quota_usage_rows(limits: Mapping[str, Mapping[str, int]], used: Mapping[str, Mapping[str, int]]
                     ) -> list[tuple[str, str, int | None, int]]:
    """``(namespace, resource, limit or None, used)`` for every namespace and resource with a limit or a use, sorted:
    what the metrics, ``kubectl hami inspect`` and the dashboard list."""
    rows = []
    for namespace in sorted(limits.keys() | used.keys()):
        ns_limits, ns_used = limits.get(namespace, {}), used.get(namespace, {})
        for resource in sorted(ns_limits.keys() | ns_used.keys()):
            amount = ns_used.get(resource, 0)
            limit = ns_limits.get(resource)
            if limit is not None or amount:
                rows.append((namespace, resource, limit, amount))
    return rows


__all__ = ["EXCEEDING", "LIMIT_PREFIX", "FamilyQuota", "NamespaceQuota", "PodQuota", "QuotaBook", "QuotaExcess",
           "QuotaObject", "QuotaResource", "QuotaTally", "booking_quota_use", "effective_limits",
           "family_quota_names", "memory_factors", "parse_resource_quota", "quota_resources", "quota_usage_rows",
           "spec_request"]

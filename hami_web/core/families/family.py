"""A device family: one kind of accelerator as data plus a few rules (docs/device-families.md#device-families).

HAMi's vendors each implement a ~100-line ``Devices`` interface and copy the fit loop; ours are records. What
differs between NVIDIA, Hygon and Iluvatar is names (resources, annotation keys, the "common word" on the wire),
units (memory factor), defaults (cores) and a handful of switches (NUMA binding, cordon, topology scores, the
webhook's rewrites). The one fit loop, codec and webhook read those fields, so adding a family is one module and
one registration, and nothing else in the code asks which vendor it is looking at.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from hami_web.core.devices import Device
from hami_web.core.families.devicetypes import COMMON_WORD, DeviceTypes
from hami_web.core.groups import Grouping
from hami_web.core.nodelocks import BIND_LOCK, MUTEX_LOCK, LockRule, order_rules
from hami_web.core.partitions import Partitioning


class DeviceConfigError(ValueError):
    """The device families cannot be built as configured; the message names the key and what is wrong."""


# HAMi's node lock, shared by every family that does not bring its own.
NODE_LOCK = MUTEX_LOCK.key


class InventorySource(Protocol):
    """Where a family's devices are read from when it is not a register annotation (Cambricon: the node's capacity).

    ``devices`` returns the node's devices of the family, None when the node has none; it raises
    `hami_web.core.devices.AnnotationError` naming what is unreadable (the resource or label it read).
    """

    def devices(self, node: Mapping[str, Any]) -> tuple[Device, ...] | None:
        """The family's devices on ``node`` (a Node object as the API sends it), None when it has none."""
        ...


class NodeScore(Protocol):
    """A family's own term of the node score (HAMi's ``ScoreNode``), for the nodes where a pod gets its devices.

    ``keys`` are the node annotations it reads (the cache keeps them on the inventory); ``term`` is added to the node's
    score under both policies (binpack takes the highest total, spread the lowest), from those annotations, the number
    of the family's devices the pod gets there, and the node policy. It must not depend on which devices: the node is
    ranked with it before any fit.
    """

    @property
    def keys(self) -> tuple[str, ...]: ...

    def term(self, annotations: Mapping[str, str], devices: int, policy: str) -> float:
        """The term for a pod getting ``devices`` of the family on a node with ``annotations`` (its ``keys`` only)."""
        ...


class CoreBooking(Protocol):
    """How a family's devices give out their cores when a grant does not book the number asked as it is: AMD's
    percentage of each GPU's compute units, AWS Neuron's bitmask of the NeuronCores it takes.

    ``ask`` turns what a container gives (its count, 0 when absent, and its cores, None when absent) into the devices
    and the cores per device it asks; it raises ValueError naming the resource when the ask is not one HAMi reads.
    ``book`` is what a grant of those cores books on ``device`` beside ``used`` (the cores its other grants book), None
    when the device has too few free (``CardInsufficientCore``). ``overbooked`` tells the bind's re-check that two
    bookings cannot share a device. ``unit`` names what a booking counts in, which a namespace's quota on the cores
    resource counts too (docs/quotas.md#namespace-quotas): only the filter knows it, from the device.
    """

    @property
    def unit(self) -> str: ...

    def ask(self, count: int, cores: int | None, resources: ResourceNames) -> tuple[int, int]: ...

    def book(self, device: Device, used: int, cores: int) -> int | None: ...

    def overbooked(self, device: Device, theirs: int, ours: int) -> bool: ...


class PluginHealth(Protocol):
    """How a node says a family's device plugin is gone besides its handshake (HAMi's AMD ``CheckHealth``: the node's
    capacity of its count resource, `hami_web.core.families.capacity.CapacityHealth`)."""

    def gone(self, node: Mapping[str, Any]) -> bool:
        """Whether ``node`` (a Node object as the API sends it) says the family's device plugin is gone."""
        ...


class SharingRule(Protocol):
    """How a family's shared cards admit one more pod beyond memory and cores (Metax sGPU: one QoS policy a card,
    online and offline app classes), as values the cache can sum from bookings.

    ``ask`` reads a pod's class from its annotations (a string the request carries); ``books_cores`` says whether a
    pod of that class books its cores; ``tags`` is what a grant of it holds on its card (the card's usage sums them, so
    the state is rebuilt from the pods after a restart and two servers agree); ``problem`` is the check a card fails
    for the ask given its tasks, the tags held on it and what its device plugin reports (``Device.sharing``), "" when
    none; ``pick`` may choose among the passing cards itself; ``score`` is the placement's node-score term: at most
    ``reach`` on any node (None: the ask is not scored; 0 is a term, Metax sGPU's online pods'), at most ``bound`` on a
    node whose devices are idle or not and hold those tags (-inf: the pod cannot fit there).
    """

    def ask(self, annotations: Mapping[str, str]) -> str: ...

    def books_cores(self, ask: str) -> bool: ...

    def tags(self, ask: str, cores: int) -> tuple[str, ...]: ...

    def problem(self, ask: str, cores: int, device: Device, tasks: int, held: tuple[str, ...]) -> str: ...

    def pick(self, ask: str, cores: int, candidates: Sequence[Device], held: Sequence[tuple[str, ...]],
             count: int) -> list[int] | None:
        """``count`` of the ``candidates`` (indexes, in the policy's order) the rule takes for the ask, None to leave
        the policy's choice."""
        ...

    def reach(self, ask: str, cores: int, count: int) -> int | None: ...

    def bound(self, ask: str, cores: int, counts: Sequence[int], idle: Sequence[bool],
              held: Sequence[tuple[str, ...]]) -> float: ...

    def score(self, ask: str, cores: int, granted: Sequence[Device], devices: Sequence[Device],
              idle: Sequence[bool], held: Sequence[tuple[str, ...]]) -> float:
        """The node-score term of a placement: the ``granted`` cards of the node's ``devices`` (with, per device,
        whether it was idle and what it held before the pod), added under binpack and taken off under spread."""
        ...


# Extra pod annotations a family's device plugin reads, from the family's grants (one entry per container).
BookingExtras = Callable[[Sequence[Sequence[Any]]], dict[str, str]]
# Extra pod annotations only a bind writes: from the family's grants, the pod's container names (init containers
# first) and the bind's time in nanoseconds (Enflame DRS's ``assigned-containers`` and ``gcu-assigned-time``).
BindExtras = Callable[[Sequence[Sequence[Any]], Sequence[str], int], dict[str, str]]


@dataclass(frozen=True, slots=True)
class WholeCores:
    """An ``amend`` hook: a registered device as HAMi's ``GetNodeDevices`` leaves it for Biren and Vastai (``devcore``
    forced to 100, "only for calscore use") with the family's type, which their ``checkType`` always matches."""

    type: str

    def __call__(self, device: Device) -> Device:
        return replace(device, cores=100, type=self.type)


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """Extended-resource names a container asks a family's devices with ("" = the family has no such resource)."""

    count: str = "nvidia.com/gpu"
    memory: str = "nvidia.com/gpumem"
    memory_percentage: str = "nvidia.com/gpumem-percentage"
    cores: str = "nvidia.com/gpucores"
    priority: str = "nvidia.com/priority"

    def managed(self) -> tuple[str, ...]:
        """The names that make a container one of this family's (priority alone does not)."""
        return tuple(name for name in (self.count, self.memory, self.memory_percentage, self.cores) if name)

    def all(self) -> tuple[str, ...]:
        """Every resource name of the family, priority included."""
        return tuple(name for name in (*self.managed(), self.priority) if name)


@dataclass(frozen=True, slots=True)
class VnpuTemplate:
    """One way a device plugin may carve a device (an Ascend vNPU template): its name and memory."""

    name: str
    memory_mib: int


@dataclass(frozen=True, slots=True)
class SoftSplit:
    """A family's soft split (Ascend's ``hami-core`` vNPU mode): a pod asks for it with its annotation ``key`` =
    ``mode``; a node allows it by its ``node_key`` annotation ("true") when present, else ``default``."""

    key: str
    mode: str
    node_key: str = ""
    default: bool = False

    def allowed(self, node_annotations: Mapping[str, object]) -> bool:
        """Whether a node with ``node_annotations`` lets the family's pods use soft split."""
        value = node_annotations.get(self.node_key) if self.node_key else None
        return self.default if value is None else value == "true"


@dataclass(frozen=True, slots=True)
class MemoryTemplates:
    """The templates of a hard-split device (sorted by memory), what a whole device books (``allocatable_mib``)
    and the largest ask a whole device takes (``capacity_mib``)."""

    templates: tuple[VnpuTemplate, ...]
    allocatable_mib: int
    capacity_mib: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "templates", tuple(sorted(self.templates, key=lambda t: t.memory_mib)))

    def round_up(self, memory_mib: int) -> tuple[int, str] | None:
        """The smallest template holding ``memory_mib`` (memory, name), else the whole device (allocatable, "")
        when the ask is within its capacity, else None: no way to run it."""
        for template in self.templates:
            if memory_mib <= template.memory_mib:
                return template.memory_mib, template.name
        if memory_mib <= self.capacity_mib:
            return self.allocatable_mib, ""
        return None

    def name_for(self, memory_mib: int) -> str:
        """The template a booking of ``memory_mib`` runs as ("" = the whole device)."""
        rounded = self.round_up(memory_mib)
        return rounded[1] if rounded else ""


@dataclass(frozen=True, slots=True)
class SliceSizes:
    """A device shared in memory slices of fixed sizes (Kunlunxin vXPU): an ask is rounded up to the smallest size
    holding it, or to the whole device (``whole_mib``, also for an ask larger than any size); its cores are its share
    of the whole device (memory × 100 ÷ whole); no memory asked is the whole device with 100 cores; and a device
    holds slices of one size only."""

    sizes_mib: tuple[int, ...]
    whole_mib: int

    def round_up(self, memory_mib: int) -> int:
        """The slice an ask of ``memory_mib`` gets."""
        return next((size for size in sorted(self.sizes_mib) if memory_mib <= size), self.whole_mib)

    def ask(self, memory_mib: int) -> tuple[int, int]:
        """(memory MiB, cores) a container asking ``memory_mib`` (0: none) books on each device."""
        if memory_mib <= 0:
            return self.whole_mib, 100
        rounded = self.round_up(memory_mib)
        return rounded, rounded * 100 // self.whole_mib


@dataclass(frozen=True, slots=True)
class AdmissionAsk:
    """What one container asks of a family, as the webhook's resize hook sees it: the count and the cores (limits
    else requests), the memory in limits (None when absent), and whether the pod asks for soft split."""

    count: int
    memory: int | None
    cores: int | None
    soft_split: bool


@dataclass(frozen=True, slots=True)
class AdmissionRewrite:
    """The resize hook's answer: the count and memory to write (None = leave as is), or a refusal in HAMi's words."""

    count: int = 0
    memory: int | None = None
    refusal: str = ""
    cores: int | None = None  # the cores to write (None = leave as is)
    pod_annotations: tuple[tuple[str, str], ...] = ()  # annotations to set on the pod (Mthreads' request-gpu-num)


class BookedDevice(Protocol):
    """What a family's ``booking_extras`` reads of one granted device (`hami_web.core.grants.DeviceGrant`)."""

    @property
    def uuid(self) -> str: ...
    @property
    def memory_mib(self) -> int: ...
    @property
    def cores(self) -> int: ...
    @property
    def soft_split(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class AdmissionRules:
    """What the webhook does to a container of this family
    (docs/webhook-and-extender.md#the-admission-webhook-post-webhook for NVIDIA, docs/device-families.md#device-families
    for the others).

    - ``count_in_requests``: a count in ``requests`` alone makes the container ours (NVIDIA); else only limits;
    - ``default_count``: a memory or cores ask without a count gets this count in limits (0 = no such rule);
    - ``whole_card_cores``: a whole-card memory ask without cores gets 100 cores (exclusive card);
    - ``cores_per_count``: a count above 1 sets cores to 100 × count (Iluvatar: multi-device means whole cards);
    - ``priority_env``: the env variable that carries the priority resource;
    - ``container_name_env``: an env variable set to the container's name when absent (Iluvatar's sic spelling);
    - ``visible_devices_env``: with ``overwrite_env``, containers that use no family of that variable get it set
      to ``visible_devices_off``;
    - ``resize``: a hook that rewrites (or refuses) the count and memory of a container of the family (Ascend's
      templates), with ``pair_count`` (a single device is rounded up to a module of two) for it to read;
    - ``runtime_class_name``: set on a pod that uses the family and names none;
    - ``every_container_env``: variables set on every container the webhook reviews, whether it uses the family or
      not (NVIDIA's ``gpuCorePolicy``: HAMi v2.10 writes ``GPU_CORE_UTILIZATION_POLICY`` in each one);
    - ``notice``: an admission warning for every pod given ``every_container_env`` (a setting passed on as written
      that the device plugin does not know);
    - ``positive_count``: a count of 0 or less is refused (HAMi's Mthreads: "must be greater than 0");
    - ``route_without_count``: memory or cores (in limits, or requests too with ``count_in_requests``) make the
      container the family's (routed to us) even without a count, and no count is added (HAMi's AMD: such a container
      then asks no device; AWS Neuron: its cores are its devices).

    - ``any_resource_routes``: the count (in limits or requests), or the memory or the cores alone, make the container
      the family's, with no count added; each is copied to limits and requests where one lacks it; memory of 0 or
      less and cores outside (0, 100] are refused (HAMi's Enflame DRS, whose count is a partition's slices).

    A family with a `CoreBooking` has its ``ask`` refuse what it cannot read (AMD: a percentage outside 1..100 beside
    a count; AWS Neuron: a core count that is not 1 or even), in HAMi's words; its cores are never clamped to 100.
    """

    count_in_requests: bool = False
    default_count: int = 0
    whole_card_cores: bool = False
    cores_per_count: bool = False
    priority_env: str = ""
    container_name_env: str = ""
    visible_devices_env: str = ""
    visible_devices_off: str = "none"
    overwrite_env: bool = False
    resize: Callable[[Family, AdmissionAsk], AdmissionRewrite] | None = None
    pair_count: bool = False
    runtime_class_name: str = ""
    every_container_env: tuple[tuple[str, str], ...] = ()
    notice: str = ""
    positive_count: bool = False
    route_without_count: bool = False
    any_resource_routes: bool = False
    # A rule on the whole pod once its containers are read: from the pod's annotations and each container's count of
    # the family, the annotations to add and a refusal ("" none) in HAMi's words (Metax sGPU's QoS and app class).
    pod_rule: Callable[[Mapping[str, str], Sequence[int]], tuple[Mapping[str, str], str]] | None = None


@dataclass(frozen=True, slots=True)
class Family:
    """One accelerator family as the scheduler and the device plugin see it (one row of the table in
    docs/device-families.md#device-families).

    ``cw`` is HAMi's common word: the vendor field of the pod device annotation and the key of a family in
    HAMi's registry. ``memory_factor`` turns the memory resource's unit into MiB. ``default_memory_mib`` 0 means a
    container that gives no memory asks for the whole device. The ``*_key`` fields are annotation keys; an empty
    selection key (or ``handshake_key``) means the family has no such selection (handshake). Three hooks for the
    families that differ in kind: ``inventory`` reads the devices from elsewhere than ``register_key``; ``types`` says
    which device types serve the family (`hami_web.core.families.devicetypes`); ``booking_extras``
    adds pod annotations to a booking. ``lock`` is the node lock a bind of the family's pods takes for its device
    plugin (None: HAMi takes none; the bind then takes hami-web's own `BIND_LOCK`, which it removes once bound). An
    empty ``to_allocate_key`` means the device plugin reads only ``allocated_key``, and only that is written.

    Ascend's differences (docs/device-families.md#ascend-npus) are data too: ``templates`` (hard split), ``soft_split``
    (`SoftSplit`), ``grouping`` (how a multi-device container is picked: a `hami_web.core.groups.Grouping`, e.g. HCCS
    groups or whole modules) and ``predicate_time`` (the bind also writes
    HAMi's ``predicate-time``). ``slices``: the device is shared in slices of fixed sizes (`SliceSizes`).
    """

    cw: str
    kind: str
    label: str
    resources: ResourceNames
    register_key: str
    handshake_key: str
    to_allocate_key: str
    allocated_key: str
    lock: LockRule | None = MUTEX_LOCK
    memory_factor: int = 1
    default_memory_mib: int = 0
    default_cores: int = 0
    use_type_key: str = ""
    nouse_type_key: str = ""
    use_uuid_key: str = ""
    nouse_uuid_key: str = ""
    numa_bind_key: str = ""
    mode_key: str = ""
    cordon: bool = False
    topology: bool = False
    admission: AdmissionRules = field(default_factory=AdmissionRules)
    inventory: InventorySource | None = None
    booking_extras: BookingExtras | None = None
    templates: MemoryTemplates | None = None
    soft_split: SoftSplit | None = None
    grouping: Grouping | None = None
    predicate_time: bool = False
    # A container asks the family's devices by count alone and its grants book no memory and no cores (HAMi's Biren:
    # the device's shares, ``count``, are all that is used up).
    count_only: bool = False
    # How HAMi's ``GetNodeDevices`` amends each registered device (Biren forces ``devcore`` to 100 and the type to its
    # common word); None: as registered.
    amend: Callable[[Device], Device] | None = None
    # The family's own node-score term (Metax GPU's topology loss); None: none.
    node_score: NodeScore | None = None
    # A container asking N devices asks memory and cores for all N together: each device books its share (Mthreads).
    divides_ask: bool = False
    # A pod's later containers may only use the card its earlier ones hold (HAMi's ``customFilterRule``: Metax GPU,
    # Mthreads), else ``CardNotFoundCustomFilterRule``.
    one_card_per_pod: bool = False
    # Pod annotations the bind writes besides the booking: the node's name (``predicate_node_key``) and the bind's time
    # in nanoseconds (``predicate_ns_key``), as HAMi's ``PatchAnnotations`` does for Mthreads and AWS Neuron.
    predicate_node_key: str = ""
    predicate_ns_key: str = ""
    # Further (use, nouse) UUID annotation pairs a device must pass too (Kunlunxin: HAMi's and Baidu's keys).
    more_uuid_keys: tuple[tuple[str, str], ...] = ()
    slices: SliceSizes | None = None
    # How a grant books cores on a device when not as asked (AMD: compute units; AWS Neuron: a core bitmask).
    core_booking: CoreBooking | None = None
    # Which registered types serve the family and which its grants name (`DeviceTypes`: AMD any type and its product).
    types: DeviceTypes = COMMON_WORD
    # How a node says the device plugin is gone besides the handshake (AMD: no capacity); None: the handshake alone.
    health: PluginHealth | None = None
    # The devices are carved into partitions of fixed profiles (`hami_web.core.partitions.Partitioning`: Enflame DRS's
    # slice counts, NVIDIA's dynamic MIG): a container's ask is mapped to a profile, which it books; None: shared by
    # memory and cores.
    partitioning: Partitioning | None = None
    bind_extras: BindExtras | None = None
    # Cards shared under a rule beyond memory and cores (Metax sGPU's QoS and app classes); None: none.
    sharing: SharingRule | None = None
    # Reads the memory resource's quantity as MiB when its unit is not a plain factor (Metax sGPU: GiB unless the
    # quantity has a unit), `hami_web.core.quantities.QuantityError` when unreadable; None: × ``memory_factor``.
    read_memory: Callable[[object, str, str], int] | None = None

    @property
    def bind_lock(self) -> LockRule:
        """The node lock a bind of this family's pods takes: its device plugin's, else hami-web's `BIND_LOCK`."""
        return self.lock or BIND_LOCK

    @property
    def lock_key(self) -> str:
        """The node-lock annotation a bind of this family's pods takes."""
        return self.bind_lock.key

    def soft_split_allowed(self, node_annotations: Mapping[str, object]) -> bool:
        """Whether a node lets this family's pods use soft split (`SoftSplit.allowed`); never for a family without."""
        return self.soft_split is not None and self.soft_split.allowed(node_annotations)


@dataclass(frozen=True, slots=True)
class DeviceCatalog:
    """The enabled families of one server, in common-word order (the order multi-family pods are fitted in)."""

    families: tuple[Family, ...]
    _by_cw: Mapping[str, Family] = field(init=False, compare=False, repr=False)
    _partitionings: Mapping[str, Partitioning] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.families, key=lambda family: family.cw))
        seen: dict[str, Family] = {}
        for family in ordered:
            if family.cw in seen:
                raise DeviceConfigError(f"common word {family.cw} names two device families (each chip of "
                                        f"iluvatars and vnpus.configs needs a commonWord of its own, other than "
                                        f"NVIDIA and DCU)")
            seen[family.cw] = family
        object.__setattr__(self, "families", ordered)
        object.__setattr__(self, "_by_cw", seen)
        object.__setattr__(self, "_partitionings", {family.cw: family.partitioning for family in ordered
                                                    if family.partitioning is not None})

    def __iter__(self) -> Iterator[Family]:
        return iter(self.families)

    def __len__(self) -> int:
        return len(self.families)

    def get(self, cw: str) -> Family | None:
        """The family with common word ``cw``, None when it is not enabled."""
        return self._by_cw.get(cw)

    def __getitem__(self, cw: str) -> Family:
        return self._by_cw[cw]

    def managed_resources(self) -> tuple[str, ...]:
        """Every resource name of every family: what kube-scheduler must leave to the extender."""
        return tuple(dict.fromkeys(name for family in self.families for name in family.resources.all()))

    def score_keys(self) -> tuple[str, ...]:
        """The node annotations the families' node scores read, each once."""
        return tuple(dict.fromkeys(key for family in self.families if family.node_score
                                   for key in family.node_score.keys))

    def partitionings(self) -> Mapping[str, Partitioning]:
        """How each family that partitions its devices does (`Family.partitioning`), by common word: what a node's
        inventory asks for its devices (`hami_web.core.devices.NodeInventory.partitioning`)."""
        return self._partitionings

    def core_bookings(self) -> dict[str, CoreBooking]:
        """The families whose grants book cores their own way (`Family.core_booking`), by common word."""
        return {family.cw: family.core_booking for family in self.families if family.core_booking is not None}

    def lock_keys(self) -> tuple[str, ...]:
        """The node-lock annotation keys in use, each once."""
        return tuple(rule.key for rule in self.lock_rules())

    def lock_rules(self) -> tuple[LockRule, ...]:
        """The node locks in use, each once, in the order a bind takes them (`order_rules`)."""
        return order_rules([family.bind_lock for family in self.families])

    def lock_rule(self, key: str) -> LockRule:
        """The rule of node-lock annotation ``key`` (HAMi's own for a key no family names)."""
        return next((rule for rule in self.lock_rules() if rule.key == key), MUTEX_LOCK)

    def locks_for(self, families: Sequence[str]) -> tuple[LockRule, ...]:
        """The node locks a bind of a pod holding devices of ``families`` (common words) takes, in order."""
        return order_rules([self._by_cw[cw].bind_lock for cw in families if cw in self._by_cw])
